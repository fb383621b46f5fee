"""show_beside: the learner's run beside every recorded bundle, rendered from records alone. Counterfactual
bundles (the headline verdict falling each way: greater, less, same, within noise, machine busy) render
marks, ratios and a closing question that agree with the records; the learner's saved records come first;
English with the one-call switch; the course site's switch hands a section the bundle's record and names
its CPU. Pure rendering: no model runs here."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit import i18n
from labkit.labs.common import beside as B
from labkit.labs.common import records as R
from labkit.labs.common.measure import verdict_from_ratios

REPO = Path(__file__).resolve().parents[2]
FAST = REPO / "data" / "lab-runs" / "amd-epyc-avx512-bf16" / "fast"
OUTCOMES = {"greater": [1.5, 1.6, 1.55], "less": [0.6, 0.62, 0.61], "same": [1.0, 1.01, 0.99],
            "noise": [0.8, 1.3, 1.1], "busy": [1.5, 1.6, 1.55]}
MARKS = {"greater": "▲ 推测解码划算", "less": "▼ 推测解码不划算", "same": "＝ 推测解码不赚不赔",
         "noise": "？噪声之内", "busy": "⚠ 机器正忙"}


@pytest.fixture(autouse=True)
def chinese():
    i18n.set_language("zh")
    yield
    i18n.set_language("zh")


def matrix(outcome: str, cpu: str = "AMD EPYC; torch ISA AVX512; no AMX; AVX512_BF16") -> R.SectionRecord:
    """Lab 04's matrix: one n-gram verdict on copy, falling as ``outcome`` says."""
    load = 9.0 if outcome == "busy" else 0.3
    v = verdict_from_ratios(OUTCOMES[outcome], load=load, cores=2, quantity="speed", id="speedup/copy/ngram k=4",
                            claim=("ngram k=4 相对普通解码的加速比（copy）", "speed-up of ngram k=4 over plain decoding (copy)"))
    ctx = R.RunContext(cpu=cpu, isa="AVX512", threads=1, cores=2, load=load, mode="fast", kind="x",
                       recorded="2026-12-07T05:43:53+00:00")
    return R.SectionRecord(lab="04", section="4-matrix", context=ctx, verdicts={"copy/ngram_k=4": v})


def bundle(tmp_path: Path, name: str, *recs: R.SectionRecord) -> Path:
    root = tmp_path / "runs" / name
    for rec in recs:
        R.save_record(rec, root)
    return root


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_each_way_a_verdict_falls_the_mark_and_ratio_follow_the_record(tmp_path, outcome):
    rec = matrix(outcome)
    b = B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[bundle(tmp_path, "cpu-a/fast", rec)])
    (row,) = b.sections[0].rows
    v = rec.verdict("copy/ngram_k=4")
    assert row.mark.startswith(MARKS[outcome])
    assert row.ratio.startswith(f"{v.ratio:.2f}×") and f"{v.ratio_min:.2f}–{v.ratio_max:.2f}" in row.ratio
    assert ("机器正忙" in row.load) == (outcome == "busy")
    assert row.cpu == rec.context.cpu and row.mode == "快速" and row.recorded == "2026-12-07 05:43"
    # one run only: nothing to compare, and the question says what is missing rather than any outcome
    assert "划算" not in b.question and "至少需要两次" in b.question
    assert MARKS[outcome] in b._repr_html_() and rec.context.cpu in b._repr_html_()


@pytest.mark.parametrize("here, there", [("greater", "less"), ("less", "greater"), ("same", "greater")])
def test_where_two_cpus_disagree_the_question_asks_why_in_the_records_words(tmp_path, here, there):
    a = bundle(tmp_path, "intel-xeon/fast", matrix(here, cpu="Intel Xeon; torch ISA AVX512; no AMX; no AVX512_BF16"))
    b = bundle(tmp_path, "amd-epyc/fast", matrix(there))
    q = B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[a, b]).question
    words = {d: B.SPECULATION[i][0] for i, d in enumerate(("greater", "less", "same"))}
    assert q.startswith("第 4 节（matrix）") and q.endswith(q[q.index("为什么"):]) and "为什么" in q
    first, second = q.index("Intel Xeon"), q.index("AMD EPYC")
    assert first < second
    assert q.index(words[here]) < second < q.index(words[there], second)


