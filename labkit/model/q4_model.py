"""``EngineConfig(weights="q4_1")``: the target runs on the 4-bit codes its GGUF file ships.

The default model ships as ``SmolLM2-135M-Instruct.Q4_1.gguf``. ``weights="dense"`` (the default)
runs the dequantised fp32 weights, the reference that equals ``transformers`` token for token.
``weights="q4_1"`` keeps every layer matrix as the file's own Q4_1 codes (``gguf_codes``: 4-bit
code, fp16 scale d and minimum m per group of 32, nothing re-quantised) and multiplies with
PyTorch's int4 CPU kernel (``quant.Int4Linear``): a decode step reads ~0.6 bytes per layer weight
instead of 4. (On a GPU ``Int4Linear`` holds the kernel's dequantised values as a bf16 matrix: the
same numbers, without the byte savings.)

It is an approximation of the fp32 reference, not a copy of it. The codes are exact; what rounds:

- inside each layer matmul the activations, d and ``m + 8 d`` are bf16 (the kernel's only fast
  path; fp32 scales would keep d and m exact but take the kernel's scalar path, measured 27x
  slower), and the product is returned in bf16 before it joins the fp32 residual stream;
- everything else stays as in the dense fp32 model: embedding, norms, RoPE, attention, KV cache.

The tied embedding / LM head is Q8_0 in the file (8-bit codes, fp16 d). The LM head runs those
codes too, as two 4-bit planes through the same kernel (``Q8Linear``), so it reads 1.25 bytes a
weight instead of 4; the embedding lookup reads one fp32 row (the exact dequantised values).

Agreement with the fp32 reference, greedy, over the 8 parity prompts (``tests/prompts.py``), 48 new
tokens each (``python -m bench.q4_agreement``; measured on a 2-core Xeon with AVX-512, torch 2.13):
5 of 8 continuations identical, the other three first differ at tokens 28, 37 and 43 (mean first
divergence 43.5 of 48, identical ones counting 48). Dense bf16 weights, for comparison: 4 of 8,
mean 36.5. llama.cpp's own Q4_1 path is approximate in the same way (it rounds activations to 8 bits).

Memory: the packed codes and scales take ~100 MB. The twin shares the dense model's embedding and
norms, and the dense fp32 model itself stays loaded (the loader caches it per process), so a q4_1
process peaks at ~1.4 GiB RSS against ~1.2 GiB for dense alone; the saving shows in the bytes each
decode step reads, not yet in the process's footprint.

Invariances are those of bf16: the int4 kernel is row-invariant, but bf16 rounding of its inputs can
turn a last-bit difference upstream into another token. Greedy speculative decoding reproduces plain
q4_1 greedy at batch 1, and with ``attention_backend="reference"`` the batch does not change a
request's output (tests/test_quant_gguf.py).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from labkit.model.gguf_codes import QuantizedWeight, gguf_source, read_quantized
from labkit.model.llama import LlamaModel
from labkit.model.quant import Int4Linear

WEIGHTS = ("dense", "q4_1")
_Q4_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # dense model -> its q4_1 twin


class Q8Linear(nn.Module):
    """``y = x @ wᵀ`` for Q8_0 weights ``w = d * q`` (q int8), as two 4-bit planes in one kernel call.

    q = 16 * hi + lo with lo = q & 15 in 0..15 and hi = q >> 4 in -8..7, so
    ``x · w = [x, x] · [16 d * hi, d * lo]``: one int4 matrix twice as wide, whose hi groups have
    scale 16 d (zero point 0) and lo groups scale d (zero point 8 d, i.e. minimum 0). Exact in real
    arithmetic; rounding as in ``Int4Linear``.
    """

    def __init__(self, q: QuantizedWeight, out_dtype: torch.dtype, device="cpu"):
        super().__init__()
        codes, d = q.codes, q.scale.float()
        hi, lo = ((codes >> 4) + 8).to(torch.uint8), (codes & 15).to(torch.uint8)   # int8 >> 4 is arithmetic
        planes = torch.cat([hi, lo], dim=1)                              # [out, 2 * in], one byte a code
        scale = torch.cat([16 * d, d], dim=1)
        minimum = torch.cat([-8 * 16 * d, torch.zeros_like(d)], dim=1)   # (hi + 8 - 8) * 16 d
        self.inner = Int4Linear.from_codes(planes, scale, minimum, out_dtype=out_dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(torch.cat([x, x], dim=-1))


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
    _replace(model, "lm_head", Q8Linear(head, out_dtype, dev) if head.kind == "Q8_0" else _q4_linear([head], out_dtype, dev))
    return model


def q4_1_model(dense: LlamaModel, model_dir: str | Path) -> LlamaModel:
    """The q4_1 twin of ``dense`` (loaded from the GGUF ``model_dir`` was converted from), built once
    per dense model per process (reading and packing the codes takes a few seconds)."""
    if dense not in _Q4_MODELS:
        cfg = dense.config
        quantized = read_quantized(gguf_source(model_dir), cfg.num_attention_heads, cfg.num_key_value_heads)
        _Q4_MODELS[dense] = build_q4_1_model(dense, quantized)
    return _Q4_MODELS[dense]
