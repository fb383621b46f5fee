"""Lab 05's sentences about this run, rendered from constructed verdicts where each falls each way:
section 2 ranks only clear verdicts (never bare point estimates) and names switches in Chinese; what
lab 04 measured for the chat-trained draft comes from lab 04's recorded result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.labs.common.measure import Verdict, verdict_from_ratios
from labkit.labs.lab05_engine_choice import compare

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "05_engine_choice.ipynb"


def _gain(variant, zh, rounds, busy=False):
    v = verdict_from_ratios(list(rounds), margin=compare.MARGIN, **({"load": 9.0, "cores": 2} if busy else {}))
    return compare.Gain(variant, zh, variant, sum(rounds) / len(rounds), None, 1.0, v)


def test_only_clear_verdicts_are_ranked_and_switches_are_named_in_chinese():
    chat = [_gain("prefix", "+ 前缀缓存", (1.16, 1.2)), _gain("draft", "+ 投机解码：草稿模型", (0.7, 0.75)),
            _gain("contiguous", "KV：分页 → 连续预留", (0.8, 1.3))]
    copy = [_gain("prefix", "+ 前缀缓存", (0.8, 0.84)), _gain("draft", "+ 投机解码：草稿模型", (0.9, 1.2)),
            _gain("contiguous", "KV：分页 → 连续预留", (0.95, 0.97))]
    text = " ".join(compare.ranking_sentences_from_gains({"chat": chat, "copy": copy}))
    assert "+ 前缀缓存 1.18×" in text and "> + 投机解码：草稿模型" in text
    assert "另有 1 个结论不清楚" in text and "KV：分页 → 连续预留 1.05" not in text
    assert "方向相反" in text and "+ 前缀缓存（chat 上 1.18×，copy 上 0.82×）" in text
    for code in ("prefix", "draft", "contiguous"):
        assert f" {code} " not in text and f"是 {code}" not in text


def test_overlapping_round_ranges_are_not_ranked_against_each_other():
    gs = [_gain("prefix", "+ 前缀缓存", (1.2, 1.3)), _gain("int4", "目标模型 4 位权重", (1.25, 1.4))]
    text = " ".join(compare.ranking_sentences_from_gains({"copy": gs}))
    assert "≈" in text and ">" not in text


@pytest.mark.parametrize("busy", [True, False])
def test_a_busy_or_noisy_run_ranks_nothing(busy):
    gs = [_gain("prefix", "+ 前缀缓存", (0.9, 1.3), busy), _gain("draft", "+ 投机解码：草稿模型", (0.95, 1.2), busy)]
    text = " ".join(compare.ranking_sentences_from_gains({"chat": gs, "copy": gs}))
    assert "本次不排序" in text and "量不出来" in text and ">" not in text


def _summary(direction, confidence, ratio):
    v = Verdict(direction, confidence, ratio, ratio * 0.95, ratio * 1.05, 0.05, id=compare.LAB04_DRAFT_CHAT,
                claim=("c", "c"), quantity="speed")
    return {"verdicts": {compare.LAB04_DRAFT_CHAT: v.as_entry()}}


@pytest.mark.parametrize("direction, confidence, ratio, words", [
    ("less", "clear", 0.9, "也比普通解码慢"), ("greater", "clear", 1.3, "比普通解码快"),
    ("same", "clear", 1.0, "差不多"), ("less", "machine busy", 0.9, "不可靠")])
def test_the_chat_draft_sentence_comes_from_lab04s_record(direction, confidence, ratio, words):
    text = compare.lab04_draft_on_chat(_summary(direction, confidence, ratio))
    assert words in text and f"{ratio:.2f}" in text


def test_without_lab04s_record_the_sentence_says_so():
    assert "还没有" in compare.lab04_draft_on_chat(None)


def test_the_static_text_states_no_outcome_of_lab04_or_of_the_ranking():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "在 chat 上可能反而有收益" not in text
    assert "飞行中批处理（in-flight batching，即连续批处理）、FP8 / NVFP4 量化，只支持 NVIDIA" not in text


@pytest.mark.parametrize("rounds, shown", [((1.16, 1.2), "+ 前缀缓存: 1.18×"), ((0.9, 1.3), "没有结论清楚的收益")])
def test_the_summary_names_a_biggest_gain_only_when_it_is_clear(monkeypatch, rounds, shown):
    from labkit.labs.lab05_engine_choice import views
    from labkit.labs.lab05_engine_choice.diagnose import LoadPoint

    gs = [_gain("prefix", "+ 前缀缓存", rounds), _gain("static", "调度：连续 → 静态批处理", (0.7, 0.72))]
    monkeypatch.setattr(views, "gains", lambda rows, w: gs)
    table = views.summary_table([], ["chat"], [LoadPoint(4, 0.5, 0.0, 1.0, 0.01, 1.0, 10.0)])
    assert shown in table.rows[0][1] and "静态" not in table.rows[0][1]


@pytest.mark.parametrize("rounds, busy, words", [((0.6, 0.7), False, "各轮一致"), ((0.6, 0.7), True, "看不出"),
                                                 ((0.98, 1.01), False, "各轮都与基线持平"), ((0.8, 1.1), False, "看不出")])
def test_the_cpu_advice_reads_the_verdicts_of_the_measured_gains(rounds, busy, words):
    from labkit.labs.lab05_engine_choice import advisor

    gs = [_gain("static", "调度：连续 → 静态批处理", rounds, busy), _gain("contiguous", "KV：分页 → 连续预留", rounds, busy)]
    rec = advisor.recommend(advisor.Scenario(hardware="cpu"), advisor.Measured.from_gains("chat", gs))
    text = " ".join(r.text_zh for r in rec.reasons if r.source.startswith("measured:"))
    assert words in text, text


def test_the_ranking_renders_the_same_from_a_saved_record(tmp_path, monkeypatch):
    from labkit.labs.common.records import RunContext, load_record, save_record

    by_w = {"chat": [_gain("prefix", "+ 前缀缓存", (1.16, 1.2)), _gain("draft", "+ 投机解码：草稿模型", (0.7, 0.75))],
            "copy": [_gain("prefix", "+ 前缀缓存", (0.8, 0.84)), _gain("draft", "+ 投机解码：草稿模型", (0.9, 1.2))]}
    monkeypatch.setattr(compare, "gains", lambda rows, w: by_w[w])
    ctx = RunContext(cpu="Test CPU", isa="AVX2", threads=1, cores=2, load=0.2, mode="fast")
    path = save_record(compare.gains_record([], ["chat", "copy"], ctx), tmp_path)
    again = compare.ranking_from_record(load_record(path))
    assert again == " ".join(compare.ranking_sentences_from_gains(by_w)) and "方向相反" in again
