"""Sampling parameters against their definitions, written out here from the formulas (not against
another labkit path).

    temperature T   p = softmax(logits / T); T below 1e-5 (``GREEDY_TEMPERATURE``, vLLM's floor) is greedy:
                    argmax, the first maximal index on a tie (torch.argmax, as vLLM)
    top_k = k       keep the k largest logits, renormalise. A tie at the k-th value keeps every tied token,
                    so more than k may survive: labkit masks ``logits < k-th value``, as vLLM's
                    ``apply_top_k_only`` and ``apply_top_k_top_p`` do (``logits_sort < top_k_mask``)
    top_p = p       after temperature and top-k: sort descending, keep the smallest prefix whose mass
                    reaches p (>= p), never fewer than the most likely token; renormalise (Holtzman et al.
                    2020; vLLM drops the ascending tail whose cumulative mass is <= 1 - p: the same set)
    seed            a request's draws depend on its seed alone, not on what it is batched with; unseeded, the
                    k-th sequence an engine registers (children included) is seeded engine seed * 1_000_003 + k
    n > 1           child i of a request with seed s draws as a request with seed s + i (vLLM's
                    ``ParentRequest.get_child_sampling_params``): distinct, reproducible streams

Distributional checks are Pearson chi-square tests with fixed seeds (so they are exact), sized with
the noncentral chi-square so that a temperature off by 10 % fails with probability >= 0.99.
"""

from __future__ import annotations

import math
import random
import zlib

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.sample.sampler import Sampler, sample_tokens, to_probs
from labkit.sampling_params import GREEDY_TEMPERATURE
from labkit.scheduler_output import ScheduledRequest, SchedulerOutput, StepKind
from tests.engine.test_rejection_sampler import chi2_critical, chi2_sf, noncentral_chi2_sf

SIGNIFICANCE = 1e-3
POWER = 0.99

# ------------------------------------------------------------------ the definitions, in float64


def reference_probs(logits: list[float], temperature: float, top_k: int = 0, top_p: float = 1.0) -> list[float]:
    """The sampling distribution, from the definitions in the module docstring."""
    n = len(logits)
    if temperature < GREEDY_TEMPERATURE:
        best = max(range(n), key=lambda i: (logits[i], -i))          # the first maximal index
        return [1.0 if i == best else 0.0 for i in range(n)]
    z = [x / temperature for x in logits]
    if 0 < top_k < n:
        kth = sorted(z, reverse=True)[top_k - 1]
        z = [x if x >= kth else -math.inf for x in z]
    top = max(z)
    weights = [math.exp(x - top) if x > -math.inf else 0.0 for x in z]
    total = sum(weights)
    p = [w / total for w in weights]
    if top_p < 1.0:
        keep, mass = set(), 0.0
        for i in sorted(range(n), key=lambda i: -p[i]):
            keep.add(i)
            mass += p[i]
            if mass >= top_p:
                break
        kept = sum(p[i] for i in keep)
        p = [p[i] / kept if i in keep else 0.0 for i in range(n)]
    return p


def probs(logits: list[float], **params) -> list[float]:
    return to_probs(torch.tensor([logits]), SamplingParams(**params))[0].tolist()


