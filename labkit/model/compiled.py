"""``torch.compile`` for the decode step: the compiled-engine idea (TensorRT-LLM builds an engine
ahead of time; vLLM compiles its model with ``torch.compile`` and captures CUDA graphs) tried on
labkit's own layer, so lab 05 can measure what compiling buys on the learner's machine.

What is compiled: each layer's two dense halves, ``LlamaLayer.attention_input`` (RMSNorm, QKV,
RoPE) and ``LlamaLayer.attention_output_and_mlp`` (O projection, residual, RMSNorm, SwiGLU), which
Inductor can fuse. The paged KV write and the paged attention stay eager: they index the block pool
in place, which is the part a compiler cannot see through.

The price is paid once per process and row-count range: the first forward passes trace and compile
(tens of seconds on a laptop CPU; a shape range not seen before compiles again). The numbers are
an approximation of eager's: Inductor may fuse and reorder the RMSNorm's and SwiGLU's arithmetic,
so the last bits can differ and a greedy near-tie may flip (``tests/model/test_compiled.py`` checks greedy
agreement on a prompt; it is not part of the bit-exact guarantees).
"""

from __future__ import annotations

import functools

import torch

from labkit.model.llama import LlamaLayer


@functools.cache
def compiled_pieces() -> tuple:
    """The two compiled layer halves, shared by every engine in the process (compiled lazily, on the
    first call; the weights are inputs, so one compilation serves every layer and model)."""
    return (torch.compile(LlamaLayer.attention_input, dynamic=True),
            torch.compile(LlamaLayer.attention_output_and_mlp, dynamic=True))
