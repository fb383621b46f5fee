"""The contract every attention backend meets, and the choice of one for a device.

A backend is anything with these two functions (a module satisfies the protocol): ``reference``
(the readable specification), ``cpu_batched`` (the fast CPU path, the CPU default) and
``triton_paged`` (the CUDA kernel, the GPU default).
"""

from __future__ import annotations

from types import ModuleType
from typing import Protocol, runtime_checkable

import torch

from labkit.attention import cpu_batched, reference
from labkit.attention.metadata import AttentionMetadata


@runtime_checkable
class AttentionBackend(Protocol):
    def write_kv(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                 value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Store the step's new K/V at ``slot_mapping``."""

    def paged_attention(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                        meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Causal attention of the step's queries over their paged context."""


def get_backend(name: str, device: torch.device) -> AttentionBackend | ModuleType:
    """``auto``: Triton on CUDA, the batched CPU path elsewhere."""
    if name == "auto":
        name = "triton" if device.type == "cuda" else "cpu_batched"
    if name == "triton":
        from labkit.attention import triton_paged  # imports triton: only when asked for
        return triton_paged
    return {"reference": reference, "cpu_batched": cpu_batched}[name]
