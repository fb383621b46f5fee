"""Lab 05 through labkit.labs.common.measure: ablation gains carry verdicts from interleaved
rounds, the chapter figure reads the learner's earlier results, the compiler stays quiet."""

from __future__ import annotations

import pytest

from labkit.config import EngineConfig
from labkit.i18n import set_language
from labkit.labs.common import results
from labkit.labs.lab05_engine_choice import ablation, chapter, compare

from .test_lab05 import _metrics


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


def test_a_busy_machine_hedges_the_gain():
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
