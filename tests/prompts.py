"""Varied prompts for parity tests: English, Chinese, code and chat."""

PARITY_PROMPTS = [
    "What is the capital of France? Answer in one paragraph.",
    "用三句话解释什么是KV缓存。",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Tell me a short story about a cat who learns to play the piano.",
    "请写一首关于秋天的短诗。",
    "def quicksort(xs):\n    # complete this function\n",
    "Give me three tips for staying focused while studying.",
    "把这句话翻译成英文：今天的天气非常好，我们去公园散步吧。",
]