@pytest.mark.parametrize("other", ["noise", "busy"])
def test_an_unsure_run_is_never_set_against_a_clear_one(tmp_path, other):
    a = bundle(tmp_path, "a/fast", matrix("greater"))
    b = bundle(tmp_path, "b/fast", matrix(other, cpu="Other CPU"))
    c = bundle(tmp_path, "c/fast", matrix("greater", cpu="Third CPU"))
    q = B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[a, b, c]).question
    assert "却" not in q and "Other CPU" not in q
    assert "2 次运行都是「推测解码划算（更快）」" in q and "反过来吗" in q


def test_the_learners_saved_run_comes_first_and_missing_sections_are_said(tmp_path):
    results = tmp_path / "results"
    R.save_record(matrix("less", cpu="My laptop CPU"), results / "records")
    other = R.load_record(FAST / "lab04" / "3-sweep.json")
    b = B.show_beside("04", results_dir=results, bundles=[bundle(tmp_path, "amd/fast", matrix("greater"), other)])
    by_section = {s.section: s for s in b.sections}
    assert list(by_section) == ["3-sweep", "4-matrix"]              # the sections' own order
    mine = by_section["4-matrix"].rows[0]
    assert mine.mine and mine.run == "你的运行" and mine.mark.startswith(MARKS["less"])
    assert not by_section["4-matrix"].missing_yours and by_section["3-sweep"].missing_yours
    assert "你的机器（My laptop CPU）上推测解码不划算" in b.question
    assert "你还没有运行这一节" in b._repr_html_()


def test_english_with_the_one_call_switch_or_per_call(tmp_path):
    a = bundle(tmp_path, "a/fast", matrix("greater"))
    b = bundle(tmp_path, "b/fast", matrix("less", cpu="Other CPU"))
    i18n.set_language("en")
    en = B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[a, b])
    assert en.sections[0].rows[0].mark == "▲ speculation pays (faster)" and "why?" in en.question
    assert "run" in en.headers and not any("\u4e00" <= ch <= "\u9fff" for ch in en.question)
    i18n.set_language("zh")
    assert "为什么" in B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[a, b]).question
    assert "why?" in B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[a, b], lang="en").question


def test_every_repo_bundle_sits_beside_the_others_for_every_lab(tmp_path):
    found = B.bundle_dirs(REPO / "data" / "lab-runs")
    assert found, "no recorded bundle under data/lab-runs/"
    for lab in ("01", "02", "03", "04", "05"):
        for lang in ("zh", "en"):
            b = B.show_beside(lab, results_dir=tmp_path / "nobody", bundles=found, lang=lang)
            assert b.sections and all(1 <= len(s.rows) <= len(found) for s in b.sections)   # a section some bundles lack
            assert b.question and b.text()
            for s in b.sections:
                for r in s.rows:
                    assert r.verdict is None or r.mark.startswith(("▲", "▼", "＝", "？", "?", "⚠")), (lab, s.section, r)


def test_bundles_without_records_are_skipped_with_a_reason(tmp_path):
    assert "不存在" in B._shared_skips(tmp_path / "absent", "zh")[0]
    (tmp_path / "shared" / "intel" / "fast").mkdir(parents=True)
    (tmp_path / "shared" / "intel" / "fast" / "01_kv_cache.ipynb").write_text("{}")
    assert "只有保存的笔记本" in B._shared_skips(tmp_path / "shared", "zh")[0]
    assert B.bundle_dirs(tmp_path / "shared") == {}
    b = B.show_beside("04", results_dir=tmp_path / "nobody", bundles=[bundle(tmp_path, "a/fast", R.load_record(FAST / "lab01" / "1.1-growing.json"))])
    assert b.sections == () and any("没有实验 04 的记录" in n for n in b.notes)


def test_a_busy_bundle_is_found_under_its_own_name(tmp_path):
    bundle(tmp_path, "amd/fast-busy2", matrix("busy"))
    bundle(tmp_path, "amd/fast", matrix("greater"))
    assert sorted(B.bundle_dirs(tmp_path / "runs")) == ["amd/fast", "amd/fast-busy2"]


