"""``EngineConfig(weights="q4_1")``: the target runs on the 4-bit codes its GGUF file ships.

The default model ships as ``SmolLM2-135M-Instruct.Q4_1.gguf``. ``weights="dense"`` (the default)
runs the dequantised fp32 weights, the reference that equals ``transformers`` token for token.
``weights="q4_1"`` keeps every layer matrix as the file's own Q4_1 codes (``gguf_codes``: 4-bit
code, fp16 scale d and minimum m per group of 32, nothing re-quantised) and multiplies with
PyTorch's int4 CPU kernel (``quant.Int4Linear``): a decode step reads ~0.6 bytes per layer weight
instead of 4. (On a GPU ``Int4Linear`` holds the kernel's dequantised values as a bf16 matrix: the
same numbers, without the byte savings.) A decode step runs each layer as one C call
(``ops.native_ops.NativeOps.decode_layer``), whose int4 product (``native.int4_rows``) gives PyTorch's kernel's
bits in its AVX512 or AVX2 form; labkit checks that on the machine first and otherwise runs the layers
op by op.

It is an approximation of the fp32 reference, not a copy of it. The codes are exact; what rounds:

- inside each layer matmul the activations, d and ``m + 8 d`` are bf16 (the kernel's only fast
  path; fp32 scales would keep d and m exact but take the kernel's scalar path, measured 27x
  slower), and the product is returned in bf16 before it joins the fp32 residual stream;
- everything else stays as in the dense fp32 model: embedding, norms, RoPE, attention, KV cache, and
  the LM head's product (below).

The tied embedding / LM head is Q8_0 in the file (8-bit codes, fp16 d). The LM head runs those
codes too (``Q8Head``, labkit's C kernel ``native.q8_rows``), in fp32: d times an 8-bit code is exact
in fp32, so it multiplies by exactly the dense head's values, in the fp32 C product's order, reading
1.125 bytes a weight instead of 4 (1.9 ms a token instead of 3.6 with the int4 kernel on two 4-bit
planes, which rounded the activations to bf16; 2-core AMD EPYC). The embedding lookup reads one fp32
row (the same exact values).

Agreement with the fp32 reference, greedy, over the 8 parity prompts (``tests/prompts.py``), 48 new
tokens each (``python -m bench.q4_agreement``; measured on a 2-core AMD EPYC (Zen 4), torch 2.13,
2026-12-03): 5 of 8 continuations identical, the other three first differ at tokens 7, 37 and 38
(mean first divergence 40.2 of 48, identical ones counting 48); with the former two-plane bf16 head,
5 of 8 and 39.8. Dense bf16 weights, for comparison: 5 of 8, mean 43.0. llama.cpp's own Q4_1 path is
approximate in the same way (it rounds activations to 8 bits).

Memory: the packed codes and scales take ~100 MB. The twin shares the dense model's embedding and
norms, and the dense fp32 model itself stays loaded (the loader caches it per process), so a q4_1
process peaks at ~1.4 GiB RSS against ~1.2 GiB for dense alone; the saving shows in the bytes each
decode step reads, not yet in the process's footprint.

Invariances are those of bf16: the int4 kernel is row-invariant, but bf16 rounding of its inputs can
turn a last-bit difference upstream into another token. Greedy speculative decoding reproduces plain
q4_1 greedy at batch 1, and with ``attention_backend="reference"`` the batch does not change a
request's output (tests/model/test_quant_gguf.py).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from labkit.kernels import linear_forms, native
from labkit.kernels.ops.torch_ops import linear
from labkit.model import huge_pages
from labkit.model.gguf_codes import QuantizedWeight, gguf_source, read_quantized
from labkit.model.llama import LlamaModel
from labkit.model.quant import Int4Linear

WEIGHTS = ("dense", "q4_1")
_Q4_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # dense model -> its q4_1 twin


class Q8Head(nn.Module):
    """The LM head on its Q8_0 codes (``w = d * q``, int8 q, one fp16 d per group of 32), in fp32.

    An fp16 d times an 8-bit code is exact in fp32, so ``d * q`` *is* the dense model's fp32 head (which
    the loader dequantised from these codes): labkit's C kernel (``native.q8_rows``) multiplies by
    exactly those values in its fp32 product's order, so the logits are the bits ``native.linear_rows``
    gives with the dense head, from 1.125 bytes a weight instead of 4. Where the kernel is not built
    (no C compiler, ``LABKIT_NATIVE=0``) or off the CPU, the dense fp32 head itself is used: the same
    values, read at 4 bytes a weight.
    """

    def __init__(self, q: QuantizedWeight, dense: torch.Tensor):
        super().__init__()
        if q.kind != "Q8_0" or q.codes.shape != dense.shape:
            raise ValueError(f"Q8Head takes a Q8_0 weight shaped like the dense head {tuple(dense.shape)}, got "
                             f"{q.kind} {tuple(q.codes.shape)}")
        self.dense = dense.detach()          # a plain attribute: the dense model owns (and counts) it
        self.kernel = dense.device.type == "cpu" and dense.dtype == torch.float32 and native.available()
        if self.kernel:
            self.register_buffer("codes", q.codes.to(torch.int8).contiguous(), persistent=False)
            self.register_buffer("scales", q.scale.float().contiguous(), persistent=False)
            huge_pages.move_to_huge_pages([self.codes, self.scales])

    def tune(self) -> None:
        """Choose the kernel's walk for this CPU (``tuning.walks.prepare_q8``: from the disk cache, or timed
        once). Called where an engine is built (``tune``), not when the weights load."""
        if self.kernel:
            linear_forms.prepare_q8(self.codes, self.scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel and x.dtype == torch.float32 and x.device.type == "cpu":
            return native.q8_rows(x, self.codes, self.scales)
        return linear(x.to(self.dense.dtype), self.dense)

    def nbytes(self) -> int:
        """Bytes a forward reads: the codes and fp32 scales, or the dense head where the kernel is not used."""
        if self.kernel:
            return self.codes.numel() + self.scales.numel() * 4
        return self.dense.numel() * self.dense.element_size()


def _q4_linear(parts: list[QuantizedWeight], out_dtype: torch.dtype, device) -> Int4Linear:
    """One fused Int4Linear from several Q4_1 matrices stacked along the output rows (q|k|v, gate|up)."""
    if any(p.kind != "Q4_1" for p in parts):
        raise ValueError(f"weights='q4_1' expects Q4_1 layer matrices, got {[p.kind for p in parts]}")
    return Int4Linear.from_codes(torch.cat([p.codes for p in parts]), torch.cat([p.scale for p in parts]),
                                 torch.cat([p.minimum for p in parts]), out_dtype=out_dtype, device=device)


def _replace(module: nn.Module, name: str, value: nn.Module) -> None:
    del module._parameters[name]          # a parameter slot cannot take a module
    setattr(module, name, value)


def build_q4_1_model(dense: LlamaModel, quantized: Mapping[str, QuantizedWeight]) -> LlamaModel:
    """A LlamaModel sharing ``dense``'s embedding, norms and RoPE tables, with every linear layer and
    the LM head on ``quantized``'s codes. ``dense`` is not modified."""
    cfg, out_dtype, dev = dense.config, dense.embed_tokens.dtype, dense.embed_tokens.device
    # The same module tree sharing every tensor (a meta-device LlamaModel would cost a one-time
    # ~1 s import of torch's meta kernels); the linear slots are then replaced below.
    shared = {id(t): t for t in [*dense.parameters(), *dense.buffers()]}
    shared[id(dense.rotary)] = dense.rotary
    model = copy.deepcopy(dense, memo=shared)
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."

        def fused(*names):
            return _q4_linear([quantized[p + n + ".weight"] for n in names], out_dtype, dev)

        _replace(layer, "qkv_proj", fused("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"))
        _replace(layer, "o_proj", fused("self_attn.o_proj"))
        _replace(layer, "gate_up_proj", fused("mlp.gate_proj", "mlp.up_proj"))
        _replace(layer, "down_proj", fused("mlp.down_proj"))
    head = quantized.get("lm_head.weight", quantized["model.embed_tokens.weight"] if cfg.tie_word_embeddings else None)
    if head is None:
        raise ValueError("weights='q4_1': the GGUF file has no quantised LM head")
    _replace(model, "lm_head", Q8Head(head, dense.lm_head) if head.kind == "Q8_0" else _q4_linear([head], out_dtype, dev))
    return model


def tune(model: LlamaModel) -> None:
    """A q4_1 model's kernel choices on this CPU: its Q8_0 LM head's walk (the int4 products have one form)."""
    if isinstance(model.lm_head, Q8Head):
        model.lm_head.tune()


def q4_1_model(dense: LlamaModel, model_dir: str | Path) -> LlamaModel:
    """The q4_1 twin of ``dense`` (loaded from the GGUF ``model_dir`` was converted from), built once
    per dense model per process (reading and packing the codes takes a few seconds)."""
    if dense not in _Q4_MODELS:
        cfg = dense.config
        quantized = read_quantized(gguf_source(model_dir), cfg.num_attention_heads, cfg.num_key_value_heads)
        _Q4_MODELS[dense] = build_q4_1_model(dense, quantized)
    return _Q4_MODELS[dense]
