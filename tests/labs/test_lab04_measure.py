"""Lab 04's speed-up verdicts come from rounds measured through labkit.labs.common.measure: one
torch thread, the CPU clock, the spread over rounds; injected contention never makes a verdict
clearly the opposite of the noiseless run's."""

from __future__ import annotations

import pytest
import torch

from labkit.i18n import set_language
from labkit.labs.common.measure import Clock, ContendedClock, clock_override
from labkit.labs.lab04_speculative import speedup, sweeps, views
from labkit.report import results


def _run(decode_s, steps, tokens, propose_s=0.0):
    return speedup.RunStats(decode_s, [list(range(tokens + 1))], steps, steps, propose_s, [2] * steps, [1] * steps)


def _rounds(plain_s, spec_s):
    return [{"plain": _run(p, 8, 8), "ngram k=2": _run(s, 4, 8)} for p, s in zip(plain_s, spec_s)]


def test_rows_carry_per_round_speedups_and_a_clear_verdict_when_every_round_agrees():
    row = speedup.aggregate("copy", "ngram k=2", _rounds([0.8, 0.82, 0.81], [0.4, 0.42, 0.41]))
    assert row.round_speedups == pytest.approx((2.0, 0.82 / 0.42, 0.81 / 0.41))
    assert (row.verdict.direction, row.verdict.confidence) == ("greater", "clear")
    assert row.verdict.ratio == pytest.approx(row.speedup)
    assert row.verify_verdict.direction == "same"      # 0.4 s / 4 spec steps = 0.8 s / 8 plain steps


def test_rounds_that_straddle_one_give_a_verdict_within_noise():
    row = speedup.aggregate("copy", "ngram k=2", _rounds([0.8, 0.8], [0.7, 0.9]))
    assert row.verdict.confidence == "within noise"


def test_a_busy_machine_hedges_the_verdict_and_the_sentence_says_what_to_do(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "0")         # full mode: the advice includes switching to fast mode
    conditions = speedup.Conditions("CPU time (time.process_time)", 9.0, 11.0, 2, "cpu")
    row = speedup.aggregate("copy", "ngram k=2", _rounds([0.8, 0.8], [0.4, 0.4]), conditions)
    assert (row.verdict.direction, row.verdict.confidence) == ("greater", "machine busy")
    set_language("zh")
    text = views.matrix_verdict([row])
    assert "LABKIT_FAST=1" in text and "机器正忙" in text


def test_matrix_table_marks_a_slow_pair_only_when_its_verdict_is_clear():
    clear = speedup.aggregate("code", "ngram k=2", _rounds([0.4, 0.4], [0.8, 0.8]))
    noisy = speedup.aggregate("code", "ngram k=2", _rounds([0.4, 0.4], [0.3, 0.8]))
    set_language("zh")
    assert "（更慢）" in views.matrix_table([clear])._repr_html_()
    assert "（更慢）" not in views.matrix_table([noisy])._repr_html_()
    assert "噪声之内" in views.matrix_table([noisy])._repr_html_()


def test_ties_are_the_ks_not_clearly_below_the_best_round_by_round():
    rows = [speedup.aggregate("copy", f"ngram k={k}", [{"plain": _run(0.8, 8, 8), f"ngram k={k}": _run(s, 4, 8)}
                                                        for s in spec])
            for k, spec in ((1, [0.5, 0.52]), (2, [0.4, 0.41]), (4, [0.39, 0.43]))]
    assert views.ties_with_best(rows) == [2, 4]


# ----------------------------------------------------------------------------- the real engines, timed on a fake clock

class WorkClock:
    """Time that passes only when the model runs: 1 unit per forward pass plus 0.1 per sampled row,
    so a verify step of k+1 rows costs more than a plain step, as on a CPU."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def engines():
    return sweeps.Engines()


@pytest.fixture
def work(engines, monkeypatch):
    clock = WorkClock()
    for name in ("plain", "ngram k=4"):
        runner = engines.get(*sweeps._split(name)).engine.runner
        real = runner.execute

        def execute(decision, real=real):
            out = real(decision)
            clock.now += 1.0 + 0.1 * (out.shape[0] if out is not None else 0)
            return out

        monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(sweeps, "machine_load", lambda: 0.0)       # contention comes from the clock alone
    return clock


def _sweep(engines):
    return sweeps.sweep_k(engines, "ngram", "copy", [4], num_prompts=1, max_tokens=7, rounds=3, lab=None)[0]


def test_engines_run_on_one_thread_while_measured(engines, monkeypatch):
    seen = []
    real = sweeps.run_batch
    monkeypatch.setattr(sweeps, "run_batch", lambda *a: (seen.append(torch.get_num_threads()), real(*a))[1])
    monkeypatch.delenv("LABKIT_THREADS", raising=False)
    sweeps.sweep_k(engines, "ngram", "copy", [4], num_prompts=1, max_tokens=3, rounds=2, lab=None)
    assert seen and set(seen) == {1}
    assert engines.clock_name.startswith("CPU time")


def test_contention_never_turns_the_copy_speedup_clearly_slower(engines, work):
    with clock_override(Clock("work clock", work)):
        quiet = _sweep(engines)
    assert (quiet.verdict.direction, quiet.verdict.confidence) == ("greater", "clear"), quiet.verdict
    bare_number_flipped = False
    for seed in range(5):
        with clock_override(ContendedClock(work, seed=seed, p=0.5, slow=(1, 10), episode=(0.5, 5.0))):
            noisy = _sweep(engines)
        assert not (noisy.verdict.clear and noisy.verdict.direction == "less"), (seed, noisy.verdict)
        bare_number_flipped |= min(noisy.round_speedups) < 1      # what a one-round, bare-number verdict would print
    assert bare_number_flipped, "the injected noise should be strong enough to fool a single round"


def test_sweep_records_its_verdicts_in_the_lab_report(engines, work, tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    with clock_override(Clock("work clock", work)):
        sweeps.sweep_k(engines, "ngram", "copy", [4], num_prompts=1, max_tokens=6, rounds=2)
    verdicts = results.read_summary("04")["verdicts"]
    entry = verdicts["speedup/copy/ngram k=4"]
    assert entry["direction"] == "greater" and entry["clock"] == "work clock" and len(entry["round_values"]) == 2
    assert "verify_cost/copy/ngram k=4" in verdicts
