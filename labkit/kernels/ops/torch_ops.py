"""The ops of a forward through PyTorch's kernels: the reference path, and the one every other
implementation (`native_ops`) is tested against.

``linear`` takes the product form the tuning chose for this CPU (`labkit.kernels.tuning`, which may be
labkit's C product); ``rms_norm``, ``add_rms_norm`` and ``swiglu`` are PyTorch's kernels. Each keeps
the bits Hugging Face's ``LlamaForCausalLM`` computes, so greedy output matches it token for token
(tests/engine/test_parity.py).
"""

from __future__ import annotations

import functools
import math
from array import array

import torch
import torch.nn.functional as F

from labkit.kernels import native
from labkit.kernels.cpu_features import has_amx
from labkit.kernels.tuning import bf16, fp32
from labkit.kernels.tuning.bf16 import Bf16Form
from labkit.kernels.tuning.forms import order_probe

# Which CPU matmul to use for a [T, in] x [in, out] linear, by row count T (`python -m bench.linear_rows`
# measures the forms and prints the CPU it ran on).
# fp32: one batch-invariant form for every row count (a row gets the same bits in any batch, so the
# scheduler never changes a token: tests/kernels/test_batch_invariance.py), the faster of two on the CPU at hand by a
# timing probe (`labkit.kernels.tuning.fp32`); a fixed table tuned on one Xeon was 2.5x slower than the best form at
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
    kernels (labkit's C form, with these bits, is `native_ops.NativeOps.rms_norm`). fp32 input takes torch's
    fused kernel (one op instead of six; bit-identical to the written-out form, which tests/kernels/test_model_ops.py
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
    `native_ops.NativeOps.add_rms_norm`). The sum is a new tensor; x stays as it was."""
    total = x + delta
    return total, rms_norm(total, weight, eps)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for the fused gate/up output [T, 2I] (one C call in `native_ops.NativeOps.swiglu`)."""
    gate, up = gate_up.chunk(2, -1)
    return F.silu(gate) * up


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


def prepare_forms(weights: list, dtype: torch.dtype, device: torch.device) -> None:
    """Choose the product forms `linear` takes for a model's weights on this CPU (`labkit.kernels.tuning`:
    from the disk cache, or timed once); ``dtype`` and ``device`` are the model's. fp32: a form per shape;
    bf16: the C kernel or PyTorch's forms (`_bf16_torch`)."""
    if device.type != "cpu":
        return
    if dtype == torch.float32:
        fp32.prepare(weights)
    elif dtype == torch.bfloat16:
        bf16.prepare_bf16(weights, _bf16_torch)


class TorchOps:
    """The `labkit.kernels.ops.Ops` of a forward through the functions above. Each method calls the module
    function of its name when it runs, so a test or `bench.decode_profile` that replaces the function
    reaches every caller. RoPE and the K/V write stay apart (``Rotary``, the backend's ``write_kv``) and
    the layers run op by op."""

    def linear(self, x: torch.Tensor, weight) -> torch.Tensor:
        return linear(x, weight)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return rms_norm(x, weight, eps)

    def add_rms_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return add_rms_norm(x, delta, weight, eps)

    def swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        return swiglu(gate_up)

    def fuses_rope_and_kv_write(self, dtype: torch.dtype, kv_cache, backend) -> bool:
        return False

    def rope_write_kv(self, *args) -> torch.Tensor:
        raise NotImplementedError("PyTorch's ops rotate with Rotary and write K/V with the backend's write_kv")

    def decode_plan(self, model, rows: torch.Tensor, meta, backend, kv_caches: list) -> None:
        return None

    def decode_layer(self, *args) -> torch.Tensor:
        raise NotImplementedError("PyTorch's ops run a layer op by op (decode_plan is None)")


TORCH_OPS = TorchOps()
