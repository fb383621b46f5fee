"""Weight-only 4-bit quantisation: a cheap, close copy of the target to use as a draft model.

The default model ships as Q4_1 GGUF: every layer weight is stored as groups of 32 values
``w = d * q + m`` with a 4-bit code ``q`` in 0..15 and a per-group scale ``d`` and minimum ``m``.
labkit's target runs the dequantised fp32 weights (exactly those values, so it matches
``transformers``). This module goes the other way: it re-quantises a weight to 4-bit codes with the
same group size and asymmetric (min/max) scheme, which recovers the GGUF's own codes for groups
that use the full 0..15 range, and computes ``x @ wᵀ`` with the 4-bit weights directly
(PyTorch's CPU kernel ``_weight_int4pack_mm_for_cpu``, bf16 activations). A decode step then reads
about 4.5 bits per weight instead of 32.

The result is *not* the target: scales and minima are rounded to bf16, and activations run in
bf16. It agrees with the target on most greedy tokens, which is what a draft model needs, and the
rejection sampler keeps the output exact whatever the draft gets wrong.

``Int4Linear.from_codes`` takes codes as they are: ``q4_model`` builds the target's own 4-bit mode
(``EngineConfig(weights="q4_1")``) from the GGUF's codes with it.

On other devices (or a torch without the kernel) ``Int4Linear`` keeps the dequantised bf16 matrix
and uses ``F.linear``: the same values, without the byte savings.
"""

from __future__ import annotations

import os
import threading

import torch
import torch.nn.functional as F
from torch import nn

from labkit.kernels import invariance, linear_forms, native
from labkit.model.llama import LlamaModel

GROUP_SIZE = 32


def quantize_groups(weight: torch.Tensor, group_size: int = GROUP_SIZE
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit codes for ``weight`` [out, in], groups of ``group_size`` along ``in``.

    Returns (codes int32 [out, in] in 0..15, scale [out, in/group], minimum [out, in/group]) with
    ``weight ≈ codes * scale + minimum``.
    """
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in_features ({in_features}) must be a multiple of group_size ({group_size})")
    w = weight.detach().float().reshape(out_features, in_features // group_size, group_size)
    lo, hi = w.amin(-1), w.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    codes = ((w - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32)
    return codes.reshape(out_features, in_features), scale, lo


def dequantize_groups(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    out_features, in_features = codes.shape
    group = in_features // scale.shape[1]
    w = codes.reshape(out_features, -1, group).float() * scale[..., None] + minimum[..., None]
    return w.reshape(out_features, in_features)


def int4_kernel_available(device: torch.device | str) -> bool:
    return torch.device(device).type == "cpu" and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


# ----------------------------------------------------------------------------- which int4 product

TORCH_INT4 = "PyTorch"       # _weight_int4pack_mm_for_cpu
NATIVE_INT4 = "C kernel"     # labkit's int4 product (native.int4_rows): one dot product per output, k in order
DENSE_FP32 = "fp32 product"  # the dequantised weight through the fp32 form (the last resort)
INT4_ENV = "LABKIT_INT4_FORM"   # "PyTorch" or "C kernel" asks for that form (tests), granted where offered
_int4_forms: dict[tuple, str] = {}
_int4_shapes: set[tuple[int, int, int]] = set()      # (out, in, group) of every packed Int4Linear built
_int4_lock = threading.Lock()


def torch_int4(x: torch.Tensor, packed: torch.Tensor, group_size: int, scales_zeros: torch.Tensor) -> torch.Tensor:
    """PyTorch's CPU int4 product (bf16 x [T, K] -> bf16 [T, N])."""
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_zeros)