def test_the_site_switch_hands_a_section_the_bundles_record_and_names_its_cpu(tmp_path, monkeypatch, capsys):
    from labkit.labs.lab01_kv_cache import views as v01

    live = R.load_record(FAST / "lab01" / "1.1-growing.json")
    live = live.replace(context=R.RunContext(**{**live.context.__dict__, "cpu": "Build machine", "load": 12.0}))
    assert B.site_record(live) is live                                 # no switch: the learner's own run
    monkeypatch.setenv(B.SITE_BUNDLE_ENV, str(FAST))
    monkeypatch.setenv(B.SITE_LOG_ENV, str(tmp_path / "log.jsonl"))
    shown = B.site_record(live)
    recorded = R.load_record(FAST / "lab01" / "1.1-growing.json")
    assert shown == recorded and v01.growing_narration(shown) == v01.growing_narration(recorded)
    out = capsys.readouterr().out
    assert recorded.context.cpu in out and "快速模式" in out and "amd-epyc-avx512-bf16/fast" in out and "Build machine" not in out
    missing = live.replace(section="9-not-recorded")
    assert B.site_record(missing) is missing and "现场测得" in capsys.readouterr().out
    assert (tmp_path / "log.jsonl").read_text().count('"replayed": true') == 1
    assert recorded.context.cpu in B.site_load_note() and "机器正忙" not in B.site_load_note()
    busy_bundle = tmp_path / "cpu" / "fast"
    R.save_record(live, busy_bundle)                                     # recorded at load 12 on 2 cores
    monkeypatch.setenv(B.SITE_BUNDLE_ENV, str(busy_bundle))
    assert B.site_record(recorded) is recorded and "录制时机器正忙" in capsys.readouterr().out
    monkeypatch.setenv(B.SITE_BUNDLE_ENV, str(FAST))
    grown = live.replace(values={**live.values, "cells": {}})            # the lab's record grew since the bundle
    assert B.site_record(grown) is grown and "比本实验的代码旧（缺 values.cells）" in capsys.readouterr().out
    assert '"stale": ["values.cells"]' in (tmp_path / "log.jsonl").read_text()


def test_a_bundle_being_recorded_is_shown_once_as_your_run(tmp_path, monkeypatch):
    root = bundle(tmp_path, "amd/fast", matrix("greater"))
    monkeypatch.setenv("LABKIT_RECORDS", str(root))                   # what make record sets
    b = B.show_beside("04", bundles=[root, bundle(tmp_path, "intel/fast", matrix("less", cpu="Intel"))])
    assert [r.run for r in b.sections[0].rows] == ["你的运行", "intel/fast"]


def test_on_the_site_there_is_no_your_run_and_the_page_says_so(tmp_path, monkeypatch):
    R.save_record(matrix("less", cpu="Build machine"), tmp_path / "records")
    monkeypatch.setenv("LABKIT_RECORDS", str(tmp_path / "records"))
    monkeypatch.setenv(B.SITE_BUNDLE_ENV, str(FAST))
    b = B.show_beside("04", bundles=[bundle(tmp_path, "amd/fast", matrix("greater"))])
    assert [r.run for r in b.sections[0].rows] == ["amd/fast"] and any("站点版" in n for n in b.notes)
    assert not b.sections[0].missing_yours and "你还没有运行" not in b.text()


def test_record_labs_busy_writes_a_bundle_named_for_its_busy_loops_and_stops_them(tmp_path):
    import importlib.util
    import json
    import multiprocessing as mp

    spec = importlib.util.spec_from_file_location("record_labs", REPO / "scripts" / "record_labs.py")
    rl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rl)
    with pytest.raises(SystemExit):
        rl.main(["--busy", "2", "--timings", str(tmp_path / "t.json")])   # busy Run All times are no timings
    assert rl.main(["--busy", "1", "--labs", "99", "--out", str(tmp_path)]) == 1       # no lab 99: nothing runs
    (manifest,) = tmp_path.glob("*/fast-busy1/bundle.json")
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["runs"][0]["busy_loops"] == 1 and data["labs"] == {"99": "no such lab"} and data["mode"] == "fast"
    assert not mp.active_children()