def random_logits(seed: int, vocab: int = 40, scale: float = 3.0) -> list[float]:
    """Distinct values (no ties), not in sorted order."""
    return (torch.randn(vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).tolist()


def midpoint_p(p: list[float], keep: int) -> float:
    """A top_p that exactly ``keep`` tokens reach, halfway between the mass of the ``keep - 1`` and the ``keep``
    most likely tokens: no rounding decides it."""
    mass = sorted(p, reverse=True)
    return (sum(mass[:keep - 1]) + sum(mass[:keep])) / 2


# ------------------------------------------------------------------ temperature and greedy


@pytest.mark.parametrize("temperature", [0.25, 0.6, 1.0, 1.7, 4.0])
def test_temperature_divides_the_logits_before_the_softmax(temperature):
    for seed in range(3):
        logits = random_logits(seed)
        assert probs(logits, temperature=temperature) == pytest.approx(reference_probs(logits, temperature), abs=1e-6)


def test_a_temperature_below_the_greedy_floor_is_the_argmax_whatever_top_k_and_top_p_say():
    logits = [0.5, 2.0, 3.0, 3.0, -1.0]                     # a tie for the maximum: the first index wins
    for params in (dict(temperature=0.0), dict(temperature=GREEDY_TEMPERATURE / 2),
                   dict(temperature=0.0, top_k=2, top_p=0.5)):
        assert probs(logits, **params) == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert SamplingParams(temperature=0.0).greedy and SamplingParams(temperature=GREEDY_TEMPERATURE / 2).greedy
    assert not SamplingParams(temperature=GREEDY_TEMPERATURE).greedy      # "below" the floor: the floor samples
    assert sample_tokens(torch.tensor([logits] * 3), [SamplingParams()] * 3, [None] * 3) == [2, 2, 2]


# ------------------------------------------------------------------ top-k


@pytest.mark.parametrize("top_k", [1, 2, 5, 39])
def test_top_k_keeps_exactly_the_k_largest_logits_renormalised(top_k):
    logits = random_logits(7)
    got = probs(logits, temperature=0.8, top_k=top_k)
    kept = {i for i, x in enumerate(got) if x > 0}
    assert kept == set(sorted(range(len(logits)), key=lambda i: -logits[i])[:top_k])
    assert got == pytest.approx(reference_probs(logits, 0.8, top_k=top_k), abs=1e-6)


@pytest.mark.parametrize("top_k", [0, -1, 40, 1000])
def test_top_k_off_or_at_least_the_vocabulary_keeps_every_token(top_k):
    logits = random_logits(8)
    assert probs(logits, temperature=1.3, top_k=top_k) == pytest.approx(reference_probs(logits, 1.3), abs=1e-6)


def test_a_tie_at_the_kth_logit_keeps_every_tied_token_as_vllm_does():
    e = math.e
    assert probs([3.0, 2.0, 2.0, 1.0], temperature=1.0, top_k=2) == pytest.approx(
        [e / (e + 2), 1 / (e + 2), 1 / (e + 2), 0.0], abs=1e-6)          # three tokens for k = 2


# ------------------------------------------------------------------ top-p

# Probabilities 1/2, 1/4, 1/8, 1/16, 1/16 are exact in float32, so the boundary "mass reaches p" is exact too.
DYADIC = [math.log(8), math.log(4), math.log(2), 0.0, 0.0]


@pytest.mark.parametrize("top_p, expected", [
    (0.5, [1.0, 0, 0, 0, 0]),                              # the most likely token alone reaches p exactly
    (0.5 + 1e-6, [2 / 3, 1 / 3, 0, 0, 0]),
    (0.75, [2 / 3, 1 / 3, 0, 0, 0]),                       # 1/2 + 1/4 reaches 0.75 exactly: the 1/8 stays out
    (0.75 + 1e-6, [4 / 7, 2 / 7, 1 / 7, 0, 0]),
    (0.875, [4 / 7, 2 / 7, 1 / 7, 0, 0]),
    (1e-9, [1.0, 0, 0, 0, 0]),                             # a tiny p keeps the most likely token
    (1.0, [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 16]),
])
def test_top_p_keeps_the_smallest_set_of_most_likely_tokens_whose_mass_reaches_p(top_p, expected):
    assert probs(DYADIC, temperature=1.0, top_p=top_p) == pytest.approx(expected, abs=1e-7)


def test_top_p_of_one_truncates_nothing_even_where_the_heads_mass_rounds_to_one():
    """top_p = 1.0 (the default) is no nucleus at all: the distribution is the tempered softmax, every token
    with its own positive probability. Here the most likely token's probability rounds to exactly 1.0 in
    float32, so a cumulative-mass test run at p = 1.0 would cut off the 39 tokens behind it."""
    logits = torch.tensor([[0.0] + [-30.0] * 39])
    got = to_probs(logits, SamplingParams(temperature=1.0, top_p=1.0))
    assert float(got[0, 0]) == 1.0 and float(got[0, 1:].min()) > 0.0
    assert torch.equal(got, logits.softmax(-1))


@pytest.mark.parametrize("seed", range(4))
def test_top_p_sums_mass_from_the_most_likely_token_down_wherever_the_tokens_sit(seed):
    logits = random_logits(100 + seed, vocab=30, scale=1.5)         # the vocabulary order is not the rank order
    p = reference_probs(logits, 1.0)
    for keep in (1, 2, 4, 9):
        top_p = midpoint_p(p, keep)
        got = probs(logits, temperature=1.0, top_p=top_p)
        assert sum(x > 0 for x in got) == keep
        assert got == pytest.approx(reference_probs(logits, 1.0, top_p=top_p), abs=1e-6)


def test_top_p_applies_to_the_distribution_left_after_temperature_and_top_k():
    logits = random_logits(11, vocab=30, scale=1.0)
    for temperature, top_k in ((0.5, 0), (2.0, 0), (1.0, 6), (0.7, 12)):
        after = reference_probs(logits, temperature, top_k=top_k)
        top_p = midpoint_p(after, 3)
        expected = reference_probs(logits, temperature, top_k=top_k, top_p=top_p)
        assert sum(x > 0 for x in expected) == 3
        assert probs(logits, temperature=temperature, top_k=top_k, top_p=top_p) == pytest.approx(expected, abs=1e-6)


# ------------------------------------------------------------------ the draws themselves


def draws_needed(p: list[float], p_wrong: list[float], df: int) -> int:
    """Draws for a chi-square test at SIGNIFICANCE to reject ``p_wrong`` with probability POWER."""
    lam_per_draw = sum((b - a) ** 2 / a for a, b in zip(p, p_wrong) if a > 0)
    critical, n = chi2_critical(df, SIGNIFICANCE), 500
    while noncentral_chi2_sf(critical, df, n * lam_per_draw) < POWER:
        n += 500
    return n


def chi2_pvalue(counts: list[int], p: list[float]) -> float:
    total = sum(counts)
    cells = [i for i, x in enumerate(p) if x > 0]
    assert all(counts[i] == 0 for i in range(len(p)) if p[i] == 0), "a token outside the support was drawn"
    statistic = sum((counts[i] - total * p[i]) ** 2 / (total * p[i]) for i in cells)
    return float(chi2_sf(statistic, len(cells) - 1))


EIGHT = [2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5]


@pytest.mark.parametrize("params", [dict(temperature=0.7), dict(temperature=1.0, top_k=6, top_p=0.95)])
def test_drawn_tokens_follow_the_filtered_distribution_closely_enough_to_catch_a_10_percent_temperature_error(params):
    t, k, top_p = params["temperature"], params.get("top_k", 0), params.get("top_p", 1.0)
    p = reference_probs(EIGHT, t, k, top_p)
    df = sum(x > 0 for x in p) - 1
    n = draws_needed(p, reference_probs(EIGHT, t * 1.1, k, top_p), df)
    assert n <= 20_000
    tokens = sample_tokens(torch.tensor([EIGHT]).expand(n, -1), [SamplingParams(**params)] * n,
                           [torch.Generator().manual_seed(5)] * n)
    counts = [tokens.count(i) for i in range(len(EIGHT))]
    assert chi2_pvalue(counts, p) > SIGNIFICANCE


# ------------------------------------------------------------------ in the engine: every sampling path

LETTERS = list(range(97, 105))      # the sim tokenizer's "a".."h": never EOS (0)


def fixed_logits_llm(monkeypatch, logits_for, **config) -> LLM:
    """The sim engine, its logits replaced by ``logits_for(request_id)`` ([256]) on every row it asks for."""
    llm = LLM(model="sim", config=EngineConfig(**config), progress=False)
    runner = llm.engine.runner
    real = runner.execute

    def execute(sched):
        if real(sched) is None:                    # the clock and timings move as they would
            return None
        return torch.stack([logits_for(rid) for rid in sched.logits_request_ids])

    monkeypatch.setattr(runner, "execute", execute)
    return llm


def on_letters(values: list[float]) -> torch.Tensor:
    row = torch.full((256,), -math.inf)
    row[LETTERS] = torch.tensor(values)
    return row


def permutation(request_id: str) -> list[int]:
    """``order[i]``: the letter on which request ``request_id`` puts EIGHT[i] (each request has its own row)."""
    order = list(range(8))
    random.Random(zlib.crc32(request_id.encode())).shuffle(order)
    return order


def permuted_row(request_id: str) -> torch.Tensor:
    order = permutation(request_id)
    return on_letters([EIGHT[order.index(j)] for j in range(8)])


HOT, COLD = SamplingParams(temperature=1.6, max_tokens=48), SamplingParams(temperature=0.5, max_tokens=48)
SAMPLING_PATHS = {"batched": {}, "one by one": {"batched_sampling": False}, "persistent batch": {"persistent_batch": True},
                  "chunked prompts": {"max_num_batched_tokens": 20}, "async": {"async_scheduling": True}}


@pytest.mark.parametrize("path", list(SAMPLING_PATHS))
def test_each_request_draws_from_its_own_row_with_its_own_temperature(monkeypatch, path):
    """Every request has its own logits row (a permutation of EIGHT) and its own temperature (1.6 or 0.5):
    a row or a parameter taken from a neighbour shows up as a wrong distribution of ranks."""
    llm = fixed_logits_llm(monkeypatch, permuted_row, **SAMPLING_PATHS[path])
    prompts = [[97 + i % 8] * (12 + i) for i in range(16)]
    params = [HOT if i % 2 else COLD for i in range(16)]
    outs = llm.generate(prompts, params)
    for temperature, group in ((1.6, outs[1::2]), (0.5, outs[0::2])):
        counts = [0] * 8
        for out in group:
            order = permutation(out.request_id)
            for token in out.token_ids:
                counts[order.index(token - 97)] += 1
        assert sum(counts) == 8 * 48
        assert chi2_pvalue(counts, reference_probs(EIGHT, temperature)) > SIGNIFICANCE, (temperature, counts)


# ------------------------------------------------------------------ seeds and n > 1

NEAR_UNIFORM = on_letters([0.3, 0.2, 0.1, 0.0, -0.1, -0.2, -0.3, -0.4])


def outputs(monkeypatch, requests: list[SamplingParams], **config) -> list[list[list[int]]]:
    """For each request, the token ids of each of its n sequences (every row has the same logits)."""
    llm = fixed_logits_llm(monkeypatch, lambda _rid: NEAR_UNIFORM, **config)
    engine = llm.engine
    ids = [engine.add_request([98, 99, 100], p) for p in requests]
    while engine.has_unfinished_requests():
        engine.step()
    reqs = [engine.get_request(rid) for rid in ids]
    return [[engine.get_request(r).output_token_ids for r in (req.request_id, *req.child_ids)] for req in reqs]


SEEDED_4 = SamplingParams(temperature=1.0, seed=1234, n=4, max_tokens=20)


@pytest.mark.parametrize("config", [{}, {"persistent_batch": True}])
def test_child_i_of_a_seeded_request_draws_as_a_request_seeded_seed_plus_i(monkeypatch, config):
    (family,) = outputs(monkeypatch, [SEEDED_4], **config)
    alone = outputs(monkeypatch, [SamplingParams(temperature=1.0, seed=1234 + i, max_tokens=20) for i in range(4)],
                    **config)
    assert family == [seqs[0] for seqs in alone]
    assert len({tuple(s) for s in family}) == 4                       # four distinct streams


def test_seeded_streams_do_not_depend_on_what_else_is_in_the_batch(monkeypatch):
    (alone,) = outputs(monkeypatch, [SEEDED_4])
    crowd = [SamplingParams(temperature=1.0, max_tokens=7), SamplingParams(temperature=0.9, seed=7, n=2, max_tokens=30)]
    assert outputs(monkeypatch, [*crowd, SEEDED_4, *crowd])[2] == alone
    assert outputs(monkeypatch, [SEEDED_4], max_num_batched_tokens=2)[0] == alone       # a chunked prompt


def test_unseeded_children_draw_distinct_streams_reproducible_from_the_engine_seed(monkeypatch):
    unseeded = SamplingParams(temperature=1.0, n=4, max_tokens=20)
    first = outputs(monkeypatch, [unseeded, unseeded], seed=3)
    streams = [tuple(s) for family in first for s in family]
    assert len(set(streams)) == 8
    assert outputs(monkeypatch, [unseeded, unseeded], seed=3) == first
    assert outputs(monkeypatch, [unseeded, unseeded], seed=4) != first


def test_an_unseeded_sequence_draws_as_one_seeded_by_its_rank_in_the_engine(monkeypatch):
    """The documented rule (``SamplingParams``): the k-th sequence registered, children included, is
    seeded ``engine seed * 1_000_003 + k``, so one request of a run can be replayed on its own."""
    base = 3 * 1_000_003
    unseeded = outputs(monkeypatch, [SamplingParams(temperature=1.0, n=2, max_tokens=20),
                                     SamplingParams(temperature=1.0, max_tokens=20)], seed=3)
    seeded = outputs(monkeypatch, [SamplingParams(temperature=1.0, seed=base, n=2, max_tokens=20),
                                   SamplingParams(temperature=1.0, seed=base + 2, max_tokens=20)], seed=3)
    assert unseeded == seeded
    assert len({tuple(s) for family in unseeded for s in family}) == 3


def test_a_step_without_logits_returns_one_empty_row_per_row_of_its_decision():
    """A step of mid-prompt chunks has no logits: ``SampledTokens`` still has the decision's rows, in
    order (its documented shape: row by row of the decision it sampled), each gaining no token."""

    sampler = Sampler(seed=0)
    rows = []
    for rid, n in (("a", 5), ("b", 3)):
        sampler.add(rid, SamplingParams(temperature=1.0, max_tokens=4))
        rows.append(ScheduledRequest(rid, tuple(range(100, 100 + n)), 0, 0, StepKind.PREFILL, (), (), 0))
    out = sampler.sample(SchedulerOutput.from_rows(rows), None)
    assert out.request_ids == ["a", "b"]
    assert [tuple(t) for t in out.token_ids] == [(), ()]


# ------------------------------------------------------------------ speculative verification on every sampling path

SPEC = SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2)


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one by one"])
@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True),
                                    SamplingParams(temperature=1.0, seed=5, max_tokens=24, ignore_eos=True)],
                         ids=["greedy", "sampled"])
