"""Lab 05 through labkit.labs.common.measure: ablation gains carry verdicts from interleaved
rounds, the chapter figure reads the learner's earlier results, the compiler stays quiet."""

from __future__ import annotations

import pytest

from labkit.config import EngineConfig
from labkit.i18n import set_language
from labkit.labs.lab05_engine_choice import ablation, chapter, compare
from labkit.labs.lab05_engine_choice import fixed_shapes as fs
from labkit.report import results

from .test_lab05 import _metrics
from .test_lab05_fixed_shapes import TINY


def _row(workload, name, cpu_rounds, tokens=100, load=(0.1, 0.1)):
    variant = ablation.Variant(name, name, name, EngineConfig())
    metrics = _metrics(50.0)
    rounds = tuple((tokens, c, metrics) for c in cpu_rounds)
    return ablation.AblationRow(workload, variant, metrics, min(cpu_rounds), weights_bytes=100, rounds=rounds, load=load)


def test_a_gain_is_clear_when_every_round_agrees_and_hedged_when_they_do_not():
    rows = [_row("a", "baseline", [1.0, 1.02]), _row("a", "x", [0.5, 0.51]), _row("a", "y", [0.8, 1.3])]
    assert (compare.verdict_of(rows, "a", "x").direction, compare.verdict_of(rows, "a", "x").confidence) == \
        ("greater", "clear")
    assert compare.verdict_of(rows, "a", "y").confidence in ("within noise", "machine busy")
    set_language("zh")
    assert "噪声之内" in compare.gain_sentence("y", compare.verdict_of(rows, "a", "y")) or \
        "机器正忙" in compare.gain_sentence("y", compare.verdict_of(rows, "a", "y"))


def test_a_busy_machine_hedges_the_gain(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "0")         # full mode: the advice includes switching to fast mode
    rows = [_row("a", "baseline", [1.0, 1.0], load=(6.0, 7.0)), _row("a", "x", [0.5, 0.5], load=(6.0, 7.0))]
    v = compare.verdict_of(rows, "a", "x")
    assert v.confidence == "machine busy" and "LABKIT_FAST=1" in compare.gain_sentence("x", v)


def test_record_gains_writes_the_lab_report(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    compare.record_gains([_row("a", "baseline", [1.0, 1.0]), _row("a", "x", [0.5, 0.5])], ["a"])
    assert results.read_summary("05")["verdicts"]["ablation/a/x"]["ratio"] == pytest.approx(2.0)


def test_the_chapter_takes_recorded_numbers_and_simulates_only_the_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    calls = []
    monkeypatch.setattr(chapter, "simulated_gains", lambda n: calls.append(n) or (1.5, 2.5))
    stages, lines = chapter.stages_for_chapter(8, 1.2)
    assert calls == [8] and {s.name: s.kind for s in stages}["speculative"] == "measured"
    assert [f"lab{n}.json" in line for n, line in zip(("03", "02", "04"), lines)] == [True, True, True]
    results.record("04", "verdicts", "speedup/copy/ngram k=4", {"ratio": 2.2, "confidence": "clear"})
    results.record("03", "verdicts", "offline/continuous_over_static", {"ratio": 1.8, "confidence": "clear"})
    results.record("02", "verdicts", "paged/throughput_over_contiguous", {"ratio": 3.0, "confidence": "within noise"})
    calls.clear()
    stages, lines = chapter.stages_for_chapter(8, 1.2)
    by = {s.name: s for s in stages}
    assert calls == []                                         # nothing left to simulate
    assert (by["speculative"].gain, by["speculative"].kind) == (2.2, "recorded")
    assert (by["continuous"].gain, by["paged"].gain) == (1.8, 3.0)
    assert any("lab04.json" in line and "2.20" in line for line in lines)


def test_quiet_compiler_raises_the_recompile_limit_and_restores_it():
    import torch._dynamo.config as dynamo_config

    before = dynamo_config.recompile_limit
    with ablation.quiet_compiler():
        assert dynamo_config.recompile_limit >= 64
    assert dynamo_config.recompile_limit == before


# ----------------------------------------------------------------------------- contention injected into the real path

def test_contention_never_turns_a_fixed_shape_verdict_clearly_around(monkeypatch):
    """The three arms run their real (eager, uncompiled here) layers; each decode step costs a known
    time on a work clock (dynamic 1.3x eager, fixed 0.7x) and contention is injected over it."""
    import functools

    from labkit.labs.common import measure
    from tests.labs.noise import WorkClock, assert_never_clearly_opposite

    work = WorkClock()
    cost = {"eager": 1.0, "dynamic": 1.3, "fixed": 0.7}
    real_make = fs.make_arm

    def make_arm(name, layers, max_rows, buckets=None, seed=1):
        arm = real_make("eager", layers, max_rows, seed=seed)
        arm.name, arm.buckets = name, fs.check_buckets(buckets) if name == "fixed" else None
        return arm

    def run_trace(self, trace):
        for b in trace:
            self.run(b)
            work.advance(cost[self.name])
        return len(trace)

    monkeypatch.setattr(fs, "make_arm", make_arm)
    monkeypatch.setattr(fs.DecodeArm, "run_trace", run_trace)
    monkeypatch.setattr(fs, "compare", functools.partial(measure.compare, load=lambda: 0.0))

    def run():
        return fs.run_fixed_shapes(TINY, num_layers=1, num_steps=4, rounds=3, buckets=(1, 2, 4, 8))

    for arm, expected in (("fixed", "less"), ("dynamic", "greater")):
        assert_never_clearly_opposite(work, run, expected, verdict_of=lambda r, arm=arm: r.comparison.verdicts[arm])


def _served(monkeypatch, work, names=("baseline", "fast")):
    """Variants that really serve over HTTP (the simulator behind the server); each token produced
    costs a known time on ``work`` (the second variant half the first's)."""
    from labkit import LLM

    variants = [ablation.Variant(name, name, name, EngineConfig(max_num_seqs=4, max_model_len=256 * (i + 1)))
                for i, name in enumerate(names)]
    llms = {}

    def build(variant):
        if variant.name not in llms:
            llm = LLM("sim", config=variant.config, progress=False)
            real = llm.engine.step

            def step(real=real, c=0.5 if variant.name == names[1] else 1.0):
                out = real()
                work.advance(c * len(out))      # per token produced (arrivals over HTTP vary the steps)
                return out

            llm.engine.step = step
            llms[variant.name] = llm
        return llms[variant.name], 0.0

    monkeypatch.setattr(ablation, "_build", build)
    monkeypatch.setattr(ablation, "_weights_bytes", lambda llm: 100)
    monkeypatch.setattr(ablation, "_kv_bytes", lambda llm: 100)
    monkeypatch.setattr(ablation, "machine_load", lambda: 0.0)
    return variants


def test_contention_never_turns_an_ablation_gain_clearly_around(monkeypatch):
    """Tokens per CPU second (``serve_and_bench`` reads measure's clock) under injected contention."""
    from tests.labs.noise import WorkClock, assert_never_clearly_opposite

    work = WorkClock()
    variants = _served(monkeypatch, work)
    workload = ablation.chat_workload(2, 3, 3)

    def run():
        rows = ablation.run_workload(variants, workload, {"ttft": 1e6, "tpot": 1e6}, rounds=3)
        return compare.gains(rows, "chat")[0]

    assert_never_clearly_opposite(work, run, "greater")

