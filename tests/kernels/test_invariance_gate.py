"""The row-invariance gate and the choice it drives: a product form whose bits follow the row count is
never offered, and the engine falls back to one that does not (``labkit/kernels/invariance.py``).

These run on any CPU: the non-invariant product is emulated (one ulp up whenever the row count is not a
multiple of 16, the shape of a BLAS tail kernel), so the fallback rules are exercised here even where
every real kernel happens to be invariant.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labkit.kernels import invariance, native
from labkit.kernels import linear_forms as lf
from labkit.kernels.tuning import bf16, cache
from labkit.model import quant


def tail_kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = F.linear(x, w)
    return torch.nextafter(y, torch.full_like(y, float("inf"))) if x.shape[0] % 16 else y


def differs_past(rows: int):
    """A product that changes bits only once more than ``rows`` rows are computed together."""
    def fn(x, w):
        y = (x.double() @ w.double().t()).float()        # each row on its own: invariant by itself
        return (torch.nextafter(y, torch.full_like(y, float("inf"))) if x.shape[0] > rows else y).to(x.dtype)
    return fn


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_gate_refuses_a_product_whose_bits_follow_the_row_count(dtype):
    why = invariance.linear_difference(tail_kernel, (64, 96), dtype)
    assert why is not None and "differ" in why


def test_the_gate_finds_a_difference_that_only_a_prefix_cache_hits_tail_shows():
    # Invariant at every prefix up to 64 rows and in every window, except a batch of more than 64: only
    # the full batch differs, so "the first t rows" catches it at t = 64 (against the 100-row batch).
    assert invariance.linear_difference(differs_past(64), (32, 64), torch.float32) is not None
    assert invariance.linear_difference(differs_past(1000), (32, 64), torch.float32) is None


def test_the_gate_passes_an_invariant_product():
    fp32_rows = lambda x, w: torch.stack([F.linear(r[None].double(), w.double())[0] for r in x]).to(x.dtype)  # noqa: E731
    assert invariance.linear_difference(fp32_rows, (48, 64), torch.float32) is None
    if native.available():
        assert invariance.linear_difference(native.linear_rows, (48, 64), torch.float32) is None


@pytest.fixture
def bf16_registry(monkeypatch, tmp_path):
    """A fresh bf16 registry with one small weight, and a private disk cache."""
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    monkeypatch.delenv(lf.BF16_ENV, raising=False)
    monkeypatch.setattr(bf16, "_registered", None)
    monkeypatch.setattr(bf16, "_choice", {})
    monkeypatch.setattr(bf16, "_refused", {})


def _register(torch_form) -> None:
    bf16.register([torch.randn(64, 96).bfloat16()], torch_form)


def test_a_refused_pytorch_bf16_form_is_never_used(bf16_registry, monkeypatch):
    _register(tail_kernel)
    assert lf.bf16_torch_refused() is not None
    assert lf.Bf16Form.TORCH not in lf.bf16_offered()
    monkeypatch.setenv(lf.BF16_ENV, "0")      # asked for, but not offered: refused with a warning
    with pytest.warns(RuntimeWarning, match="does not offer"):
        form = lf.bf16_form()
    assert form == (lf.Bf16Form.NATIVE if native.has_bf16() else lf.Bf16Form.UPCAST)


def test_without_any_invariant_bf16_form_products_run_in_fp32(bf16_registry, monkeypatch):
    _register(tail_kernel)
    monkeypatch.setattr(native, "has_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="no row-invariant bf16 product"):
        assert lf.bf16_form() == lf.Bf16Form.UPCAST
    from labkit.kernels.ops import torch_ops
    x, w = torch.randn(5, 96).bfloat16(), torch.randn(64, 96).bfloat16()
    assert torch.equal(torch_ops.linear(x, w), lf.invariant_product(x.float(), w.float()).bfloat16())
    assert torch.equal(torch_ops.linear(x[:1], w), torch_ops.linear(x, w)[:1])


def test_an_invariant_pytorch_bf16_form_is_offered_and_the_refusal_is_cached_on_disk(bf16_registry):
    _register(lambda x, w: torch.stack([F.linear(r[None], w)[0] for r in x]))
    assert lf.bf16_torch_refused() is None
    assert lf.Bf16Form.TORCH in lf.bf16_offered()
    assert any("row invariance" in key for key in cache.read())


def test_a_refused_pytorch_int4_kernel_falls_back_to_an_invariant_product(monkeypatch):
    monkeypatch.delenv(quant.INT4_ENV, raising=False)
    real = quant.torch_int4

    def tail(x, packed, group, sz):
        y = real(x, packed, group, sz)
        return torch.nextafter(y, torch.full_like(y, float("inf"))) if x.shape[0] % 16 else y

    monkeypatch.setattr(quant, "torch_int4", tail)
    monkeypatch.setattr(quant, "_int4_forms", {})
    assert quant.TORCH_INT4 not in quant.int4_offered(64, 64, 32)
    weight = quant.Int4Linear(torch.randn(64, 64))
    with pytest.warns(RuntimeWarning, match="not row-invariant"):
        form = quant.int4_form(64, 64, 32)
    assert form in (quant.NATIVE_INT4, quant.DENSE_FP32)
    x = torch.randn(7, 64)
    assert torch.equal(weight(x[:3]), weight(x)[:3])
    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(quant, "_int4_forms", {})
    with pytest.warns(RuntimeWarning):
        assert quant.int4_form(64, 64, 32) == quant.DENSE_FP32
    assert torch.equal(weight(x[:3]), weight(x)[:3])