def test_verified_drafts_give_the_tokens_the_target_alone_gives_on_every_sampling_path(batched, params):
    """The simulated target's rows are one-hot (a point mass): greedy verification must keep exactly the
    target's argmax, and rejection sampling against a point mass must too (accept x with p(x)/q(x) = 0 or 1,
    resample from max(0, p - q) = the target's token). So every output equals the oracle's, whether
    drafts were accepted or rejected, on the batched and the one-by-one sampler."""
    from tests.sim_oracle import expected_output, shadow_llm

    llm = shadow_llm(EngineConfig(max_model_len=64, batched_sampling=batched, speculative=SPEC))
    prompts = [[97 + (i + j) % 3 for j in range(9 + i)] for i in range(5)]
    engine = llm.engine
    ids = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished_requests():
        engine.step()
    for rid, prompt in zip(ids, prompts):
        assert engine.get_request(rid).output_token_ids == expected_output(rid, prompt, 24, 64, ignore_eos=True)
    stats = engine.stats()
    assert 0 < stats["spec_decode_num_accepted_tokens"] < stats["spec_decode_num_draft_tokens"]   # both branches ran


def verify_one(sampler, drafts: list[int], logits: torch.Tensor) -> tuple[int, ...]:
    """The tokens ``sampler`` gives request "r" for one verification row: its last token (5), then
    ``drafts``; ``logits`` has one row per draft and one more."""
    row = ScheduledRequest("r", (5, *drafts), 4, len(drafts), StepKind.VERIFY, (), (), len(drafts) + 1)
    return sampler.sample(SchedulerOutput.from_rows([row]), logits).as_dict()["r"]


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one by one"])
def test_verification_with_a_draft_distribution_uses_q_and_the_requests_own_generator(batched):
    """A draft model's proposals come with their distribution q ([k, vocab]); verification must use it (the
    accept test min(1, p/q) and the residual max(0, p - q)) and the request's own generator, on the batched
    and the one-by-one sampler alike. Reference: the readable single-request rejection sampler, called with
    that q and a copy of the request's generator; a sampler that dropped q (point masses) or drew from the
    global generator gives other tokens for some of the 40 seeds. Afterwards q is forgotten."""
    from labkit.sample.rejection_sampler import rejection_sample

    g = torch.Generator().manual_seed(3)
    vocab, drafts = 6, [1, 4, 2]
    differ_from_point_masses = 0
    for seed in range(40):
        logits = torch.randn(len(drafts) + 1, vocab, generator=g) * 2
        q = torch.softmax(torch.randn(len(drafts), vocab, generator=g) * 2, dim=-1)
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=8)
        sampler = Sampler(seed=0, batched=batched)
        sampler.add("r", params)
        sampler.set_draft_probs("r", q)
        copy = torch.Generator().set_state(sampler.generator("r").get_state())
        point = torch.Generator().set_state(sampler.generator("r").get_state())
        torch.manual_seed(seed + 1000)                       # the global generator is not the request's
        got = verify_one(sampler, drafts, logits)
        p = to_probs(logits, params)
        assert list(got) == rejection_sample(drafts, q, p, generator=copy), seed
        differ_from_point_masses += list(got) != rejection_sample(drafts, None, p, generator=point)
        assert sampler.draft_probs("r") is None
    assert differ_from_point_masses > 0          # the test can tell q from point masses at all


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one by one"])
def test_greedy_verification_is_argmax_and_draws_no_random_number(batched):
    """Greedy drafts are verified by the definition alone: accept while the draft is the argmax (the first
    maximal index), then the argmax. No random number is drawn, from the request (it has no generator) or
    from torch's global generator, which belongs to the learner's own code in the same process. Sending
    greedy rows through rejection sampling against a one-hot target gives the same tokens but draws."""

    g = torch.Generator().manual_seed(5)
    for trial in range(20):
        drafts = torch.randint(0, 6, (3,), generator=g).tolist()
        logits = torch.randn(len(drafts) + 1, 6, generator=g)
        for j in range(trial % 4):                         # the first j drafts are the argmax
            drafts[j] = int(logits[j].argmax())
        expected = []
        for j, d in enumerate(drafts + [None]):
            best = max(range(6), key=lambda t: (logits[j, t].item(), -t))    # first maximal index
            expected.append(best)
            if d != best:
                break
        sampler = Sampler(seed=0, batched=batched)
        sampler.add("r", SamplingParams(temperature=0.0, max_tokens=8))
        torch.manual_seed(trial)
        before = torch.get_rng_state()
        got = verify_one(sampler, drafts, logits)
        assert list(got) == expected, (trial, drafts)
        assert torch.equal(torch.get_rng_state(), before), trial