def _int4_packed(out_features: int, in_features: int, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random codes, scales and zero points of this shape, packed as ``Int4Linear`` packs them."""
    g = torch.Generator().manual_seed(out_features * 7 + in_features)
    codes = torch.randint(0, 16, (out_features, in_features), generator=g, dtype=torch.int32)
    groups = in_features // group_size
    scale = torch.rand(groups, out_features, generator=g) * 0.1 + 0.01
    zero = scale * (8 - 8 * torch.rand(groups, out_features, generator=g))
    return _pack(codes), torch.stack([scale, zero], dim=-1).to(torch.bfloat16).contiguous()


def int4_offered(out_features: int, in_features: int, group_size: int) -> list[str]:
    """The 4-bit product forms that give a row the same bits at every row count on this CPU, for a weight
    of this shape (`labkit.kernels.invariance`, checked once per shape and thread count; ~0.2 s)."""
    if not int4_kernel_available("cpu") or out_features % 16:
        return []
    packed, scales_zeros = _int4_packed(out_features, in_features, group_size)
    inputs = invariance.probe_inputs(in_features, torch.bfloat16)
    offered = []
    if invariance.first_difference(lambda x: torch_int4(x, packed, group_size, scales_zeros), inputs) is None:
        offered.append(TORCH_INT4)
    block = native.int4_block() if native.available() else None
    if block and out_features % block == 0:
        try:
            if invariance.first_difference(lambda x: native.int4_rows(x, packed, scales_zeros, group_size),
                                           inputs) is None:
                offered.append(NATIVE_INT4)
        except (RuntimeError, ValueError):
            pass
    return offered


def int4_form(out_features: int, in_features: int, group_size: int) -> str:
    """The form every product through a 4-bit weight of this shape takes at this thread count: PyTorch's
    int4 kernel where it is row-invariant here (the C layer call has its bits: `ops.native_ops._native_int4_exact`),
    else labkit's int4 product, else the dequantised weight through the fp32 form. ``LABKIT_INT4_FORM``
    asks for one of the first two, granted where offered."""
    key = (out_features, in_features, group_size, torch.get_num_threads(), os.environ.get(INT4_ENV))
    form = _int4_forms.get(key)
    if form is None:
        with _int4_lock:
            offered = int4_offered(out_features, in_features, group_size)
            want = key[-1]
            form = want if want in offered else (offered[0] if offered else DENSE_FP32)
            if want is not None and want not in offered:
                linear_forms.warn_once(f"{INT4_ENV}={want} is not offered for a {out_features}x{in_features} "
                                       f"4-bit weight on this CPU: using {form}")
            elif not offered or offered[0] != TORCH_INT4:
                linear_forms.warn_once(f"PyTorch's int4 kernel is not row-invariant for a {out_features}x"
                                       f"{in_features} weight on this CPU: using {form}")
            _int4_forms[key] = form
    return form


def int4_report() -> str:
    """The int4 form of each 4-bit weight shape built in this process (benchmarks): ``576x576: PyTorch; ...``."""
    return "; ".join(f"{o}x{i}: {int4_form(o, i, g)}" for o, i, g in sorted(_int4_shapes)) or "no 4-bit weight built"


PACK_ROWS = 2048   # rows packed at a time: the kernel wants int32 codes, 4 bytes per 4-bit code


def _pack(codes: torch.Tensor) -> torch.Tensor:
    """The kernel's packed layout (rows of in/2 bytes, independent per 16-row block), built a slice of
    rows at a time so the int32 copy of a large matrix (the LM head's) never exists whole."""
    return torch.cat([torch.ops.aten._convert_weight_to_int4pack_for_cpu(
        codes[i:i + PACK_ROWS].to(torch.int32).contiguous(), 1) for i in range(0, codes.shape[0], PACK_ROWS)])


class Int4Linear(nn.Module):
    """``y = x @ wᵀ`` with ``w`` held as 4-bit codes (groups of 32) and a scale / zero point per group.

    The CPU kernel's dequantisation is ``(code - 8) * scale + zero``; with ``zero = minimum +
    8 * scale`` that is ``code * scale + minimum``, the GGUF Q4_1 formula. ``Int4Linear(weight)``
    quantises a dense weight; ``Int4Linear.from_codes`` takes codes as they are (a GGUF's own).

    ``_weight_int4pack_mm_for_cpu`` (torch 2.13) takes activations and scales of one dtype: fp32,
    fp16 or bf16. Only bf16 has a vectorised path. Measured on a 2-core Xeon (AVX-512, no AMX), one
    thread, all 120 layer matrices of SmolLM2-135M: bf16 7.5 ms at 1 row and 48 ms at 16 rows; fp32
    (which would keep the GGUF's fp16 scales exact) 201 ms and 3,156 ms; fp16 311 ms and 4,956 ms;
    a dense fp32 ``F.linear`` sweep 29 ms and 71 ms. So activations, scales and zero points are bf16
    inside; ``out_dtype`` (default: bf16) is what ``forward`` returns. The kernel packs output rows
    in sixteens (other widths keep a dense matrix) and gives each row the same bits whatever the
    number of rows beside it.
    """

    def __init__(self, weight: torch.Tensor, group_size: int = GROUP_SIZE, dtype=torch.bfloat16,
                 out_dtype: torch.dtype | None = None):
        super().__init__()
        codes, scale, minimum = quantize_groups(weight, group_size)
        self._build(codes, scale, minimum, dtype, out_dtype, weight.device)

    @classmethod
    def from_codes(cls, codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, dtype=torch.bfloat16,
                   out_dtype: torch.dtype | None = None, device="cpu") -> "Int4Linear":
        """codes 0..15 [out, in]; scale, minimum [out, in / group]: ``w = codes * scale + minimum``."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._build(codes, scale.float(), minimum.float(), dtype, out_dtype, torch.device(device))
        return self

    def _build(self, codes, scale, minimum, dtype, out_dtype, device) -> None:
        self.out_features, self.in_features = codes.shape
        self.group_size, self.dtype = self.in_features // scale.shape[1], dtype
        self.out_dtype = out_dtype or dtype
        if codes.min() < 0 or codes.max() > 15:
            raise ValueError("4-bit codes must lie in 0..15")
        # The kernel packs output rows in sixteens; other shapes take the dense path below.
        if int4_kernel_available(device) and dtype == torch.bfloat16 and self.out_features % 16 == 0:
            zero = minimum + 8 * scale
            # [in/group, out, 2]: the layout the kernel expects.
            scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()
            packed = _pack(codes.cpu())
            self.register_buffer("packed", packed, persistent=False)
            self.register_buffer("scales_zeros", scales_zeros, persistent=False)
            self.dense = None
            _int4_shapes.add((self.out_features, self.in_features, self.group_size))
        else:
            # The kernel's numbers: (code - 8) * scale + zero, with scale and zero rounded to dtype first.
            s, z = scale.to(dtype).float(), (minimum + 8 * scale).to(dtype).float()
            self.register_buffer("dense", dequantize_groups(codes.to(torch.int32) - 8, s, z).to(device=device, dtype=dtype),
                                 persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        if self.dense is not None:
            return F.linear(x, self.dense).to(self.out_dtype)
        form = int4_form(self.out_features, self.in_features, self.group_size)
        if form == TORCH_INT4:
            y = torch_int4(x.contiguous(), self.packed, self.group_size, self.scales_zeros)
        elif form == NATIVE_INT4:
            y = native.int4_rows(x.contiguous(), self.packed, self.scales_zeros, self.group_size)
        else:
            y = linear_forms.invariant_product(x.float(), self._dense_fp32())
        return y.to(self.out_dtype)

    def _dense_fp32(self) -> torch.Tensor:
        """The weight as the kernel dequantises it, read back through the kernel one basis row at a time
        (so rounded to bf16), in fp32; built on first use."""
        if getattr(self, "_fp32", None) is None:
            eye = torch.eye(self.in_features, dtype=torch.bfloat16)
            self._fp32 = torch_int4(eye, self.packed, self.group_size, self.scales_zeros).float().t().contiguous()
        return self._fp32

    def nbytes(self) -> int:
        if self.dense is not None:
            return self.dense.numel() * self.dense.element_size()
        return self.packed.numel() * self.packed.element_size() + self.scales_zeros.numel() * 2


_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def quantized_copy(target, dtype=torch.bfloat16):
    """A copy of ``target`` (a ``LlamaModel``) whose linear layers and LM head are ``Int4Linear`` and
    whose other tensors (embedding, norms) are ``dtype``. ``target`` is not modified.

    The embedding lookup reads one row per token, so it stays dense; the LM head (tied to the
    embedding in SmolLM2) is the largest matrix, so it is quantised too.
    """
    def dense(t: torch.Tensor) -> nn.Parameter:
        return nn.Parameter(t.detach().to(dtype), requires_grad=False)

    def replace_with(module: nn.Module, name: str, value: nn.Module) -> None:
        del module._parameters[name]          # a parameter slot cannot take a module
        setattr(module, name, value)

    model = LlamaModel(target.config, dtype=dtype, device="meta")   # the structure, no memory
    model.embed_tokens, model.norm, model.rotary = dense(target.embed_tokens), dense(target.norm), target.rotary
    for layer, src in zip(model.layers, target.layers):
        layer.input_layernorm = dense(src.input_layernorm)
        layer.post_attention_layernorm = dense(src.post_attention_layernorm)
        for name in _LINEARS:
            replace_with(layer, name, Int4Linear(getattr(src, name).detach(), dtype=dtype))
    replace_with(model, "lm_head", Int4Linear(target.lm_head.detach(), dtype=dtype))
    return model
