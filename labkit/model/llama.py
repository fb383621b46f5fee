"""Our own Llama forward pass over a paged KV cache.

Tokens arrive flat — ``[num_tokens]`` from many sequences at once — with an explicit
``AttentionMetadata`` saying which sequence each belongs to (no module-global context, so a draft
and a target model can share a process). Each layer::

    x ─ RMSNorm ─ QKV ─ RoPE ─ write K,V via slot_mapping ─ paged attention ─ O ─(+)─ RMSNorm ─ SwiGLU ─(+)

Numerics mirror Hugging Face's ``LlamaForCausalLM`` so greedy output matches token for token.
"""

from __future__ import annotations

import functools
import math
from array import array
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from labkit.attention.metadata import AttentionMetadata
from labkit.model import native
from labkit.model.config import ModelConfig
from labkit.model.cpu_features import has_amx
from labkit.model.tuning import bf16, fp32
from labkit.model.tuning.bf16 import Bf16Form
from labkit.model.tuning.forms import Form, order_probe

# Which CPU matmul to use for a [T, in] x [in, out] linear, by row count T (`python -m bench.linear_rows`
# measures the forms and prints the CPU it ran on).
# fp32: one batch-invariant form for every row count (a row gets the same bits in any batch, so the
# scheduler never changes a token: tests/test_batch_invariance.py), the faster of two on the CPU at hand by a timing probe
# (`labkit.model.tuning.fp32`); a fixed table tuned on one Xeon was 2.5x slower than the best form at
# 2 rows on an AMD EPYC.
# bf16: the products must give each row the same bits at any row count, because speculative decoding
# verifies k + 1 rows at once and its bf16 output must equal plain one-row greedy output bit for bit.
# Multi-row products (any form) agree with each other row for row; the one-row kernel (a gemv) agrees
# with them for some weight shapes and not for others, depending on the CPU's BLAS (on an AVX-512 Xeon
# without AMX: every shape with in_features > 1024, i.e. the down projection). So the first time a shape
# is seen, `_one_row_needs_pair` checks it on that CPU and only the shapes that differ compute a single
# row as two copies of itself (the copy costs ~3x a one-row gemv without AMX; with AMX a pair costs no
# more than one row). A table of forms tuned on one CPU is what made bf16 run at
# a third of fp32 speed on another: the check is about bits, never timing, so it is
# deterministic on a given CPU.
_pair_rows: dict[tuple, bool] = {}


def _bf16_rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The multi-row bf16 product: (W @ xᵀ)ᵀ with AMX (flat from 2 to 16 rows there, where F.linear took
    1.5x longer), F.linear without (where (W @ xᵀ)ᵀ took up to 2x longer). Both give the same bits."""
    return torch.mm(weight, x.t()).t() if has_amx() else F.linear(x, weight)


def _one_row_needs_pair(weight: torch.Tensor) -> bool:
    """Whether one bf16 row through a weight of this shape must be computed as a pair of rows to get
    the bits a multi-row product gives it: checked once per shape and thread count on this CPU, with
    `order_probe` (on an AVX-512 Xeon without AMX: in_features > 1024 needs the pair)."""
    key = (tuple(weight.shape), torch.get_num_threads())
    if key not in _pair_rows:
        w, x = order_probe(*weight.shape)
        with torch.inference_mode():
            _pair_rows[key] = not torch.equal(F.linear(x, w), _bf16_rows(x.expand(2, -1), w)[:1])
    return _pair_rows[key]


def _bf16_torch(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The bf16 product through PyTorch's kernels, row-invariant for 1..16 rows (see above)."""
    rows = x.shape[0]
    # With AMX a pair is also faster than one row (25-28 ms a sweep against 38-63 ms).
    if rows == 1 and (has_amx() or _one_row_needs_pair(weight)):
        return _bf16_rows(x.expand(2, -1), weight)[:1]
    return _bf16_rows(x, weight) if 1 < rows <= 16 else F.linear(x, weight)


