"""How a forward pass runs its layers. The model (``labkit.model.llama``) is the plain algorithm: each
layer op by op, as ``LlamaLayer.forward``'s diagram draws it. The runner chooses, each step, one of
these strategies (`choose`), and every one but the compiled one computes the plain algorithm's bits
(tests/model/test_forward_strategies.py):

    OpByOp            LlamaLayer.forward, layer after layer: the plain algorithm
    FusedRopeKVWrite  the same, with RoPE and the K/V write in one C call a layer
    WholeLayerInC     each layer one C call (a decode step on the batch-invariant CPU backend)
    CompiledHalves    the two dense halves of each layer torch.compile'd around the eager KV write and
                      attention (``labkit.model.compiled``; an approximation: Inductor may reorder)

Each carries the ``ops`` it computes with (``labkit.kernels.ops``: PyTorch's, or labkit's C kernels
where they give PyTorch's bits); the model's final norm and LM head use them too. Like vLLM's runner
choosing eager or CUDA graphs and nano-vllm's ``run_model``, the choice sits beside the model, not in it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Protocol

import torch
from torch import nn

from labkit.kernels.ops import TORCH_OPS, Ops, for_input

__all__ = ["CompiledHalves", "ForwardStrategy", "FusedRopeKVWrite", "OP_BY_OP", "OpByOp", "WholeLayerInC",
           "choose"]


class ForwardStrategy(Protocol):
    ops: Ops

    def run_layers(self, model: nn.Module, x: torch.Tensor, positions: torch.Tensor, kv_caches: list,
                   meta, backend: ModuleType) -> torch.Tensor:
        """x [T, hidden] (the embedded tokens) through every layer of ``model`` (a ``LlamaModel``):
        the hidden states after the last layer, [T, hidden]."""


class OpByOp:
    """Each layer's ``LlamaLayer.forward``: the plain algorithm."""

    __slots__ = ("ops",)

    def __init__(self, ops: Ops = TORCH_OPS):
        self.ops = ops

    def run_layers(self, model, x, positions, kv_caches, meta, backend):
        for layer, kv_cache in zip(model.layers, kv_caches):
            x = layer(x, positions, model.rotary, kv_cache, meta, backend, self.ops)
        return x


OP_BY_OP = OpByOp()


class FusedRopeKVWrite(OpByOp):
    """``LlamaLayer.forward`` with RoPE and the K/V write in one call (``ops.rope_write_kv``): about ten
    PyTorch kernels a layer fewer, the same bits."""

    __slots__ = ()

    def run_layers(self, model, x, positions, kv_caches, meta, backend):
        ops = self.ops
        for layer, (key_cache, value_cache) in zip(model.layers, kv_caches):
            q = ops.rope_write_kv(layer.qkv(x, ops).contiguous(), model.rotary, positions, meta.slot_mapping,
                                  key_cache, value_cache, layer.num_heads, layer.num_kv_heads)
            attn = backend.paged_attention(q, key_cache, value_cache, meta, layer.head_dim ** -0.5)
            x = layer.attention_output_and_mlp(x, attn, ops)
        return x


class WholeLayerInC(OpByOp):
    """Each layer in one C call (``ops.decode_layer``, ``kernels/csrc/decode_layer.c``): the same entry
    points in the same order as ``FusedRopeKVWrite``, so the same bits. ``plan``: ``ops.decode_plan``'s."""

    __slots__ = ("plan",)

    def __init__(self, ops: Ops, plan: tuple):
        super().__init__(ops)
        self.plan = plan

    def run_layers(self, model, x, positions, kv_caches, meta, backend):
        for layer, kv_cache in zip(model.layers, kv_caches):
            x = self.ops.decode_layer(layer, x, positions, model.rotary, kv_cache, meta.slot_mapping, self.plan)
        return x


class CompiledHalves:
    """``pieces``: compiled (attention_input, attention_output_and_mlp), from ``labkit.model.compiled``.
    The paged K/V write and attention run eagerly between them; the ops are PyTorch's (what they trace)."""

    __slots__ = ("pieces",)
    ops = TORCH_OPS

    def __init__(self, pieces: tuple):
        self.pieces = pieces

    def run_layers(self, model, x, positions, kv_caches, meta, backend):
        attention_input, output_and_mlp = self.pieces
        for layer, (key_cache, value_cache) in zip(model.layers, kv_caches):
            q, k, v = attention_input(layer, x, positions, model.rotary)
            backend.write_kv(k, v, key_cache, value_cache, meta.slot_mapping)
            attn = backend.paged_attention(q, key_cache, value_cache, meta, layer.head_dim ** -0.5)
            x = output_and_mlp(layer, x, attn)
        return x


def choose(model: nn.Module, input_ids: torch.Tensor, meta, kv_caches: list, backend: ModuleType,
           pieces: tuple | None = None) -> ForwardStrategy:
    """The fastest strategy that computes ``model``'s bits for this step (``input_ids`` [T], ``meta`` its
    attention metadata): the compiled halves where ``pieces`` are given; else, with the ops for the model's
    dtype and device (``labkit.kernels.ops.for_input``), whole layers in C where ``ops.decode_plan`` finds
    the step fits one call a layer, RoPE fused with the K/V write where every layer's pools take it, and
    op by op otherwise."""
    if pieces is not None:
        return CompiledHalves(pieces)
    weights = model.embed_tokens                     # the forward's dtype and device
    ops = for_input(weights, model.config)
    plan = ops.decode_plan(model, input_ids, meta, backend, kv_caches)
    if plan is not None:
        return WholeLayerInC(ops, plan)
    if kv_caches and all(ops.fuses_rope_and_kv_write(weights.dtype, kv_cache, backend) for kv_cache in kv_caches):
        return FusedRopeKVWrite(ops)
    return OpByOp(ops)
