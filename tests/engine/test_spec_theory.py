"""Specification of labkit.spec_decode.theory (Leviathan et al. 2023, Section 3), and a check that the
rejection sampler behaves as the theory predicts."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from labkit.sample.rejection_sampler import rejection_sample_batch
from labkit.spec_decode.theory import (
    acceptance_rate_from_probs,
    expected_speedup,
    expected_tokens_per_step,
    optimal_k,
)

alphas = st.floats(0.0, 1.0)
ks = st.integers(0, 16)
costs = st.floats(0.0, 2.0)


def test_tokens_per_step_at_known_points():
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # 3.3616
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens_per_step(0.0, 7) == 1.0  # every first draft rejected: 1 token
    assert expected_tokens_per_step(0.9, 0) == 1.0  # no drafts: plain decoding


def test_tokens_per_step_at_alpha_one_is_k_plus_one_and_continuous():
    assert expected_tokens_per_step(1.0, 5) == 6.0
    assert expected_tokens_per_step(1 - 1e-9, 5) == pytest.approx(6.0, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(alphas.filter(lambda a: a < 0.999), ks)
def test_tokens_per_step_equals_the_closed_form(alpha, k):
    closed_form = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert expected_tokens_per_step(alpha, k) == pytest.approx(closed_form, rel=1e-9)


def test_speedup_at_known_point():
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)


@settings(max_examples=100, deadline=None)
@given(ks, costs)
def test_speedup_with_alpha_zero_is_one_over_kc_plus_one(k, c):
    assert expected_speedup(0.0, k, c) == pytest.approx(1 / (k * c + 1))


@settings(max_examples=100, deadline=None)
@given(ks, costs)
def test_speedup_with_alpha_one_is_k_plus_one_over_kc_plus_one(k, c):
    assert expected_speedup(1.0, k, c) == pytest.approx((k + 1) / (k * c + 1))


@settings(max_examples=200, deadline=None)
@given(alphas, costs, st.integers(1, 16))
def test_optimal_k_is_the_best_k_on_the_grid(alpha, c, k_max):
    best = optimal_k(alpha, c, k_max)
    assert 0 <= best <= k_max
    assert all(expected_speedup(alpha, best, c) >= expected_speedup(alpha, k, c)
               for k in range(k_max + 1))


@settings(max_examples=200, deadline=None)
@given(alphas, costs)
def test_speculation_pays_exactly_when_alpha_exceeds_c(alpha, c):
    assume(abs(alpha - c) > 1e-9)  # away from the tie alpha == c, where rounding decides
    assert (optimal_k(alpha, c) > 0) == (alpha > c)  # Corollary 3.9 and its converse


def test_optimal_k_sane_values():
    assert optimal_k(1.0, 0.0, k_max=16) == 16  # free, perfect drafts: draft as many as allowed
    assert optimal_k(0.0, 0.1) == 0
    assert 1 <= optimal_k(0.6, 0.05) < optimal_k(0.9, 0.05) <= 16  # better drafts: longer drafts
    assert optimal_k(0.9, 0.01) > optimal_k(0.9, 0.3)  # cheaper drafts: longer drafts


def test_acceptance_rate_is_the_overlap_of_p_and_q():
    assert acceptance_rate_from_probs([0.5, 0.5, 0.0], [0.5, 0.5, 0.0]) == 1.0
    assert acceptance_rate_from_probs([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert acceptance_rate_from_probs([0.7, 0.2, 0.1], [0.4, 0.4, 0.2]) == pytest.approx(0.7)
    rows = acceptance_rate_from_probs(torch.tensor([[1.0, 0.0], [0.5, 0.5]]),
                                      torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    assert rows.tolist() == [0.5, 1.0]


def test_acceptance_rate_sums_the_overlap_in_double_precision():
    """alpha = sum_x min(p(x), q(x)), summed in float64 whatever the inputs are: Python floats are doubles,
    so a list read as float32 (torch's default) would move 0.1 to 0.10000000149."""
    p, q = [0.1, 0.9], [0.3, 0.7]
    assert acceptance_rate_from_probs(p, q) == min(0.1, 0.3) + min(0.9, 0.7)
    assert acceptance_rate_from_probs(q, p) == min(0.3, 0.1) + min(0.7, 0.9)
    with pytest.raises(ValueError, match=r"^p and q must have the same shape \[\.\.\., vocab\], got \(2,\) and \(1,\)$"):
        acceptance_rate_from_probs([0.5, 0.5], [1.0])


@pytest.mark.parametrize("call", [
    lambda: expected_tokens_per_step(1.5, 2), lambda: expected_tokens_per_step(0.5, -1),
    lambda: expected_speedup(0.5, 2, -0.1), lambda: optimal_k(0.5, 0.1, k_max=-1),
    lambda: acceptance_rate_from_probs([0.5, 0.5], [1.0]),
])
def test_out_of_range_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_optimal_k_takes_the_smallest_k_on_a_tie():
    """alpha = 0 and free drafts: every k gives exactly 1 token per unit of time, so k = 0 (the docstring's
    rule: the smallest k on ties, i.e. do not speculate for nothing)."""
    assert all(expected_speedup(0.0, k, 0.0) == 1.0 for k in range(17))
    assert optimal_k(0.0, 0.0) == 0
    assert optimal_k(1.0, 0.0) == 16                  # free, perfect drafts: the default k_max, 16


@pytest.mark.parametrize("call, field, value", [
    (lambda: expected_speedup(0.5, 2, True), "c", "True"),               # a bool is not a cost
    (lambda: expected_speedup(0.5, 2, float("inf")), "c", "inf"),
    (lambda: optimal_k(0.5, 0.1, k_max=-1), "k_max", "-1"),
    (lambda: expected_tokens_per_step(0.5, -1), "k", "-1"),
    (lambda: expected_tokens_per_step(0.5, True), "k", "True"),           # a bool is not a draft length
    (lambda: expected_tokens_per_step(1.5, 2), "alpha", "1.5"),
    (lambda: expected_tokens_per_step(True, 2), "alpha", "True"),         # nor an acceptance rate
    (lambda: expected_speedup("0.5", 2, 0.1), "alpha", "'0.5'"),          # a string: refused, not compared
])
def test_a_bad_argument_is_refused_naming_the_field_and_the_value(call, field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be .*got {value}$"):
        call()


# --- the sampler realises the theory -------------------------------------------------------------

def test_sampler_acceptance_and_tokens_per_step_match_theory():
    """k = 3 positions with the same (p, q): acceptance is i.i.d. with alpha = sum min(p, q), the
    setting of Section 3.1, so the mean tokens per step must match Equation (1)."""
    vocab, k, trials = 20, 3, 20_000
    g = torch.Generator().manual_seed(0)
    p = (2 * torch.randn(vocab, generator=g)).softmax(-1)
    q = (torch.log(p) + torch.randn(vocab, generator=g)).softmax(-1)
    alpha = acceptance_rate_from_probs(p, q)
    drafts = torch.multinomial(q, trials * k, replacement=True, generator=g).view(trials, k)
    outputs = rejection_sample_batch(drafts.tolist(), q.repeat(trials * k, 1),
                                     p.repeat(trials * (k + 1), 1), g)
    lengths = torch.tensor([len(o) for o in outputs], dtype=torch.float64)
    first_accepted = (lengths >= 2).double().mean().item()
    assert abs(first_accepted - alpha) < 5 * math.sqrt(alpha * (1 - alpha) / trials)
    standard_error = lengths.std().item() / math.sqrt(trials)
    assert abs(lengths.mean().item() - expected_tokens_per_step(alpha, k)) < 5 * standard_error
