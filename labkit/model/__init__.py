"""The model: a loader for the default GGUF model and local Hugging Face Llama directories, and our
own Llama forward pass over a paged KV cache."""