def linear(x: torch.Tensor, weight) -> torch.Tensor:
    """x: [T, in], weight: [out, in] (a tensor, or a module such as ``quant.Int4Linear``) -> [T, out]."""
    if not isinstance(weight, torch.Tensor):
        return weight(x)
    if x.device.type == "cpu":
        if x.dtype == torch.bfloat16:
            # One row-invariant form for every row count, never a mix (`tuning.bf16.bf16_form`): labkit's
            # C kernel, PyTorch's form where this CPU gives it the same bits at every row count, or the
            # fp32 form of the widened weights where neither is offered.
            if weight.dtype == torch.bfloat16 and not torch.compiler.is_compiling():
                form = bf16.bf16_form()
                if form is Bf16Form.NATIVE:
                    return native.linear_rows(x, weight)
                if form is Bf16Form.UPCAST:
                    return fp32.invariant_product(x.float(), weight.float()).to(torch.bfloat16)
            return _bf16_torch(x, weight)
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            if torch.compiler.is_compiling():
                return F.linear(x, weight)      # inductor picks its own kernel
            return fp32.product(x, weight)
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x²) + eps), in fp32 like Hugging Face's LlamaRMSNorm, through PyTorch's
    kernels (labkit's C form, with these bits, is `SmallOps.rms_norm`). fp32 input takes torch's fused
    kernel (one op instead of six; bit-identical to the written-out form, which tests/test_model_ops.py
    checks), or for a single row `_one_row_rms_norm`; other dtypes upcast as Hugging Face does."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        if (x.dim() == 2 and x.shape[0] == 1 and not torch.compiler.is_compiling()   # .item() would break the graph
                and _scalar_rms_norm_is_exact()):
            return _one_row_rms_norm(x, weight, eps)
        return torch.rms_norm(x, weight.shape, weight, eps)
    # Hugging Face: normalise in fp32, round to the input dtype, then scale by the weight.
    return weight * torch.rms_norm(x.to(torch.float32), weight.shape, None, eps).to(x.dtype)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rms_norm(x + delta)): the residual add and the RMSNorm after it (one C call in
    `SmallOps.add_rms_norm`). The sum is a new tensor; x stays as it was."""
    total = x + delta
    return total, rms_norm(total, weight, eps)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for the fused gate/up output [T, 2I] (one C call in `SmallOps.swiglu`)."""
    gate, up = gate_up.chunk(2, -1)
    return F.silu(gate) * up


