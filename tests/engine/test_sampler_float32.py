"""The float32 sampler honours every valid ``SamplingParams`` value, and a row whose logits give no
distribution fails its own request, never ``torch.multinomial`` and never the batch."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.sample.sampler import InvalidDistribution, Sampler, check_distribution, sample_tokens, to_probs
from labkit.sampling_params import GREEDY_TEMPERATURE, SamplingParams
from labkit.scheduler_output import ScheduledRequest, SchedulerOutput, StepKind

finite_logits = st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=2, max_size=40)
any_top_p = st.floats(0.0, 1.0, exclude_min=True, allow_subnormal=True)     # 5e-324 included


@settings(max_examples=300, deadline=None)
@given(logits=finite_logits, top_p=any_top_p, top_k=st.integers(-1, 45),
       temperature=st.floats(GREEDY_TEMPERATURE, 100.0))
def test_every_valid_parameter_gives_a_distribution_that_keeps_the_most_likely_token(logits, top_p, top_k,
                                                                                      temperature):
    row = torch.tensor([logits])
    probs = to_probs(row, SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k))[0]
    assert torch.isfinite(probs).all() and math.isclose(float(probs.sum()), 1.0, rel_tol=1e-4)
    # A most likely token of the distribution survives (any of a tie). Judged on the tempered logits, the
    # distribution's own: dividing by the temperature can round a near-tie into a tie ([0, 1.4e-45] / 2 is
    # [0, 0] in float32), and then either token is a most likely one.
    tempered = row / temperature
    assert probs[tempered[0] == tempered.max()].sum() > 0


@pytest.mark.parametrize("logits, temperature", [([0.0, 1.401298464324817e-45], 2.0), ([0.0, 1e-3], 2.0)])
def test_a_near_tie_is_judged_on_the_tempered_logits(logits, temperature):
    """The example that showed it: at temperature 2 the smallest subnormal halves to 0, a tie that top_p keeps
    one side of; a gap temperature cannot close keeps its larger token."""
    probs = to_probs(torch.tensor([logits]), SamplingParams(temperature=temperature, top_p=0.5))[0]
    tempered = torch.tensor(logits) / temperature
    assert probs[tempered == tempered.max()].sum() > 0
    if tempered[1] > tempered[0]:
        assert probs[1] == 1.0


@pytest.mark.parametrize("top_p", [1e-46, 5e-324, 1e-30, 1e-8])
def test_a_top_p_too_small_for_float32_keeps_exactly_the_most_likely_token(top_p):
    row = torch.tensor([[0.5, 2.0, 1.0, -3.0]])
    probs = to_probs(row, SamplingParams(temperature=1.0, top_p=top_p))
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_logits_with_no_distribution_raise_invalid_distribution_and_never_reach_multinomial(monkeypatch, bad):
    multinomial = torch.multinomial

    def checked_multinomial(probs, *args, **kwargs):
        assert torch.isfinite(probs).all(), "a non-finite distribution reached torch.multinomial"
        return multinomial(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", checked_multinomial)
    row = torch.tensor([[0.5, bad, 1.0]])
    with pytest.raises(InvalidDistribution, match="NaN or infinite logits"):
        sample_tokens(row, [SamplingParams(temperature=1.0)], [torch.Generator().manual_seed(0)])
    with pytest.raises(InvalidDistribution):
        check_distribution(to_probs(row, SamplingParams(temperature=0.7, top_p=0.5)))


@pytest.mark.parametrize("row, valid", [
    ([0.25, 0.75], True), ([1e-30, 0.0], True), ([3.0, 1.0], True),        # a positive, finite sum: drawable
    ([0.0, 0.0], False),                                                       # sums to 0: nothing to draw
    ([math.inf, 0.0], False), ([1.0, math.inf], False), ([math.nan, 1.0], False),
], ids=["sums-to-1", "tiny-positive", "unnormalised", "all-zero", "inf-first", "inf-last", "nan"])
def test_check_distribution_accepts_exactly_the_rows_that_are_finite_with_a_positive_sum(row, valid):
    """The definition in its docstring, on probabilities given directly (``to_probs`` never returns some of
    these): a row is a distribution when it is finite with a positive sum; one bad row fails the batch call."""
    probs = torch.tensor([[0.5, 0.5], row])
    if valid:
        check_distribution(probs)
    else:
        with pytest.raises(InvalidDistribution, match="no probability distribution"):
            check_distribution(probs)


def test_each_sampled_row_is_judged_and_drawn_from_its_own_logits_alone():
    """``sample_tokens`` raises for a *sampled* row with no distribution; a greedy row is an argmax and is
    never judged. So a sampled row followed by a greedy row of NaN logits draws its token, from its own
    row with its own generator, as ``torch.multinomial`` on that row's softmax does."""
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [math.nan, 0.0, 0.0, 0.0]])
    params = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.0)]
    for seed in range(20):
        copy = torch.Generator().manual_seed(seed)
        token = sample_tokens(logits, params, [torch.Generator().manual_seed(seed), None])[0]
        assert token == int(torch.multinomial(logits[0].softmax(-1), 1, generator=copy)), seed


def test_the_sampler_fails_only_the_request_whose_row_has_no_distribution():
    sampler = Sampler(seed=0)
    ids = ["ok-greedy", "bad", "ok-sampled"]
    for rid, params in zip(ids, [SamplingParams(), SamplingParams(temperature=1.0), SamplingParams(temperature=1.0)]):
        sampler.add(rid, params)
    logits = torch.tensor([[0.0, 5.0, 0.0], [math.nan, 0.0, 0.0], [0.0, 0.0, 50.0]])
    rows = [ScheduledRequest(rid, (1,), 3, 0, StepKind.DECODE, [0], (3,), 1) for rid in ids]
    tokens = sampler.sample(SchedulerOutput.from_rows(rows), logits).as_dict()
    failed = sampler.take_failed()
    assert set(failed) == {"bad"} and "NaN" in failed["bad"]
    assert tokens["ok-greedy"] == (1,) and tokens["ok-sampled"] == (2,)
    assert sampler.take_failed() == {}                       # each failure is reported once


@pytest.mark.parametrize("batched", [True, False])
def test_a_verification_row_with_no_distribution_fails_its_request_alone_and_says_why(batched):
    """Speculative verification of a sampling request (its target p from ``to_probs``): NaN logits fail that
    request with the reason, the other request's drafts are verified as usual."""
    sampler = Sampler(seed=0, batched=batched)
    for rid in ("bad", "ok"):
        sampler.add(rid, SamplingParams(temperature=1.0))
    ok_rows = torch.tensor([[0.0, 60.0, 0.0], [0.0, 0.0, 60.0], [60.0, 0.0, 0.0]])   # p: the drafts, then 0
    bad_rows = ok_rows.clone()
    bad_rows[1, 0] = math.nan
    rows = [ScheduledRequest(rid, (1, 1, 2), 3, 2, StepKind.VERIFY, [0], (3, 4, 5), 3) for rid in ("bad", "ok")]
    tokens = sampler.sample(SchedulerOutput.from_rows(rows), torch.cat([bad_rows, ok_rows])).as_dict()
    failed = sampler.take_failed()
    assert set(failed) == {"bad"} and "NaN or infinite logits" in failed["bad"]
    assert tokens["ok"] == (1, 2, 0)                         # both drafts accepted, then the bonus token
