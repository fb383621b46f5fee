"""The ops of a CPU forward through labkit's C kernels (``labkit.kernels.native``), each used only where it
gives the bits of its PyTorch form (`torch_ops`) on this machine, checked once per dtype, width and thread
count on random rows across magnitudes (the check is about bits, never timing). Where a check fails, or
a kernel is not built, that op is PyTorch's.

RMSNorm's sum of squares follows PyTorch's vectorised sum, whose lane count varies by CPU (and by
build): the check finds the one that matches, in fp32, where a wrong lane count shows within a few
rows (bf16 rounds most differences away), then confirms bf16 with it. tests/kernels/test_fused_small_ops.py
holds every fused op to PyTorch's bits, op by op and on the real model's logits.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from labkit.kernels import native
from labkit.kernels.ops import torch_ops
from labkit.kernels.tuning import bf16, fp32
from labkit.kernels.tuning.forms import Form

_NORM_PROBE_ROWS = 64
_norm_lanes: dict[tuple, int | None] = {}
_swiglu_exact: dict[tuple, bool] = {}
_int4_exact: dict[int, bool] = {}
# Run a decode step's layers as one C call each where `NativeOps.decode_plan` allows (bench.decode_profile
# --per-op switches it off to show the ops one by one).
DECODE_LAYER_CALL = True


class Dimensions(Protocol):
    """What `for_input` reads of a model's config (``labkit.model.config.ModelConfig`` has these)."""

    hidden_size: int
    intermediate_size: int
    rms_norm_eps: float


def _native_norm_lanes(dtype: torch.dtype, n: int, eps: float) -> int | None:
    """The lane count with which ``native.rms_norm`` gives PyTorch's bits for rows of n values in dtype
    (fp32 or bf16) on this machine, or None where PyTorch's kernels run instead."""
    if dtype not in (torch.float32, torch.bfloat16) or not native.available():
        return None
    key = (dtype, n, eps, torch.get_num_threads())
    if key not in _norm_lanes:
        _norm_lanes[key] = _probe_norm_lanes(dtype, n, eps)
    return _norm_lanes[key]


def _probe_norm_lanes(dtype: torch.dtype, n: int, eps: float) -> int | None:
    g = torch.Generator().manual_seed(39)
    cases = []
    with torch.inference_mode():
        for i in range(_NORM_PROBE_ROWS):
            x = torch.randn(1 + i % 3, n, generator=g) * 10.0 ** (i % 9 - 4)
            w = torch.randn(n, generator=g)
            cases.append((x, w))

        def exact(lanes: int, dt: torch.dtype) -> bool:
            return all(torch.equal(native.rms_norm(x.to(dt), w.to(dt), eps, lanes),
                                   torch_ops.rms_norm(x.to(dt), w.to(dt), eps))
                       for x, w in cases)

        return next((lanes for lanes in (16, 8, 4) if exact(lanes, torch.float32) and exact(lanes, dtype)), None)


def _native_swiglu_exact(dtype: torch.dtype, inner: int) -> bool:
    """Whether ``native.silu_mul`` gives PyTorch's bits for [T, 2 inner] rows in dtype on this machine."""
    if not native.has_silu_mul():
        return False
    key = (dtype, inner, torch.get_num_threads())
    if key not in _swiglu_exact:
        g = torch.Generator().manual_seed(39)
        with torch.inference_mode():
            cases = [(torch.randn(1 + i % 3, 2 * inner, generator=g) * (1 + i % 8) * 3).to(dtype) for i in range(32)]
            _swiglu_exact[key] = all(torch.equal(native.silu_mul(gu), F.silu(gu[:, :inner]) * gu[:, inner:])
                                     for gu in cases)
    return _swiglu_exact[key]