# The fused small ops are used only where they give PyTorch's bits on this machine: checked once per
# dtype, width and thread count on random rows across magnitudes (the check is about bits, never timing).
# RMSNorm's sum of squares follows PyTorch's vectorised sum, whose lane count varies by CPU (and by
# build): the check finds the one that matches, in fp32, where a wrong lane count shows within a few
# rows (bf16 rounds most differences away), then confirms bf16 with it.
_NORM_PROBE_ROWS = 64
_norm_lanes: dict[tuple, int | None] = {}
_swiglu_exact: dict[tuple, bool] = {}


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
            return all(torch.equal(native.rms_norm(x.to(dt), w.to(dt), eps, lanes), rms_norm(x.to(dt), w.to(dt), eps))
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


_int4_exact: dict[int, bool] = {}


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
    """Whether w is a ``quant.Int4Linear`` that `SmallOps.decode_layer` can take: packed codes (output rows
    a multiple of PyTorch's block here), bf16 inside, fp32 out."""
    return (getattr(w, "dense", True) is None and w.out_features % (native.int4_block() or 1 << 30) == 0
            and w.dtype == torch.bfloat16 and w.out_dtype == torch.float32)


class SmallOps:
    """The fused small ops of a CPU forward in one dtype, checked once (`small_ops`) and then called
    straight through ctypes: at about 60 calls a step, the per-call checks of the ``native`` functions
    and of the helpers above cost more than the C work (2 to 4 µs each against 1 to 2)."""

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

    def decode_plan(self, model: "LlamaModel", x: torch.Tensor, meta: AttentionMetadata, backend: ModuleType,
                    kv_caches: list) -> tuple | None:
        """(context slots, their row stride, context lengths, 4-bit products?) for `decode_layer`, where a
        whole layer can run as one C call this step: every row a single new token, or every row one
        sequence's (its verification rows or its prefill); the batch-invariant CPU attention backend with
        its C kernel; every layer product the C kernel at this row count, or (the q4_1 model) 4-bit
        weights where `_native_int4_exact` found PyTorch's int4 bits. Else None."""
        if self._layer is None or not DECODE_LAYER_CALL or not model.layers:
            return None
        from labkit.attention import cpu_batched

        layer = model.layers[0]
        weights = (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)
        if (backend is not cpu_batched or not x.is_contiguous()
                or any(w.dtype != self.dtype or not w.is_contiguous() for w in (layer.input_layernorm, layer.post_attention_layernorm))):
            return None
        rows = x.shape[0]
        int4 = self._layer_q4 is not None and all(_int4_layer_weight(w) for w in weights) and \
            len({w.group_size for w in weights}) == 1
        if not int4:
            if any(not isinstance(w, torch.Tensor) or w.dtype != self.dtype or not w.is_contiguous() for w in weights):
                return None
            if not (bf16.bf16_uses_kernel() if self.bf else
                    all(fp32.form_name(tuple(w.shape), rows) is Form.NATIVE for w in weights)):
                return None
        call = cpu_batched.one_kernel_call(x, kv_caches[0][0], meta)
        if call is None:
            return None
        slots, lens = call
        return slots, (0 if slots.shape[0] == 1 else slots.shape[1]), lens, int4

    def decode_layer(self, layer: "LlamaLayer", x: torch.Tensor, positions: torch.Tensor, rotary: "Rotary",
                     kv_cache, slot_mapping: torch.Tensor, plan: tuple) -> torch.Tensor:
        """`LlamaLayer.forward` for a decode step in one C call (``csrc/decode_layer.c``): the same entry
        points in the same order, so the same bits. ``plan`` from `decode_plan`."""
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

    def linear(self, x: torch.Tensor, weight) -> torch.Tensor:
        """`linear`, with the C product called straight where `linear` would call it (the same form
        decision, made per call: fp32 by ``fp32.form_name``, bf16 by ``bf16.bf16_uses_kernel``)."""
        if self._product is not None and isinstance(weight, torch.Tensor) and weight.dtype == self.dtype:
            rows = x.shape[0]
            if (bf16.bf16_uses_kernel() if self.bf else
                    fp32.form_name(tuple(weight.shape), rows) is Form.NATIVE):
                if x.is_contiguous() and weight.is_contiguous():
                    y = torch.empty((rows, weight.shape[0]), dtype=self.dtype)
                    self._product(x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, weight.shape[0], weight.shape[1])
                    return y
        return linear(x, weight)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if self._norm is None:
            return rms_norm(x, weight, eps)
        return native.rms_norm_unchecked(self._norm, x, weight, eps, self.lanes, self.bf)

    def add_rms_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float):
        if self._add_norm is None or not delta.is_contiguous() or delta.dtype != x.dtype:
            return add_rms_norm(x, delta, weight, eps)
        return native.add_rms_norm_unchecked(self._add_norm, x, delta, weight, eps, self.lanes, self.bf)

    def swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        if self._silu is None or not gate_up.is_contiguous() or gate_up.dtype != self.dtype:
            return swiglu(gate_up)
        return native.silu_mul_unchecked(self._silu, gate_up, self.bf)

    def rope_write_kv(self, heads: torch.Tensor, rotary: "Rotary", positions: torch.Tensor, slots: torch.Tensor,
                      key_pool: torch.Tensor, value_pool: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
        """``native.rope_write_kv`` for the engine's own tensors (contiguous heads, int64 positions and
        slots below the table's and the pool's sizes), without its checks."""
        return native.rope_write_kv_unchecked(self._rope, heads, rotary.cos, rotary.signed_sin, positions, slots,
                                              key_pool, value_pool, num_heads, num_kv_heads)


_small_ops: dict[tuple, SmallOps] = {}
# Run a decode step's layers as one C call each where `SmallOps.decode_plan` allows (bench.decode_profile
# --per-op switches it off to show the ops one by one).
DECODE_LAYER_CALL = True


def small_ops(x: torch.Tensor, cfg: ModelConfig) -> SmallOps | None:
    """The fused small ops for a forward over x (the embedded tokens), or None where they do not apply
    (not the CPU, not fp32 or bf16, a graph being compiled, no C kernel). Each op inside is one that
    gives PyTorch's bits on this machine (`_probe_norm_lanes`, `_native_swiglu_exact`), else the
    PyTorch form."""
    if (x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16) or torch.compiler.is_compiling()
            or not native.available()):
        return None
    threads = native.sync_threads()         # the C calls below run on torch's thread count
    key = (x.dtype, cfg.hidden_size, cfg.intermediate_size, cfg.rms_norm_eps, threads)
    ops = _small_ops.get(key)
    if ops is None:
        lanes = _native_norm_lanes(x.dtype, cfg.hidden_size, cfg.rms_norm_eps)
        silu = _native_swiglu_exact(x.dtype, cfg.intermediate_size)
        ops = _small_ops[key] = SmallOps(x.dtype, lanes, silu)
    return ops


