"""The invariance gate's rules from its definition (``labkit/kernels/invariance.py``): every row count in
``COUNTS`` and every window in ``WINDOWS`` is compared, on the order probe's rows first and then the
random rows, and the sentence names the first that differs; the probe's inputs and weight are exactly
what their docstrings say. Products here are emulated row by row, so the answers hold on any CPU."""

from __future__ import annotations

import pytest
import torch

from labkit.kernels import invariance as inv


def exact(x: torch.Tensor) -> torch.Tensor:
    """Each row on its own, in float64: the same bits whatever the batch."""
    return (x.double() * torch.arange(1, x.shape[1] + 1, dtype=torch.float64)).sum(-1, keepdim=True).to(x.dtype)


def bumped_when(condition):
    def fn(x):
        y = exact(x)
        return torch.nextafter(y, torch.full_like(y, float("inf"))) if condition(x) else y
    return fn


def inputs(in_features: int = 8):
    return inv.probe_inputs(in_features, torch.float32)


def test_an_invariant_product_passes():
    assert inv.first_difference(exact, inputs()) is None
    assert inv.linear_difference(lambda x, w: (x.double() @ w.double().t()).float(), (16, 8), torch.float32) is None


@pytest.mark.parametrize("t", inv.COUNTS)
def test_every_count_is_checked_and_the_first_that_differs_is_named(t):
    why = inv.first_difference(bumped_when(lambda x: x.shape[0] == t), inputs())
    assert why == f"order-probe rows: the first {t} rows alone differ from the same rows among 100"


def test_the_counts_and_windows_are_those_the_gate_documents():
    assert inv.COUNTS == (*range(1, 18), 20, 24, 31, 32, 33, 47, 48, 49, 64) and inv.COUNT == 100
    assert inv.WINDOWS == ((16, 1), (32, 1), (48, 1), (47, 2), (48, 3), (32, 17), (5, 40), (64, 36), (99, 1))


@pytest.mark.parametrize("s,t", inv.WINDOWS)
def test_every_window_is_checked_and_named_by_its_first_and_last_row(s, t):
    xs = inputs()               # the random rows: each window's rows are its own (the probe repeats every 8)
    why = inv.first_difference(bumped_when(lambda x: torch.equal(x, xs[1][s:s + t])), xs)
    assert why == f"random rows: rows {s}..{s + t - 1} alone differ from the same rows among 100"


def test_the_random_rows_are_checked_after_the_order_probe():
    xs = inputs()
    random_first = xs[1][0]
    why = inv.first_difference(bumped_when(lambda x: x.shape[0] == 3 and torch.equal(x[0], random_first)), xs)
    assert why == "random rows: the first 3 rows alone differ from the same rows among 100"
    why = inv.first_difference(bumped_when(lambda x: x.shape[0] == 100 and torch.equal(x[0], random_first)), xs)
    assert why == "random rows: the first 1 rows alone differ from the same rows among 100"


def test_the_gate_runs_without_autograd():
    seen = []
    inv.first_difference(lambda x: seen.append(torch.is_inference_mode_enabled()) or exact(x), inputs())
    assert seen and all(seen)


def test_the_order_probe_is_one_row_of_ones_at_eight_scales_and_the_random_rows_follow_the_seed():
    ones, rand = inv.probe_inputs(12, torch.bfloat16)
    assert ones.shape == rand.shape == (100, 12) and ones.dtype == rand.dtype == torch.bfloat16
    scales = [1.0, 2.0, 3.0, -1.0, 0.5, 5.0, -3.0, 1.5]
    for i in range(100):
        assert torch.equal(ones[i].float(), torch.full((12,), scales[i % 8])), i
    g = torch.Generator().manual_seed(12)
    assert torch.equal(rand, torch.randn(100, 12, generator=g).to(torch.bfloat16))
    again = inv.probe_inputs(12, torch.bfloat16, seed=2)[1]
    g = torch.Generator().manual_seed(2 * 1009 + 12)
    assert torch.equal(again, torch.randn(100, 12, generator=g).to(torch.bfloat16))


def test_the_order_weight_cancels_two_large_terms_at_distinct_columns_in_every_row():
    w, g = inv.order_pattern(40, 16)
    assert w.shape == (40, 16) and w.dtype == torch.float32
    assert ((w == 2.0 ** 26).sum(1) == 1).all() and ((w == -2.0 ** 26).sum(1) == 1).all()
    assert ((w == 1.0).sum(1) == 14).all()
    assert not torch.equal((w == 2.0 ** 26).nonzero()[:, 1], (w == -2.0 ** 26).nonzero()[:, 1])
    w2, _ = inv.order_pattern(40, 16)
    assert torch.equal(w, w2)                               # the same pattern every time (seed 26)
    big = torch.randint(0, 16, (40,), generator=torch.Generator().manual_seed(26))
    assert torch.equal((w == 2.0 ** 26).nonzero()[:, 1], big)
    mixed = inv.order_weight(40, 16, torch.float64)
    assert mixed.dtype == torch.float64
    small = (mixed - w.double())
    assert 0 < small.abs().max() < 0.1 and small.abs().mean() > 1e-3        # 0.01 x randn, not nothing
    _, g = inv.order_pattern(40, 16)
    assert torch.equal(mixed, (w + torch.randn(40, 16, generator=g) * 0.01).double())


def test_the_linear_gate_multiplies_by_the_order_weight_of_the_shape_and_dtype():
    seen = []

    def fn(x, w):
        seen.append((tuple(x.shape[1:]), tuple(w.shape), x.dtype, w.dtype))
        return exact(x)

    assert inv.linear_difference(fn, (24, 8), torch.bfloat16) is None
    assert set(seen) == {((8,), (24, 8), torch.bfloat16, torch.bfloat16)}
    w = []
    inv.linear_difference(lambda x, weight: w.append(weight) or exact(x), (24, 8), torch.float32)
    assert torch.equal(w[0], inv.order_weight(24, 8, torch.float32))