def _native_int4_exact() -> bool:
    """Whether ``native.int4_rows`` gives ``_weight_int4pack_mm_for_cpu``'s bits on this machine, in
    PyTorch's form for its CPU capability (checked once per thread count on random codes, scales and
    rows, 1 to 5 rows). Where it is False (another form, no C kernel) the q4_1 layers run op by op."""
    threads = torch.get_num_threads()
    if threads not in _int4_exact:
        _int4_exact[threads] = _probe_int4()
    return _int4_exact[threads]


def _probe_int4() -> bool:
    ops = torch.ops.aten
    if not (native.available() and native.int4_block() and hasattr(ops, "_weight_int4pack_mm_for_cpu")
            and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")):
        return False
    g = torch.Generator().manual_seed(37)
    with torch.inference_mode():
        for n, k in ((128, 64), (192, 96)):
            # codes, scales and zero points as quant.Int4Linear packs them (zero = minimum + 8 scale)
            packed = ops._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32), 1)
            scale = torch.rand(k // 32, n, generator=g) * 10.0 ** torch.randint(-4, 1, (k // 32, n), generator=g)
            zero = scale * (8 - 8 * torch.rand(k // 32, n, generator=g))
            scales_zeros = torch.stack([scale, zero], dim=-1).to(torch.bfloat16).contiguous()
            for rows in (1, 2, 3, 5):
                x = (torch.randn(rows, k, generator=g) * 4).to(torch.bfloat16)
                try:
                    mine = native.int4_rows(x, packed, scales_zeros, 32)
                except (RuntimeError, ValueError):
                    return False
                if not torch.equal(mine, ops._weight_int4pack_mm_for_cpu(x, packed, 32, scales_zeros)):
                    return False
    return True


def _int4_layer_weight(w) -> bool:
    """Whether w is a ``quant.Int4Linear`` that `NativeOps.decode_layer` can take: packed codes (output rows
    a multiple of PyTorch's block here), bf16 inside, fp32 out."""
    return (getattr(w, "dense", True) is None and w.out_features % (native.int4_block() or 1 << 30) == 0
            and w.dtype == torch.bfloat16 and w.out_dtype == torch.float32)


class NativeOps:
    """The `labkit.kernels.ops.Ops` of a CPU forward in one dtype through labkit's C kernels, checked once
    (`for_input`) and then called straight through ctypes: at about 60 calls a step, the per-call checks
    of the ``native`` functions and of the helpers above cost more than the C work (2 to 4 µs each
    against 1 to 2). An op whose C form is not used here calls its PyTorch form (`torch_ops`)."""

    __slots__ = ("lanes", "bf", "_norm", "_add_norm", "_silu", "_rope", "_product", "_layer", "_layer_q4", "dtype")

    def __init__(self, dtype: torch.dtype, lanes: int | None, silu: bool):
        raw = native.raw_kernels()
        self.dtype, self.lanes, self.bf = dtype, lanes, int(dtype == torch.bfloat16)
        self._norm = raw["rms_norm"] if lanes else None
        self._add_norm = raw["add_rms_norm"] if lanes else None
        self._silu = raw["silu_mul"] if silu else None
        self._rope = raw[("rope_write_kv", dtype)]
        self._product = raw.get(dtype)          # labkit's C product in this dtype, if built
        # the whole decode layer in one call, where every op inside it is the C form
        self._layer = raw["decode_layer"] if lanes and silu and self._product is not None else None
        # the q4_1 model's layer (fp32 stream, 4-bit products), where the C int4 product has PyTorch's bits
        self._layer_q4 = (raw["decode_layer_q4"] if self._layer is not None and dtype == torch.float32
                          and _native_int4_exact() else None)

    def linear(self, x: torch.Tensor, weight) -> torch.Tensor:
        """`torch_ops.linear`, with the C product called straight where that would call it (the same form
        decision, made per call: fp32 by ``fp32.form_name``, bf16 by ``bf16.bf16_uses_kernel``)."""
        if self._product is not None and isinstance(weight, torch.Tensor) and weight.dtype == self.dtype:
            rows = x.shape[0]
            if (bf16.bf16_uses_kernel() if self.bf else
                    fp32.form_name(tuple(weight.shape), rows) is Form.NATIVE):
                if x.is_contiguous() and weight.is_contiguous():
                    y = torch.empty((rows, weight.shape[0]), dtype=self.dtype)
                    self._product(x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, weight.shape[0], weight.shape[1])
                    return y
        return torch_ops.linear(x, weight)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if self._norm is None:
            return torch_ops.rms_norm(x, weight, eps)
        return native.rms_norm_unchecked(self._norm, x, weight, eps, self.lanes, self.bf)

    def add_rms_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        if self._add_norm is None or not delta.is_contiguous() or delta.dtype != x.dtype:
            return torch_ops.add_rms_norm(x, delta, weight, eps)
        return native.add_rms_norm_unchecked(self._add_norm, x, delta, weight, eps, self.lanes, self.bf)

    def swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        if self._silu is None or not gate_up.is_contiguous() or gate_up.dtype != self.dtype:
            return torch_ops.swiglu(gate_up)
        return native.silu_mul_unchecked(self._silu, gate_up, self.bf)

    def fuses_rope_and_kv_write(self, dtype: torch.dtype, kv_cache, backend) -> bool:
        """Where `rope_write_kv` takes a layer's RoPE and K/V write: pools of the forward's dtype addressed by
        slot (the backend's ``KV_POOL_LAYOUT``), contiguous."""
        key_cache, value_cache = kv_cache
        return (key_cache.dtype == dtype and getattr(backend, "KV_POOL_LAYOUT", None) == "slots"
                and key_cache.is_contiguous() and value_cache.is_contiguous())

    def rope_write_kv(self, heads: torch.Tensor, rotary: nn.Module, positions: torch.Tensor, slots: torch.Tensor,
                      key_pool: torch.Tensor, value_pool: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
        """``native.rope_write_kv`` for the engine's own tensors (contiguous heads, int64 positions and
        slots below the table's and the pool's sizes), without its checks."""
        return native.rope_write_kv_unchecked(self._rope, heads, rotary.cos, rotary.signed_sin, positions, slots,
                                              key_pool, value_pool, num_heads, num_kv_heads)

    def decode_plan(self, model: nn.Module, rows: torch.Tensor, meta, backend, kv_caches: list) -> tuple | None:
        """(context slots, their row stride, context lengths, 4-bit products?) for `decode_layer`, where a
        whole layer of ``model`` (a ``LlamaModel``) can run as one C call this step (``rows``: a tensor with
        a row per token of the step, e.g. its input ids, on the forward's device): every row a single new
        token, or every row one sequence's (its verification rows or its prefill); the batch-invariant CPU
        attention backend with its C kernel (a backend that has ``one_kernel_call``, which says where its
        attention is one C call: ``labkit.attention.cpu_batched``; ``meta`` goes to it as it is); every layer
        product the C kernel at this row count, or (the q4_1 model) 4-bit weights where `_native_int4_exact`
        found PyTorch's int4 bits. Else None."""
        if self._layer is None or not DECODE_LAYER_CALL or not model.layers:
            return None
        layer = model.layers[0]
        weights = (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)
        one_kernel_call = getattr(backend, "one_kernel_call", None)
        if (one_kernel_call is None
                or any(w.dtype != self.dtype or not w.is_contiguous() for w in (layer.input_layernorm, layer.post_attention_layernorm))):
            return None
        num_rows = rows.shape[0]
        int4 = self._layer_q4 is not None and all(_int4_layer_weight(w) for w in weights) and \
            len({w.group_size for w in weights}) == 1
        if not int4:
            if any(not isinstance(w, torch.Tensor) or w.dtype != self.dtype or not w.is_contiguous() for w in weights):
                return None
            if not (bf16.bf16_uses_kernel() if self.bf else
                    all(fp32.form_name(tuple(w.shape), num_rows) is Form.NATIVE for w in weights)):
                return None
        call = one_kernel_call(rows, kv_caches[0][0], meta)
        if call is None:
            return None
        slots, lens = call
        return slots, (0 if slots.shape[0] == 1 else slots.shape[1]), lens, int4

    def decode_layer(self, layer: nn.Module, x: torch.Tensor, positions: torch.Tensor, rotary: nn.Module,
                     kv_cache, slot_mapping: torch.Tensor, plan: tuple) -> torch.Tensor:
        """``LlamaLayer.forward`` for a decode step in one C call (``csrc/decode_layer.c``): the same entry
        points in the same order, so the same bits. x: contiguous; ``plan`` from `decode_plan`."""
        key_cache, value_cache = kv_cache
        out = torch.empty_like(x)
        slots, stride, lens, int4 = plan
        shape = (slot_mapping.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), slots.data_ptr(), stride,
                 lens.data_ptr(), x.shape[0], x.shape[1], layer.num_heads, layer.num_kv_heads, layer.head_dim)
        if int4:
            qkv, o, gate_up, down = layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj
            failed = self._layer_q4(
                x.data_ptr(), out.data_ptr(), layer.input_layernorm.data_ptr(), qkv.packed.data_ptr(),
                qkv.scales_zeros.data_ptr(), o.packed.data_ptr(), o.scales_zeros.data_ptr(),
                layer.post_attention_layernorm.data_ptr(), gate_up.packed.data_ptr(), gate_up.scales_zeros.data_ptr(),
                down.packed.data_ptr(), down.scales_zeros.data_ptr(), qkv.group_size, native.int4_block(),
                rotary.cos.data_ptr(),
                rotary.signed_sin.data_ptr(), positions.data_ptr(), *shape, gate_up.out_features // 2, layer.eps,
                self.lanes, layer.head_dim ** -0.5)
        else:
            failed = self._layer(
                x.data_ptr(), out.data_ptr(), layer.input_layernorm.data_ptr(), layer.qkv_proj.data_ptr(),
                layer.o_proj.data_ptr(), layer.post_attention_layernorm.data_ptr(), layer.gate_up_proj.data_ptr(),
                layer.down_proj.data_ptr(), rotary.cos.data_ptr(), rotary.signed_sin.data_ptr(), positions.data_ptr(),
                *shape, layer.gate_up_proj.shape[0] // 2, layer.eps, self.lanes, layer.head_dim ** -0.5, self.bf)
        if failed:
            raise MemoryError("the decode layer could not allocate its scratch memory")
        return out


_native_ops: dict[tuple, NativeOps] = {}


def forget_checks() -> None:
    """Forget every check made against the loaded library (its exactness probes and the ops built on them):
    a process that loads another library (``LABKIT_ISA`` swapped, as the instruction-set tests do) calls it."""
    for cached in (_native_ops, _norm_lanes, _swiglu_exact, _int4_exact):
        cached.clear()


def for_input(x: torch.Tensor, cfg: Dimensions) -> NativeOps | None:
    """The C ops for a forward in x's dtype on x's device, or None where they do not apply (not the
    CPU, not fp32 or bf16, a graph being compiled, no C kernel). Each op inside is one that gives
    PyTorch's bits on this machine (`_probe_norm_lanes`, `_native_swiglu_exact`), else the PyTorch form."""
    if (x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16) or torch.compiler.is_compiling()
            or not native.available()):
        return None
    threads = native.sync_threads()         # the C calls below run on torch's thread count
    key = (x.dtype, cfg.hidden_size, cfg.intermediate_size, cfg.rms_norm_eps, threads)
    ops = _native_ops.get(key)
    if ops is None:
        lanes = _native_norm_lanes(x.dtype, cfg.hidden_size, cfg.rms_norm_eps)
        silu = _native_swiglu_exact(x.dtype, cfg.intermediate_size)
        ops = _native_ops[key] = NativeOps(x.dtype, lanes, silu)
    return ops