def _f32(value: float) -> float:
    """A Python float rounded to the nearest float32 (and back)."""
    return array("f", (value,))[0]


def _one_row_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.rms_norm of one fp32 row with its four one-element steps (mean's division, + eps, sqrt,
    1 / ·) done on a Python float: the same bits, in four kernels instead of seven (pow, sum, div_,
    add_, rsqrt, mul, mul). A decode step runs 61 of these between matrix sweeps that evict the caches,
    where each kernel's code and data come back from memory (`bench.decode_profile`: 80 µs a
    norm there, 70 after this change; 21-24 µs with the matmuls stubbed). Each step rounds to float32 as
    torch's kernels do: float64 division, addition and square root of float32 values, rounded once
    to float32, are the correctly rounded float32 results (53 >= 2 * 24 + 2 bits), and torch computes
    rsqrt as 1 / sqrt."""
    total = x.pow(2).sum(-1).item()           # the sum torch.mean takes, in the same kernel
    r = _f32(1.0 / _f32(math.sqrt(_f32(_f32(total / x.shape[-1]) + _f32(eps)))))
    return x.mul(r).mul(weight)


@functools.cache
def _scalar_rms_norm_is_exact() -> bool:
    """Whether `_one_row_rms_norm` gives torch.rms_norm's bits on this build (checked once on rows
    across magnitudes; False keeps torch.rms_norm everywhere)."""
    g = torch.Generator().manual_seed(30)
    with torch.inference_mode():
        for i in range(64):
            n = (576, 1536, 960, 64)[i % 4]
            x = torch.randn(1, n, generator=g) * 10.0 ** (i % 13 - 6)
            w = torch.randn(n, generator=g)
            for eps in (1e-5, 1e-6):
                if not torch.equal(_one_row_rms_norm(x, w, eps), torch.rms_norm(x, (n,), w, eps)):
                    return False
    return True


class Rotary(nn.Module):
    """RoPE (Su et al. 2021): rotate each (i, i + d/2) pair of q and k by angle pos * θ^(-2i/d)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, device):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device)
                                    .float() / head_dim))
        freqs = torch.arange(max_positions, device=device).float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)                 # [max_positions, head_dim]
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        # sin with its first half negated: rotate_half(x) * sin == roll(x, d/2) * signed_sin, bit for
        # bit (negating a factor negates the rounded product), in one kernel (roll) instead of two (neg, cat).
        half = head_dim // 2
        self.register_buffer("signed_sin", torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1),
                             persistent=False)

        self._last: tuple | None = None   # (positions, dtype, cos, signed sin) of the previous call

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [T, heads, head_dim]; positions: [T]."""
        # Every layer (q and k) of one forward pass rotates by the same positions tensor: look the
        # angles up once. Holding the tensor keeps the identity check sound.
        last = self._last
        if last is not None and last[0] is positions and last[1] == x.dtype:
            cos, sin = last[2], last[3]
        else:
            cos = self.cos[positions].to(x.dtype)[:, None, :]
            sin = self.signed_sin[positions].to(x.dtype)[:, None, :]
            self._last = (positions, x.dtype, cos, sin)
        # x * cos + cat(-x2, x1) * sin, with the negation folded into the table.
        return x * cos + torch.roll(x, x.shape[-1] // 2, -1) * sin


class LlamaLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype, device):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, d
        self.eps = cfg.rms_norm_eps
        q_out, kv_out = self.num_heads * d, self.num_kv_heads * d
        kw = dict(dtype=dtype, device=device)
        self.input_layernorm = nn.Parameter(torch.ones(h, **kw), requires_grad=False)
        self.qkv_proj = nn.Parameter(torch.empty(q_out + 2 * kv_out, h, **kw), requires_grad=False)
        self.o_proj = nn.Parameter(torch.empty(h, q_out, **kw), requires_grad=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(h, **kw), requires_grad=False)
        self.gate_up_proj = nn.Parameter(torch.empty(2 * cfg.intermediate_size, h, **kw), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(h, cfg.intermediate_size, **kw), requires_grad=False)
        self.split = (q_out, kv_out, kv_out)

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm and the fused QKV projection: [T, (heads + 2 kv_heads) * d]."""
        return linear(rms_norm(x, self.input_layernorm, self.eps), self.qkv_proj)

    def attention_input(self, x: torch.Tensor, positions: torch.Tensor, rotary: Rotary):
        """RMSNorm, the fused QKV projection and RoPE: q [T, heads, d], k and v [T, kv_heads, d]."""
        heads = self.qkv(x).reshape(x.shape[0], -1, self.head_dim)
        # q and k heads sit side by side in the fused output: rotate them in one call.
        qk = rotary(heads[:, :self.num_heads + self.num_kv_heads], positions)
        return qk[:, :self.num_heads], qk[:, self.num_heads:], heads[:, self.num_heads + self.num_kv_heads:]

    def attention_output_and_mlp(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The O projection and residual, then RMSNorm, SwiGLU and the second residual."""
        # x + O(attn) is a new tensor: the input stays as it was.
        x, normed = add_rms_norm(x, linear(attn.reshape(x.shape[0], -1), self.o_proj), self.post_attention_layernorm,
                                 self.eps)
        return x.add_(linear(swiglu(linear(normed, self.gate_up_proj)), self.down_proj))

    def forward(self, x, positions, rotary: Rotary, kv_cache, meta: AttentionMetadata, backend: ModuleType,
                pieces: tuple | None = None, ops: SmallOps | None = None):
        """``pieces``: compiled versions of (attention_input, attention_output_and_mlp), or None for
        eager (``labkit.model.compiled``); the paged KV write and attention always run eagerly. ``ops``:
        the fused small ops (`small_ops`), or None for PyTorch's."""
        before, after = pieces or (LlamaLayer.attention_input, LlamaLayer.attention_output_and_mlp)
        key_cache, value_cache = kv_cache
        q = self._fused_attention_input(x, positions, rotary, kv_cache, meta, backend, ops) if pieces is None else None
        if q is None:
            q, k, v = before(self, x, positions, rotary)
            backend.write_kv(k, v, key_cache, value_cache, meta.slot_mapping)
        attn = backend.paged_attention(q, key_cache, value_cache, meta, self.head_dim ** -0.5)
        if ops is not None and pieces is None:
            x, normed = ops.add_rms_norm(x, ops.linear(attn.reshape(x.shape[0], -1), self.o_proj),
                                         self.post_attention_layernorm, self.eps)
            return x.add_(ops.linear(ops.swiglu(ops.linear(normed, self.gate_up_proj)), self.down_proj))
        return after(self, x, attn)

    def _fused_attention_input(self, x, positions, rotary: Rotary, kv_cache, meta: AttentionMetadata, backend,
                               ops: SmallOps | None = None):
        """`attention_input` and the K/V write with RoPE and the write in one C call (``SmallOps.rope_write_kv``:
        about ten PyTorch kernels a layer fewer, the same bits), where it applies: the fused small ops
        (fp32 or bf16 on the CPU), pools of x's dtype addressed by slot (``KV_POOL_LAYOUT``). Returns q, or
        None elsewhere."""
        key_cache, value_cache = kv_cache
        if ops is None or not (key_cache.dtype == x.dtype and getattr(backend, "KV_POOL_LAYOUT", None) == "slots"
                               and key_cache.is_contiguous() and value_cache.is_contiguous()):
            return None
        heads = ops.linear(ops.rms_norm(x, self.input_layernorm, self.eps), self.qkv_proj)
        return ops.rope_write_kv(heads.contiguous(), rotary, positions, meta.slot_mapping, key_cache, value_cache,
                                 self.num_heads, self.num_kv_heads)


def decode_weight_bytes(model: nn.Module) -> int:
    """Weight bytes one batch-1 decode step reads: every parameter once (a tied embedding is the LM
    head; an untied one is only looked up, one row a token, and not counted), plus the packed bytes
    of quantised linears (modules with an ``nbytes()``, e.g. ``quant.Int4Linear``)."""
    tied = getattr(model, "lm_head", None) is getattr(model, "embed_tokens", None)
    total = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                if name != "embed_tokens" or tied)
    return total + sum(m.nbytes() for m in model.modules() if hasattr(m, "nbytes"))


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.config = cfg
        kw = dict(dtype=dtype, device=device)
        self.embed_tokens = nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size, **kw), requires_grad=False)
        self.layers = nn.ModuleList(LlamaLayer(cfg, dtype, device) for _ in range(cfg.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size, **kw), requires_grad=False)
        self.lm_head = (self.embed_tokens if cfg.tie_word_embeddings else
                        nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size, **kw), requires_grad=False))
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, device)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list,
                meta: AttentionMetadata, logits_indices: torch.Tensor, backend: ModuleType,
                pieces: tuple | None = None) -> torch.Tensor:
        """input_ids, positions: [num_tokens]; returns fp32 logits [len(logits_indices), vocab].
        ``backend`` is the attention module (reference or triton) with write_kv/paged_attention;
        ``pieces`` the layer's compiled halves or None (see ``LlamaLayer.forward``)."""
        x = F.embedding(input_ids, self.embed_tokens)
        ops = small_ops(x, self.config) if pieces is None else None
        plan = ops.decode_plan(self, x, meta, backend, kv_caches) if ops is not None else None
        for layer, kv_cache in zip(self.layers, kv_caches):
            if plan is not None:
                x = ops.decode_layer(layer, x, positions, self.rotary, kv_cache, meta.slot_mapping, plan)
            else:
                x = layer(x, positions, self.rotary, kv_cache, meta, backend, pieces, ops)
        x = x.index_select(0, logits_indices)
        if ops is not None:
            return ops.linear(ops.rms_norm(x, self.norm, self.config.rms_norm_eps), self.lm_head).float()
        return linear(rms_norm(x, self.norm, self.config.rms_norm_eps), self.lm_head).float()

    def linear_weights(self) -> list[torch.Tensor]:
        """Every matrix a forward pass multiplies by, in the order it does: qkv, o, gate_up, down per
        layer, then the LM head."""
        return [w for layer in self.layers for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj,
                                                      layer.down_proj)] + [self.lm_head]

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Copy HF Llama weights in, fusing q/k/v and gate/up projections."""
        def take(name):
            return sd[name].to(self.embed_tokens.dtype)

        with torch.no_grad():
            self.embed_tokens.copy_(take("model.embed_tokens.weight"))
            self.norm.copy_(take("model.norm.weight"))
            if not self.config.tie_word_embeddings:
                self.lm_head.copy_(take("lm_head.weight"))
            for i, layer in enumerate(self.layers):
                p = f"model.layers.{i}."
                layer.input_layernorm.copy_(take(p + "input_layernorm.weight"))
                layer.post_attention_layernorm.copy_(take(p + "post_attention_layernorm.weight"))
                layer.qkv_proj.copy_(torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"]))
                layer.o_proj.copy_(take(p + "self_attn.o_proj.weight"))
                layer.gate_up_proj.copy_(torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")]))
                layer.down_proj.copy_(take(p + "mlp.down_proj.weight"))

    def tune(self) -> None:
        """Choose the product forms for these weights on this CPU (`labkit.model.tuning`: from the disk cache, or
        timed once). Called where an engine is built, after the weights are in place."""
        if self.embed_tokens.device.type != "cpu":
            return
        if self.embed_tokens.dtype == torch.float32:
            fp32.prepare(self.linear_weights())
        elif self.embed_tokens.dtype == torch.bfloat16:
            # bf16: the C kernel or PyTorch's forms.
            bf16.prepare_bf16(self.linear_weights(), _bf16_torch)
