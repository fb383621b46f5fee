"""Lab 04's helpers compute what the lab says they compute.

Pure pieces (labelling a step, the estimators, the chi-square test, TPOT vs ITL, the views'
verdicts) are checked on hand-made inputs whose answers are worked out here; the real-model checks
use a few tokens.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.events import SpecVerified
from labkit.labs.common.measure import verdict_from_ratios
from labkit.labs.exercises import exercise
from labkit.labs.lab04_speculative import lossless, solutions, speedup, sweeps, views
from labkit.labs.lab04_speculative.latency import StreamTimes
from labkit.labs.lab04_speculative.live import label_step, summarize, trace_request
from labkit.labs.lab04_speculative.quiz import questions
from labkit.spec_decode.ngram import NgramProposer
from labkit.spec_decode.theory import expected_speedup, expected_tokens_per_step, optimal_k

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "04_speculative.ipynb"


# ----------------------------------------------------------------------------- labelling a step

def _verified(drafted: int, accepted: int) -> SpecVerified:
    return SpecVerified("r", drafted, accepted, tuple(i < accepted for i in range(drafted)))


def test_a_rejection_labels_accepted_then_rejected_drafts_then_the_resampled_token():
    step = label_step(3, [10, 11, 12, 13], _verified(4, 2), (10, 11, 99))
    assert [(x.token_id, x.kind) for x in step.tokens] == [
        (10, "accepted"), (11, "accepted"), (12, "rejected"), (13, "rejected"), (99, "resampled")]
    assert step.emitted == [10, 11, 99]


def test_all_drafts_accepted_ends_with_a_bonus_token():
    step = label_step(1, [5, 6], _verified(2, 2), (5, 6, 7))
    assert [x.kind for x in step.tokens] == ["accepted", "accepted", "bonus"]


def test_a_step_without_drafts_is_the_targets_own_token():
    assert [x.kind for x in label_step(0, [], None, (42,)).tokens] == ["plain"]
    assert [x.kind for x in label_step(0, [], _verified(0, 0), (42,)).tokens] == ["plain"]


def test_a_stop_inside_the_accepted_drafts_cuts_the_step_short():
    step = label_step(2, [1, 2, 3], _verified(3, 3), (1, 2))     # EOS / max_tokens after 2 tokens
    assert [x.kind for x in step.tokens] == ["accepted", "accepted"]


def test_summary_counts_kinds_and_acceptance_per_position_after_the_prefill_step():
    steps = [label_step(0, [], None, (9,)), label_step(1, [1, 2], _verified(2, 2), (1, 2, 3)),
             label_step(2, [4, 5], _verified(2, 0), (6,))]
    s = summarize(steps)
    assert (s.steps, s.tokens) == (2, 4)
    assert s.counts == {"accepted": 2, "rejected": 2, "resampled": 1, "bonus": 1, "plain": 0}
    assert s.per_position == [0.5, 0.5]


# ----------------------------------------------------------------------------- estimators and rows

def _run(decode_s, steps, tokens, drafted=(), accepted=(), propose_s=0.0, ids=None):
    return speedup.RunStats(decode_s, [ids or list(range(tokens + 1))], steps, steps, propose_s,
                            list(drafted), list(accepted))


def test_aggregate_measures_speedup_verify_cost_c_and_alpha():
    # Plain: 8 decode steps in 0.8 s (0.1 s each). Speculative k=2: 4 steps in 0.6 s, of which
    # 0.08 s proposing; it emitted 8 tokens. Drafts: 2/2, 1/2 (rejected), 2/2, 0/2 (rejected).
    plain = _run(0.8, 8, 8)
    spec = _run(0.6, 4, 8, drafted=[2, 2, 2, 2], accepted=[2, 1, 2, 0], propose_s=0.08)
    row = speedup.aggregate("w", "ngram k=2", [{"plain": plain, "ngram k=2": spec}])
    assert row.speedup == pytest.approx(0.8 / 0.6)
    assert row.tokens_per_step == pytest.approx(2.0)
    assert row.verify_cost == pytest.approx((0.6 / 4 - 0.08 / 4) / 0.1)
    assert row.c == pytest.approx((0.08 / 4) / (2 * 0.1))
    assert row.alpha == pytest.approx(5 / 7)              # 5 accepted of 7 compared positions
    assert row.accepted_over_drafted == pytest.approx(5 / 8)
    assert (row.num_accepted, row.num_trials, row.identical) == (5, 7, "1/1")


def test_adjusted_prediction_reduces_to_leviathan_when_every_step_drafts_k_and_verify_costs_one():
    row = speedup.Row("w", "draft k=4", 4, 0.7, 0.5, 1.0, 0.05, 2.0, 1.0, 1.5, "1/1",
                      drafted=(4,) * 10, steps=10, num_accepted=7, num_trials=10)
    assert row.adjusted_prediction == pytest.approx(expected_speedup(0.7, 4, 0.05))
    assert row.prediction == pytest.approx(expected_speedup(0.7, 4, 0.05))


def test_read_sweep_picks_the_measured_best_and_leviathans_k():
    rows = [speedup.Row("w", f"ngram k={k}", k, 0.8, 0.6, 1.0, 0.1, 2.0, 1.0 + 0.1 * k, s, "1/1",
                        drafted=(k,) * 10, steps=10, num_accepted=8 * k, num_trials=10 * k)
            for k, s in ((1, 1.2), (2, 1.5), (4, 1.3))]
    opt = sweeps.read_sweep(rows)
    assert (opt.measured_k, opt.measured_speedup) == (2, 1.5)
    assert opt.alpha == pytest.approx(0.8)
    assert opt.textbook_k == optimal_k(0.8, 0.1, 8)
    assert opt.verify_cost_max == pytest.approx(1.4)


# ----------------------------------------------------------------------------- lossless

def test_chi_square_p_value_matches_the_tables():
    assert lossless.chi_square_p_value(3.841, 1) == pytest.approx(0.05, abs=5e-4)
    assert lossless.chi_square_p_value(11.070, 5) == pytest.approx(0.05, abs=5e-4)
    assert lossless.chi_square_p_value(0.0, 3) == pytest.approx(1.0)


def test_homogeneity_test_accepts_equal_samples_and_rejects_different_ones():
    same = lossless.homogeneity_test([1] * 50 + [2] * 50, [2] * 50 + [1] * 50)
    assert (same.chi2, same.p_value) == (pytest.approx(0.0), pytest.approx(1.0))
    rng = random.Random(0)
    a = [rng.choice([1, 2, 3]) for _ in range(300)]
    b = [rng.choice([1, 1, 1, 2]) for _ in range(300)]
    assert lossless.homogeneity_test(a, b).p_value < 1e-6


def test_rare_tokens_are_pooled_into_one_other_column():
    test = lossless.homogeneity_test([1] * 30 + [7, 8], [1] * 30 + [9])
    assert test.categories == (1, lossless.OTHER)
    assert (test.plain_counts, test.spec_counts) == ((30, 2), (30, 1))


# ----------------------------------------------------------------------------- TPOT vs ITL

def test_mean_itl_over_tpot_is_tokens_minus_one_over_chunks_minus_one():
    times = StreamTimes(0.5, (0.5, 0.8, 1.0, 1.4), (1, 3, 1, 2))     # 7 tokens, 4 chunks
    assert times.tpot_s == pytest.approx(0.9 / 6)
    assert times.itl_gaps == pytest.approx([0.3, 0.2, 0.4])
    assert times.itl_mean_s / times.tpot_s == pytest.approx(6 / 3)
    assert times.tokens_per_chunk == pytest.approx(2.0)


# ----------------------------------------------------------------------------- verdicts follow the numbers

def _row(workload, method, s, alpha=0.5):
    return speedup.Row(workload, f"{method} k=4", 4, alpha, 0.4, 1.0, 0.05, 2.0, 1.3, s, "1/1",
                       drafted=(4,), steps=1, num_accepted=2, num_trials=4)


def test_matrix_verdict_names_the_slower_pairs_only_when_there_are_any():
    slow = views.matrix_verdict([_row("copy", "ngram", 1.8), _row("code", "draft", 0.6, 0.1)])
    assert "1/2" in slow and "0.60" in slow
    fast = views.matrix_verdict([_row("copy", "ngram", 1.8), _row("code", "draft", 1.1)])
    assert "0.60" not in fast and "1/2" not in fast


def test_sweep_verdict_says_whether_the_verify_cost_assumption_holds():
    rows = [_row("copy", "ngram", 1.5)]
    opt = sweeps.read_sweep(rows)
    assert "1.30" in views.sweep_verdict(opt, rows)
    cheap = [speedup.Row("copy", "ngram k=4", 4, 0.5, 0.4, 1.0, 0.05, 2.0, 1.02, 1.5, "1/1", (4,), 1, 2, 4)]
    assert "1.02" in views.sweep_verdict(sweeps.read_sweep(cheap), cheap)


def test_views_render_tables_and_figures_from_rows():
    rows = [_row("copy", "ngram", 1.5), _row("chat", "draft", 0.8)]
    batches = [sweeps.BatchRow(1, rows[0], 0.05, 0.06), sweeps.BatchRow(16, rows[1], 0.2, 0.25)]
    for table in (views.sweep_table(rows[:1]), views.matrix_table(rows), views.batch_table(batches), views.gap_table(rows)):
        assert "<table" in table._repr_html_()
    for fig in (views.sweep_figure(rows[:1]), views.matrix_figure(rows), views.batch_figure(batches)):
        assert fig.layout.title.text
    assert "0.80" in views.batch_verdict(batches)
    assert views.identical_summary(rows) == (2, 2)


def test_the_lossless_sentence_counts_every_table_and_names_the_runs_that_differ():
    same, differs = _row("copy", "ngram", 1.5), replace(_row("chat", "draft", 0.8), identical="0/2")
    sentence = views.identical_sentence({"k 扫描": [same], "付费目标": [differs]})
    assert sentence.startswith("1/3 ")
    assert "k 扫描 1/1" in sentence and "付费目标 0/2" in sentence
    assert "k = " in sentence.split("不同的运行")[1]
    assert "不同的运行" not in views.identical_sentence({"k 扫描": [same]})


# ----------------------------------------------------------------------------- exercises and quiz

def test_reference_solutions_agree_with_the_engine():
    for alpha in (0.0, 0.3, 0.6, 0.9, 1.0):
        for k in range(9):
            assert solutions.expected_tokens_per_step(alpha, k) == pytest.approx(expected_tokens_per_step(alpha, k))
        for c in (0.0, 0.05, 0.2, 0.5, 1.0):
            assert solutions.best_k(alpha, c) == optimal_k(alpha, c)
    rng = random.Random(1)
    for _ in range(300):
        ids = [rng.randrange(4) for _ in range(rng.randrange(1, 20))]
        k, n = rng.randrange(1, 5), rng.randrange(1, 4)
        assert solutions.ngram_propose(ids, k, n) == NgramProposer(k, n, n).propose(ids)


@pytest.mark.parametrize("name", ["expected_tokens_per_step", "best_k", "ngram_propose", "rejection_verify"])
def test_exercise_passes_its_reference_solution(name):
    result = exercise(name).self_test()
    assert result.passed, result.message


def test_exercises_reject_typical_mistakes():
    off_by_one = lambda alpha, k: sum(alpha ** i for i in range(1, k + 1))  # noqa: E731  (forgets the target's token)
    assert not exercise("expected_tokens_per_step").check(off_by_one).passed
    always_speculate = lambda alpha, c, k_max=16: max(range(1, k_max + 1), key=lambda k: solutions.expected_tokens_per_step(alpha, k) / (k * c + 1))  # noqa: E731,E501
    assert not exercise("best_k").check(always_speculate).passed
    oldest_match = lambda ids, k, n: next((ids[s + n:s + n + k] for s in range(len(ids) - n) if ids[s:s + n] == ids[-n:]), [])  # noqa: E731,E501
    assert not exercise("ngram_propose").check(oldest_match).passed


def test_quiz_has_at_least_eight_questions_each_answer_checked_correct():
    qs = questions()
    assert len(qs) >= 8
    for q in qs:
        assert q.check(q.answer).correct
        if hasattr(q, "explanations"):
            assert len(q.explanations) == len(q.options)


# ----------------------------------------------------------------------------- the real model, a few tokens

@pytest.fixture(scope="module")
def engines():
    return sweeps.Engines()


def test_traced_speculative_stream_equals_plain_greedy_and_its_labels_add_up(engines):
    from labkit import SamplingParams

    prompt = engines.encode("copy", 1)[0]
    params = SamplingParams(temperature=0.0, max_tokens=12)
    steps = trace_request(engines.get("ngram", 3), prompt, params)
    plain = engines.get("plain").generate([prompt], params)[0].token_ids
    assert [t for s in steps for t in s.emitted] == plain
    for s in steps[1:]:
        kinds = [x.kind for x in s.tokens]
        assert kinds.count("accepted") == s.accepted
        assert kinds.count("accepted") + kinds.count("rejected") <= s.drafted


def test_sweep_rows_come_from_runs_whose_output_equals_plain_greedy(engines):
    rows = sweeps.sweep_k(engines, "ngram", "copy", [2], num_prompts=1, max_tokens=6, rounds=2)
    assert [(r.k, r.identical) for r in rows] == [(2, "2/2")]      # one prompt, served in two rounds
    assert rows[0].speedup > 0 and rows[0].verify_cost > 0


def test_sampled_second_tokens_are_seeded_and_reproducible(engines):
    llm = engines.get("plain")
    ids = llm.tokenizer.encode_prompt(lossless.STORY_PROMPT, chat=False)
    a = lossless.sample_tokens(llm, ids, 4, 0, 1.0, 2)
    assert a == lossless.sample_tokens(llm, ids, 4, 0, 1.0, 2) and len(a) == 4


def test_json_prompt_set_loads_for_the_misreading():
    from labkit.traces import load_prompts

    prompts = load_prompts("json", "heldout")
    assert len(prompts) == 6 and all("JSON" in p for p in prompts)


def test_notebook_uses_registered_exercises_and_existing_sources():
    source = "\n".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"])
    for name in ("rejection_verify", "expected_tokens_per_step", "best_k", "ngram_propose"):
        assert f'exercise("{name}")' in source
    for shown in ("rejection_sample", "Sampler._verify", "ContinuousScheduler._verify"):
        assert f"show_source({shown})" in source


def test_the_sources_the_notebook_shows_are_where_verification_and_rollback_happen():
    import inspect

    from labkit.sample.sampler import Sampler
    from labkit.scheduler.continuous import ContinuousScheduler

    assert "rejection_sample_batch" in inspect.getsource(Sampler._verify)
    rollback = inspect.getsource(ContinuousScheduler._verify)
    assert "num_computed_tokens -=" in rollback and "kv.trim" in rollback


def test_batch_verdict_calls_a_change_within_noise_about_the_same():
    rows = [_row("copy", "ngram", 1.04), _row("copy", "ngram", 1.03), _row("copy", "ngram", 0.8)]
    same = views.batch_verdict([sweeps.BatchRow(1, rows[0], 0.05, 0.05), sweeps.BatchRow(4, rows[1], 0.1, 0.1)])
    assert "几乎不变" in same or "about the same" in same
    falls = views.batch_verdict([sweeps.BatchRow(1, rows[0], 0.05, 0.05), sweeps.BatchRow(16, rows[2], 0.2, 0.2)])
    assert "下降" in falls or "falls" in falls


def test_a_character_split_over_two_tokens_is_shown_on_the_token_that_completes_it():
    from labkit.labs.lab04_speculative.live_view import TextOf

    table = {(1,): "a", (1, 2): "a\ufffd", (1, 2, 3): "a中", (1, 2, 3, 4): "a中b"}
    text = TextOf(lambda ids: table[tuple(ids)])
    assert [text.push(1), text.push(2), text.push(3), text.peek(4)] == ["a", "", "中", "b"]


def test_live_demo_runs_one_request_and_draws_every_token(engines):
    from labkit.labs.lab04_speculative.live_view import LiveSpecDemo

    demo = LiveSpecDemo(engines, method="ngram", k=2, workload="copy", max_tokens=8)
    steps = demo.run()
    assert sum(len(s.emitted) for s in steps) == 8
    assert demo.stream.value.count("<span style=\"background") == sum(len(s.tokens) for s in steps)
    assert "\ufffd" not in demo.stream.value and demo.acceptance.children
    view = demo.acceptance.children[0]
    assert not view.attached and view.num_drafts == sum(s.drafted > 0 for s in steps)


def test_batch_one_and_batch_two_serve_the_same_requests(engines):
    rows = sweeps.batch_effect(engines, "ngram", 2, "copy", [1, 2], max_tokens=4, min_requests=2, rounds=2)
    assert [(b.batch, b.row.identical) for b in rows] == [(1, "2/2"), (2, "2/2")]   # batch 2 repeats its one group
    assert 2 * rows[0].row.steps == rows[1].row.steps      # the same two requests (twice), the same request-steps


# ----------------------------------------------------------------------------- sentences computed from the rows shown

def _busy(row, ratios=(0.9, 1.2, 1.0)):
    return replace(row, verdict=verdict_from_ratios(list(ratios), load=8.0, cores=2))


# The rows the issue recorded: the 2-layer draft is slower on all four workloads (its own chat included),
# n-gram pays on copy and code (3.04x, the lab's best pair) and loses on chat.
RECORDED = [_row("copy", "ngram", 1.9, 0.8), _row("code", "ngram", 3.04, 0.92), _row("chat", "ngram", 0.9, 0.2),
            _row("copy", "draft", 0.7), _row("code", "draft", 0.6), _row("chat", "draft", 0.85, 0.45),
            _row("json", "draft", 0.5)]


def test_mismatched_traffic_is_read_per_proposer_from_the_rows():
    text = " ".join(views.mismatch_sentences(RECORDED))
    ngram, draft = views.method_label("ngram"), views.method_label("draft")
    assert f"{ngram}在抄写式编辑、代码上付得起，在开放对话上赔钱" in text and "相对某个提议者" in text
    assert f"抄写式编辑上{ngram}更快，{draft}更慢" in text                  # the verdict flips with the proposer
    home = next(s for s in views.mismatch_sentences(RECORDED) if "主场" in s)   # the draft loses at home: its cost
    assert draft in home and "开放对话" in home and "0.85" in home and "k·c = 0.20" in home and "1.30" in home


def test_a_proposer_that_pays_in_its_own_domain_gets_no_cost_note():
    rows = [_row("chat", "draft", 1.4), _row("code", "draft", 0.7)]
    assert not any("主场" in s for s in views.mismatch_sentences(rows))
    assert any("付得起" in s and "赔钱" in s for s in views.mismatch_sentences(rows))


def _gap_row(verify_cost, steps):
    """α 0.5, k 4, c 0.05, one verification: proposal-rate factor (E + steps - 1) / (steps E), verify-cost
    factor 1.2 / (verify_cost + 0.2)."""
    return speedup.Row("copy", "ngram k=4", 4, 0.5, 0.4, 1 / steps, 0.05, 1.0, verify_cost, 1.0, "1/1",
                       drafted=(4,), steps=steps, num_accepted=2, num_trials=4)


def test_the_gap_sentence_names_the_factor_the_table_shows_further_from_one():
    proposal_rows = [_gap_row(1.3, 2), _gap_row(1.1, 3)]            # factors 0.76 / 0.80 and 0.68 / 0.92
    factors = views.gap_factors(proposal_rows)
    assert all(abs(math.log(p)) > abs(math.log(v)) for _, p, v in factors)
    text = views.gap_sentence(proposal_rows)
    table = str(views.gap_table(proposal_rows))
    assert "主要因为不是每步都有草稿" in text and "2 行里有 2 行提议率因子离 1 更远" in text
    for _, p, v in factors:
        assert f"{p:.2f}" in table and f"{v:.2f}" in table
    verify_rows = [_gap_row(2.0, 2), _gap_row(2.5, 2), _gap_row(1.05, 3)]
    assert "主要因为验证 k+1 个 token" in views.gap_sentence(verify_rows)
    assert "差不多" in views.gap_sentence([_gap_row(1.3, 2), _gap_row(2.5, 2)])


def test_a_busy_section_prints_one_warning_not_one_per_sentence():
    rows = [_busy(r) for r in RECORDED[:4]]
    text = views.matrix_verdict(rows)
    assert text.count("关掉别的程序") == 1 and text.count("（机器正忙，不可靠）") >= 2   # one warning, short hedges
    assert "机器正忙" not in views.matrix_verdict(RECORDED)
