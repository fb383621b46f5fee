"""Specification of labkit.sample.rejection_sampler (Leviathan et al. 2023, Algorithm 1).

The central claim is distributional: whatever the draft distribution q, every emitted token is
distributed as the target p. It is checked with Pearson chi-square tests sized so that they would
catch a sampler off by a 2-point probability error, and negative controls show that they do.

Sample size. Alternative: a sampler whose output distribution p' has total variation distance
TV(p, p') >= 0.02 from p (e.g. one token 2 percentage points too likely). Pearson's statistic over
C cells is then approximately noncentral chi-square with df = C - 1 and noncentrality
lambda = N * sum (p' - p)^2 / p >= 4 N TV^2 (Cauchy-Schwarz; the worst case spreads the error
half/half over the mass). ``required_samples(df)`` is the smallest N (in steps of 1000) with
P(reject at significance 1e-3 | lambda = 4 N 0.02^2) >= 0.99, computed exactly below (Poisson
mixture of central chi-square tails). For C <= 17 cells it is at most 36,000 samples.

Cells: tokens sorted by p are grouped until a cell holds >= 1/16 of the mass; a remaining tail of
>= 0.5% is a cell of its own (so C <= 17 and each cell expects >= 100 samples, far above the usual
5). An error inside one cell is invisible; an error between cells is caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.sample.rejection_sampler import (
    greedy_verify,
    greedy_verify_batch,
    inverse_cdf_sample,
    rejection_sample,
    rejection_sample_batch,
    residual_probs,
)

SIGNIFICANCE = 1e-3  # chance that a correct sampler fails one test for a fresh seed
POWER = 0.99  # chance that a sampler off by DETECT_TV fails it
DETECT_TV = 0.02  # "a 2-point probability error"
MIN_CELL_MASS = 1 / 16
MIN_TAIL_MASS = 0.005  # a light tail keeps its own cell if it expects >= 100 samples


# --- statistics (torch only: the chi-square tail is the regularised upper incomplete gamma) ---

def chi2_sf(x, df):
    """P(chi2(df) > x); x, df may be tensors."""
    return torch.special.gammaincc(torch.as_tensor(df / 2, dtype=torch.float64),
                                   torch.as_tensor(x / 2, dtype=torch.float64))


def chi2_critical(df: int, significance: float = SIGNIFICANCE) -> float:
    lo, hi = 0.0, df + 40.0 * math.sqrt(df) + 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(chi2_sf(mid, df)) > significance else (lo, mid)
    return hi


def noncentral_chi2_sf(x: float, df: int, lam: float) -> float:
    """P(X > x) for X ~ noncentral chi2(df, lam) = sum_j Poisson(j; lam/2) P(chi2(df+2j) > x)."""
    half = lam / 2
    j = torch.arange(0, int(half + 12 * math.sqrt(half) + 60), dtype=torch.float64)
    log_w = -half + j * math.log(max(half, 1e-300)) - torch.lgamma(j + 1)
    return float((log_w.exp() * chi2_sf(x, df + 2 * j)).sum())


def required_samples(df: int) -> int:
    critical = chi2_critical(df)
    n = 1000
    while noncentral_chi2_sf(critical, df, 4 * n * DETECT_TV ** 2) < POWER:
        n += 1000
    return n


def make_cells(p: torch.Tensor) -> list[list[int]]:
    """Group tokens (descending p) into cells of mass >= MIN_CELL_MASS; the tail after the last
    full cell is a cell of its own if it has MIN_TAIL_MASS, else it joins the last cell."""
    cells, current, mass = [], [], 0.0
    for token in torch.argsort(p, descending=True).tolist():
        current.append(token)
        mass += float(p[token])
        if mass >= MIN_CELL_MASS:
            cells.append(current)
            current, mass = [], 0.0
    if current and (mass >= MIN_TAIL_MASS or not cells):
        cells.append(current)
    elif current:
        cells[-1].extend(current)
    return cells


def chi2_pvalue(samples: torch.Tensor, p: torch.Tensor, cells: list[list[int]]) -> float:
    counts = torch.bincount(samples, minlength=len(p)).double()
    observed = torch.stack([counts[c].sum() for c in cells])
    expected = torch.stack([p[c].double().sum() for c in cells]) * len(samples)
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(chi2_sf(statistic, len(cells) - 1))


def detection_samples(p: torch.Tensor) -> tuple[list[list[int]], int]:
    cells = make_cells(p)
    return cells, required_samples(len(cells) - 1)


def test_statistics_helpers_match_chi_square_tables():
    assert float(chi2_sf(3.841459, 1)) == pytest.approx(0.05, abs=1e-6)
    assert chi2_critical(15) == pytest.approx(37.697, abs=1e-3)
    assert noncentral_chi2_sf(10.0, 4, 0.0) == pytest.approx(float(chi2_sf(10.0, 4)), rel=1e-9)


# --- problems: target rows p, draft rows q, drafts x_i ~ q_i ---------------------------------

def make_problem(vocab: int, k: int, sharpness: float, seed: int):
    """p: [k+1, vocab] target rows; q: [k, vocab] a related but different draft distribution."""
    g = torch.Generator().manual_seed(seed)
    target_logits = sharpness * torch.randn(k + 1, vocab, generator=g)
    draft_logits = target_logits[:k] + torch.randn(k, vocab, generator=g)
    return target_logits.softmax(-1), draft_logits.softmax(-1)


def sample_drafts(q: torch.Tensor, num_trials: int, seed: int) -> torch.Tensor:
    """[num_trials, k] draft tokens, x_i ~ q_i independently per trial."""
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(q, num_trials, replacement=True, generator=g).T


def run_trials(p, q, drafts, seed, chunk=2048) -> list[list[int]]:
    """One verification per row of ``drafts``, all against the same p and q, batched."""
    g = torch.Generator().manual_seed(seed)
    target_rows = p.repeat(chunk, 1)  # [chunk * (k+1), vocab]
    draft_rows = None if q is None else q.repeat(chunk, 1)  # [chunk * k, vocab]
    outputs = []
    for start in range(0, len(drafts), chunk):
        part = drafts[start:start + chunk]
        draft_probs = None if q is None else draft_rows[:len(part) * len(q)]
        outputs += rejection_sample_batch(part.tolist(), draft_probs,
                                          target_rows[:len(part) * len(p)], g)
    return outputs


def first_tokens(outputs) -> torch.Tensor:
    return torch.tensor([o[0] for o in outputs])


# --- the distribution of emitted tokens is p ---------------------------------------------------

PEAKED, FLAT = 3.0, 0.5  # logit scale of the random target: one dominant token vs many similar
CASES = [(5, 1, PEAKED), (5, 3, FLAT), (50, 1, FLAT), (50, 3, PEAKED), (1000, 1, PEAKED),
         (1000, 3, FLAT)]  # every vocabulary, k and shape appears; not the full product (time)


@pytest.mark.parametrize("vocab,k,sharpness", CASES)
def test_first_emitted_token_is_distributed_as_target(vocab, k, sharpness):
    p, q = make_problem(vocab, k, sharpness, seed=vocab + k)
    cells, num_trials = detection_samples(p[0])
    outputs = run_trials(p, q, sample_drafts(q, num_trials, seed=1), seed=2)
    assert chi2_pvalue(first_tokens(outputs), p[0], cells) > SIGNIFICANCE


def test_reference_single_request_path_is_distributed_as_target():
    p, q = make_problem(vocab=5, k=1, sharpness=1.0, seed=7)
    cells, num_trials = detection_samples(p[0])
    g = torch.Generator().manual_seed(3)
    drafts = sample_drafts(q, num_trials, seed=4).tolist()
    samples = torch.tensor([rejection_sample(x, q, p, g)[0] for x in drafts])
    assert chi2_pvalue(samples, p[0], cells) > SIGNIFICANCE


@pytest.mark.parametrize("k", [1, 2])  # k = 1: the bonus token; k = 2: accepted or recovered
def test_second_token_given_first_accepted_is_distributed_as_target_row_1(k):
    p, q = make_problem(vocab=5, k=k, sharpness=1.0, seed=11)
    q[0] = 0.9 * p[0] + 0.1 / 5  # a good draft for position 0, so most trials get that far
    cells, needed = detection_samples(p[1])
    outputs = run_trials(p, q, sample_drafts(q, int(needed / 0.8), seed=5), seed=6)
    second = torch.tensor([o[1] for o in outputs if len(o) >= 2])
    assert len(second) >= needed  # the conditional test has its full power
    assert chi2_pvalue(second, p[1], cells) > SIGNIFICANCE


def test_point_mass_drafts_are_accepted_with_probability_p_and_emit_p():
    p, _ = make_problem(vocab=50, k=1, sharpness=1.0, seed=13)
    x = int(torch.argsort(p[0], descending=True)[2])  # a plausible, not the likeliest, token
    cells, num_trials = detection_samples(p[0])
    outputs = run_trials(p, None, torch.full((num_trials, 1), x), seed=8)
    accepted = sum(len(o) == 2 for o in outputs)
    p_x = float(p[0, x])
    assert abs(accepted - num_trials * p_x) < 5 * math.sqrt(num_trials * p_x * (1 - p_x))
    assert chi2_pvalue(first_tokens(outputs), p[0], cells) > SIGNIFICANCE


# --- negative controls: the same tests catch biased samplers -----------------------------------

def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def test_control_sampler_without_accept_test_is_detected():
    p, q = make_problem(vocab=50, k=1, sharpness=FLAT, seed=17)
    assert total_variation(p[0], q[0]) >= DETECT_TV  # the bias is one the test must catch
    cells, num_trials = detection_samples(p[0])
    drafts = sample_drafts(q, num_trials, seed=9)
    assert chi2_pvalue(drafts[:, 0], p[0], cells) < SIGNIFICANCE  # "always accept the draft"


def test_control_sampler_resampling_from_p_on_rejection_is_detected():
    p, q = make_problem(vocab=50, k=1, sharpness=PEAKED, seed=19)
    alpha = float(torch.minimum(p[0], q[0]).sum())
    biased = torch.minimum(p[0], q[0]) + (1 - alpha) * p[0]  # what that bug emits
    assert total_variation(p[0], biased) >= DETECT_TV
    cells, num_trials = detection_samples(p[0])
    g = torch.Generator().manual_seed(10)
    drafts = sample_drafts(q, num_trials, seed=11)[:, 0]
    accept = torch.rand(num_trials, generator=g) < (p[0, drafts] / q[0, drafts])
    resampled = torch.multinomial(p[0], num_trials, replacement=True, generator=g)
    assert chi2_pvalue(torch.where(accept, drafts, resampled), p[0], cells) < SIGNIFICANCE


def shift_mass(p: torch.Tensor, from_tokens: list[int], to_tokens: list[int]) -> torch.Tensor:
    """p with DETECT_TV of probability moved, proportionally, from one token set to another."""
    biased = p.clone()
    biased[from_tokens] -= DETECT_TV * p[from_tokens] / p[from_tokens].sum()
    biased[to_tokens] += DETECT_TV * p[to_tokens] / p[to_tokens].sum()
    return biased


def split_half(cells: list[list[int]], p: torch.Tensor) -> tuple[list[int], list[int]]:
    """Cells split into two token sets of mass near 1/2: the hardest place to spot an error."""
    first, mass = [], 0.0
    for cell in cells:
        if mass >= 0.5:
            break
        first += cell
        mass += float(p[cell].sum())
    return first, [t for cell in cells for t in cell if t not in set(first)]


@pytest.mark.parametrize("vocab,sharpness", [(5, FLAT), (50, PEAKED), (1000, FLAT)])
@pytest.mark.parametrize("where", ["between two cells", "spread over half the mass each way"])
def test_control_two_point_probability_error_is_detected(vocab, sharpness, where):
    p, _ = make_problem(vocab, k=1, sharpness=sharpness, seed=23)
    cells, num_trials = detection_samples(p[0])
    source, sink = (cells[1], cells[0]) if where == "between two cells" else split_half(cells, p[0])
    biased = shift_mass(p[0], source, sink)
    assert total_variation(p[0], biased) == pytest.approx(DETECT_TV)
    g = torch.Generator().manual_seed(12)
    samples = torch.multinomial(biased, num_trials, replacement=True, generator=g)
    assert chi2_pvalue(samples, p[0], cells) < SIGNIFICANCE


# --- exact behaviours and edge cases ------------------------------------------------------------

def one_hot_rows(tokens: list[int], vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), vocab).float()


@pytest.mark.parametrize("seed", range(50))
def test_identical_draft_and_target_accepts_every_draft_and_adds_a_bonus(seed):
    p, _ = make_problem(vocab=20, k=3, sharpness=1.0, seed=seed)
    drafts = sample_drafts(p[:3], 1, seed=seed)[0].tolist()
    out = rejection_sample(drafts, p[:3], p, torch.Generator().manual_seed(seed))
    assert out[:3] == drafts and len(out) == 4


def test_k_equal_one_returns_accepted_plus_bonus_or_one_recovered_token():
    p = one_hot_rows([4, 2], vocab=6)
    assert rejection_sample([4], None, p) == [4, 2]  # accepted, then the bonus from p_1
    assert rejection_sample([3], None, p) == [4]  # rejected, recovered from p_0 minus the draft


def test_draft_token_with_zero_draft_probability_is_always_rejected():
    p, q = make_problem(vocab=10, k=2, sharpness=0.5, seed=29)
    q[0, 3] = 0.0  # x_0 = 3 "could not have been sampled": a proposer bug
    for seed in range(200):
        out = rejection_sample([3, 1], q, p, torch.Generator().manual_seed(seed))
        assert len(out) == 1


def test_draft_token_with_zero_target_probability_is_never_accepted_or_emitted():
    p, q = make_problem(vocab=10, k=1, sharpness=0.5, seed=31)
    p[0, 5] = 0.0
    p[0] /= p[0].sum()
    for seed in range(200):
        assert rejection_sample([5], q, p, torch.Generator().manual_seed(seed))[0] != 5


def test_point_mass_draft_with_target_probability_one_or_zero():
    p = one_hot_rows([7, 7, 1], vocab=8)
    assert rejection_sample([7, 7], None, p) == [7, 7, 1]
    assert rejection_sample([7, 0], None, p) == [7, 7]


def test_empty_residual_after_a_rejection_falls_back_to_target():
    p = one_hot_rows([3, 0], vocab=5)
    q = p[:1].clone()  # p == q, so max(0, p - q) is all zero; x_0 = 1 has q = 0 and is rejected
    assert rejection_sample([1], q, p) == [3]


@pytest.mark.parametrize("batched", [False, True], ids=["one request", "batch"])
def test_a_draft_its_own_distribution_could_not_have_drawn_is_rejected_even_where_the_target_accepts_it(batched):
    """min(1, p(x)/q(x)) is undefined at q(x) = 0: such a draft is rejected (``_is_accepted``), so the row
    ends at it (its recovered token is drawn from max(0, p - q), here x again) and later drafts are not read."""
    p = one_hot_rows([3, 1, 2], vocab=5)                     # the target accepts both drafts, 3 then 1
    q = torch.full((2, 5), 0.25)
    q[0, 3] = 0.0                                            # but the draft could not have drawn the first
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        out = rejection_sample_batch([[3, 1]], q, p, [g])[0] if batched else rejection_sample([3, 1], q, p, g)
        assert out == [3], seed


def test_the_residual_is_max_0_p_minus_q_per_row_and_an_all_zero_row_alone_falls_back_to_p():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = torch.tensor([[0.5, 0.5, 0.0], [0.4, 0.1, 0.5]])       # row 0: p == q, nothing left
    got = residual_probs(p, q)
    assert got.dtype == torch.float64
    assert torch.allclose(got, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.2, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_cdf_sampling_never_returns_a_token_without_weight_even_for_u_just_below_one(dtype):
    weights = torch.tensor([[0.3, 0.7, 0.0], [0.0, 0.2, 0.0]], dtype=dtype)
    for u in (0.0, 0.2, 0.5, 1 - 2 ** -30, 1 - 2 ** -53):
        got = inverse_cdf_sample(weights, torch.tensor([u, u], dtype=torch.float64)).tolist()
        assert got == [0 if u < 0.3 else 1, 1], u


def test_inverse_cdf_sampling_of_a_row_without_weight_gives_the_last_token():
    assert inverse_cdf_sample(torch.zeros(1, 4, dtype=torch.float64), torch.tensor([0.5])).tolist() == [3]


def test_an_empty_batch_verifies_nothing():
    """A step whose rows all have no verification (n = 0): both batch forms return no rows."""
    assert rejection_sample_batch([], None, torch.rand(0, 5)) == []
    assert rejection_sample_batch([], None, torch.rand(0, 5), []) == []
    assert greedy_verify_batch([], torch.rand(0, 5)) == []


def test_no_drafts_samples_one_token_from_the_target():
    assert rejection_sample([], None, one_hot_rows([2], vocab=4)) == [2]


def test_same_generator_seed_gives_same_tokens():
    p, q = make_problem(vocab=100, k=4, sharpness=1.0, seed=37)
    drafts = sample_drafts(q, 1, seed=1)[0]
    runs = [rejection_sample(drafts, q, p, torch.Generator().manual_seed(5)) for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("drafts", [[0, 0, 0], [1, 2, 3], [3, 3, 3]])
def test_each_call_consumes_exactly_k_plus_one_uniforms(drafts):
    p, q = make_problem(vocab=4, k=3, sharpness=1.0, seed=41)
    g = torch.Generator().manual_seed(9)
    rejection_sample(drafts, q, p, g)
    expected_next = torch.rand(5, dtype=torch.float64,
                               generator=torch.Generator().manual_seed(9))[4]
    assert torch.rand(1, dtype=torch.float64, generator=g)[0] == expected_next


@pytest.mark.parametrize("drafts,draft_probs,target,message", [
    ([1, 2], None, torch.rand(2, 5), "target_probs"),  # needs k+1 = 3 rows
    ([1, 2], None, torch.rand(15), "target_probs"),  # 1-D
    ([1, 2], torch.rand(3, 5), torch.rand(3, 5), "draft_probs"),  # needs k = 2 rows
    ([1, 2], torch.rand(2, 6), torch.rand(3, 5), "draft_probs"),  # vocab mismatch
    ([1, 9], None, torch.rand(3, 5), r"\[0, 5\)"),  # token id out of range
    ([1, -1], None, torch.rand(3, 5), r"\[0, 5\)"),
    (torch.tensor([[1, 2]]), None, torch.rand(3, 5), "draft_token_ids"),  # 2-D ids
    ([1.5, 2], None, torch.rand(3, 5), "draft_token_ids"),  # not ints
])
def test_malformed_inputs_raise_value_error_naming_the_argument(drafts, draft_probs, target,
                                                                message):
    with pytest.raises(ValueError, match=message):
        rejection_sample(drafts, draft_probs, target)


def test_batch_with_wrong_row_count_or_generator_count_raises():
    with pytest.raises(ValueError, match="sum"):
        rejection_sample_batch([[1], [2, 3]], None, torch.rand(4, 5))  # needs 3 + 2 rows
    with pytest.raises(ValueError, match="generators"):
        rejection_sample_batch([[1], [2]], None, torch.rand(4, 5), [torch.Generator()])


# --- greedy verification -------------------------------------------------------------------------

ARGMAX = [4, 1, 3, 0]  # target argmax per row, k = 3


def target_logits() -> torch.Tensor:
    logits = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    logits[range(4), ARGMAX] = 10.0
    return logits


def test_greedy_all_drafts_match_gives_them_plus_bonus_argmax():
    assert greedy_verify([4, 1, 3], target_logits()) == [4, 1, 3, 0]


def test_greedy_first_draft_mismatch_gives_only_the_target_argmax():
    assert greedy_verify([2, 1, 3], target_logits()) == [4]


def test_greedy_middle_mismatch_keeps_prefix_and_corrects_the_mismatch():
    assert greedy_verify([4, 5, 3], target_logits()) == [4, 1]


def test_greedy_gives_the_same_answer_for_logits_and_probs():
    logits = target_logits()
    assert greedy_verify([4, 1, 2], logits) == greedy_verify([4, 1, 2], logits.softmax(-1))


def test_greedy_batch_equals_per_request_calls():
    logits = target_logits()
    drafts = [[4, 1, 3], [], [2], [4, 5]]
    rows = torch.cat([logits, logits[:1], logits[:2], logits[:3]])
    assert greedy_verify_batch(drafts, rows) == [
        greedy_verify(d, logits[:len(d) + 1]) for d in drafts]


# --- the batched sampler is the single-request sampler, request by request -------------------

@st.composite
def batches(draw):
    vocab = draw(st.integers(2, 12))
    ks = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    sharp = draw(st.sampled_from([0.3, 3.0]))
    targets = [(sharp * torch.randn(k + 1, vocab, generator=g)).softmax(-1) for k in ks]
    drafts_q = [(sharp * torch.randn(k, vocab, generator=g)).softmax(-1) for k in ks]
    drafts = [torch.multinomial(q, 1, generator=g).squeeze(-1).tolist() if len(q) else []
              for q in drafts_q]
    return drafts, drafts_q, targets, seed


@settings(max_examples=40, deadline=None)
@given(batches(), st.booleans(), st.booleans())
def test_batch_equals_per_request_calls_in_order(batch, with_probs, shared_generator):
    drafts, drafts_q, targets, seed = batch
    draft_probs = torch.cat(drafts_q) if with_probs else None

    def generators():
        if shared_generator:
            g = torch.Generator().manual_seed(seed)
            return [g] * len(drafts), g
        gens = [torch.Generator().manual_seed(seed + r) for r in range(len(drafts))]
        return gens, gens

    singles, _ = generators()
    expected = [rejection_sample(d, q if with_probs else None, p, g)
                for d, q, p, g in zip(drafts, drafts_q, targets, singles)]
    _, batch_generators = generators()
    assert rejection_sample_batch(drafts, draft_probs, torch.cat(targets),
                                  batch_generators) == expected


# --- boundaries and messages the mutation run found untested (docs/mutation.md) -------------------

@pytest.mark.parametrize("batched", [False, True])
def test_a_uniform_of_exactly_zero_never_accepts_a_token_the_target_cannot_emit(batched, monkeypatch):
    """The accept test is u < p/q (Leviathan et al., Chen et al.): u is drawn from [0, 1), so u = 0 can
    happen, and then a draft with p = 0 must still be rejected (u <= p/q would accept it)."""
    from labkit.sample import rejection_sampler as rs

    monkeypatch.setattr(rs, "draw_uniforms", lambda num, generator: torch.zeros(num, dtype=torch.float64))
    p = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])       # token 0 is impossible at the first position
    q = torch.tensor([[0.9, 0.05, 0.05]])
    out = rs.rejection_sample_batch([[0]], q, p)[0] if batched else rs.rejection_sample([0], q, p)
    assert out[0] != 0 and len(out) == 1
    out = rs.rejection_sample_batch([[0]], None, p)[0] if batched else rs.rejection_sample([0], None, p)
    assert out[0] != 0 and len(out) == 1


def test_draft_ids_may_be_any_sequence_of_integers_and_verify_as_the_same_list():
    """``TokenIds`` is any sequence of integers: a tuple, numpy or 0-d tensor ids, bools (``operator.index``)
    are read as the plain list they equal, not refused and not read as something else."""
    target = torch.tensor([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])   # argmax 2, 0, 2
    plain = greedy_verify([2, 0], target)
    assert plain == [2, 0, 2]
    for ids in [(2, 0), [np.int64(2), np.int32(0)], [torch.tensor(2), torch.tensor(0)], range(2, -1, -2)]:
        assert greedy_verify(ids, target) == plain, ids
        assert greedy_verify_batch([ids], target) == [plain], ids
    assert greedy_verify([True, 0], target) == [2]        # True is token 1: rejected at the first position


def test_bad_input_messages_name_the_argument_and_the_expected_rows_exactly():
    with pytest.raises(ValueError, match=r"^target_probs must have shape \[k\+1, vocab\] = \[3, vocab\] for k=2 "):
        rejection_sample([1, 2], None, torch.rand(2, 5))
    with pytest.raises(ValueError, match=r"^target_probs_or_logits must have shape \[k\+1, vocab\] = \[2, vocab\] "):
        greedy_verify([1], torch.rand(3, 5))
    with pytest.raises(ValueError, match=r"^draft_token_ids must be a flat list"):
        greedy_verify([1.5], torch.rand(2, 5))
    with pytest.raises(ValueError, match=r"^draft_token_ids must be a 1-D integer tensor"):
        rejection_sample(torch.tensor([[1]]), None, torch.rand(2, 5))
    with pytest.raises(ValueError, match=r"^draft_probs must have shape \[k, vocab\] = \[1, 5\] "):
        rejection_sample([1], torch.rand(2, 5), torch.rand(2, 5))
    with pytest.raises(ValueError, match=r"^draft_token_ids\[1\] must be a flat list of int token ids"):
        greedy_verify_batch([[1], [2.5]], torch.rand(4, 5))
    with pytest.raises(ValueError, match=r"^target_probs_or_logits must have shape \[sum\(k\)\+n, vocab\] = "
                                         r"\[4, vocab\], got \(3, 5\)$"):
        greedy_verify_batch([[1], [2]], torch.rand(3, 5))
    with pytest.raises(ValueError, match=r"^draft_token_ids\[1\] must be a flat list of int token ids"):
        rejection_sample_batch([[1], [2.5]], None, torch.rand(4, 5))
    with pytest.raises(ValueError, match=r"^draft_token_ids must be a 1-D integer tensor \[k\], got shape \(1,\) "
                                         r"dtype torch.float32$"):
        rejection_sample(torch.tensor([1.0]), None, torch.rand(2, 5))
    with pytest.raises(ValueError, match=r"^draft token ids must be in \[0, 5\), got \[5\]$"):
        rejection_sample([5], None, torch.rand(2, 5))              # one past the last id
    with pytest.raises(ValueError, match=r"^draft token ids must be in \[0, 5\), got \[5, 6, 7, 8, -1\]$"):
        greedy_verify([5, 6, 7, 8, -1, 9], torch.rand(7, 5))      # the first five bad ids
    with pytest.raises(ValueError, match=r"^target_probs must have shape \[sum\(k\)\+n, vocab\] = \[4, vocab\], "
                                         r"got \(5, 5\)$"):
        rejection_sample_batch([[1], [2]], None, torch.rand(5, 5))
    with pytest.raises(ValueError, match=r"^draft_probs must have shape \[sum\(k\), vocab\] = \[2, 5\] "
                                         r"\(vocab as in the target\), got \(3, 5\)$"):
        rejection_sample_batch([[1], [2]], torch.rand(3, 5), torch.rand(4, 5))