def test_a_preempted_requests_forgotten_q_is_not_used_for_its_next_drafts():
    """A preempted request's drafts are void: ``forget_drafts`` drops their distribution q, so drafts the
    request gets afterwards without a q (n-gram lookup, point masses) are verified as point masses, not
    against the stale q of drafts that no longer exist."""
    from labkit.sample.rejection_sampler import rejection_sample

    g = torch.Generator().manual_seed(11)
    vocab, drafts = 6, [1, 4, 2]
    differ = 0
    for seed in range(40):
        logits = torch.randn(len(drafts) + 1, vocab, generator=g) * 2
        stale_q = torch.softmax(torch.randn(len(drafts), vocab, generator=g) * 2, dim=-1)
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=8)
        sampler = Sampler(seed=0)
        sampler.add("r", params)
        sampler.set_draft_probs("r", stale_q)
        sampler.forget_drafts("r")
        assert sampler.draft_probs("r") is None
        point = torch.Generator().set_state(sampler.generator("r").get_state())
        stale = torch.Generator().set_state(sampler.generator("r").get_state())
        got = list(verify_one(sampler, drafts, logits))
        p = to_probs(logits, params)
        assert got == rejection_sample(drafts, None, p, generator=point), seed
        differ += got != rejection_sample(drafts, stale_q, p, generator=stale)
    assert differ > 0                  # the test can tell the stale q from point masses at all
