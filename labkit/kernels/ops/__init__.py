"""The ops a Llama forward calls, behind one interface (`Ops`) with two implementations:

    torch_ops.TorchOps    PyTorch's kernels (products in the form the tuning chose): the reference
    native_ops.NativeOps  labkit's C kernels, each where it gives PyTorch's bits on this machine

`for_input` picks one per forward (``labkit.model.strategies.choose``). The model (``labkit.model.llama``) reaches its kernels only through
here, and nothing here imports the model or the attention backends: a model's config and a backend are
read through the attributes they carry (tests/project/test_layering.py holds both).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from labkit.kernels.ops import native_ops
from labkit.kernels.ops.native_ops import Dimensions, NativeOps
from labkit.kernels.ops.torch_ops import TORCH_OPS, TorchOps, prepare_forms

__all__ = ["TORCH_OPS", "Dimensions", "NativeOps", "Ops", "TorchOps", "for_input", "prepare_forms"]


class Ops(Protocol):
    """What a forward pass computes its layers with: four ops every implementation computes, with the same
    bits (tests/kernels/test_fused_small_ops.py, tests/kernels/test_native_kernel.py), and two fusions an
    implementation may offer where its predicate says so (PyTorch's offers neither): RoPE with the K/V write,
    and a whole decode layer in one call."""

    def linear(self, x: torch.Tensor, weight) -> torch.Tensor:
        """x: [T, in], weight: [out, in] (a tensor, or a module such as ``quant.Int4Linear``) -> [T, out]."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """weight * x / sqrt(mean(x²) + eps), in fp32 like Hugging Face's LlamaRMSNorm."""

    def add_rms_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(x + delta, rms_norm(x + delta)); x stays as it was."""

    def swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up for the fused gate/up output [T, 2I]."""

    def fuses_rope_and_kv_write(self, dtype: torch.dtype, kv_cache, backend) -> bool:
        """Whether `rope_write_kv` takes the RoPE and K/V write of a layer with this cache in a forward of
        this dtype (else ``Rotary`` and the backend's ``write_kv`` do)."""

    def rope_write_kv(self, heads: torch.Tensor, rotary: nn.Module, positions: torch.Tensor, slots: torch.Tensor,
                      key_pool: torch.Tensor, value_pool: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
        """RoPE on q and k of the fused QKV output ``heads`` and K, V written to the pools at ``slots``:
        returns q [T, num_heads, head_dim]."""

    def decode_plan(self, model: nn.Module, rows: torch.Tensor, meta, backend, kv_caches: list) -> tuple | None:
        """What `decode_layer` needs where every layer of this step runs as one call, else None (the
        layers run op by op). ``rows``: a tensor with a row per token of the step (its input ids);
        ``meta``: the step's attention metadata, handed to ``backend`` as it is."""

    def decode_layer(self, layer: nn.Module, x: torch.Tensor, positions: torch.Tensor, rotary: nn.Module,
                     kv_cache, slot_mapping: torch.Tensor, plan: tuple) -> torch.Tensor:
        """``LlamaLayer.forward`` in one call, with the same bits."""


def for_input(x: torch.Tensor, cfg: Dimensions) -> Ops:
    """The ops for a forward in x's dtype and on x's device (x: the embedded tokens, or the embedding
    table): the C ones where they apply (fp32 or bf16 on the CPU with the kernels built), else PyTorch's.
    The runner chooses how the layers use them (``labkit.model.strategies``)."""
    return native_ops.for_input(x, cfg) or TORCH_OPS
