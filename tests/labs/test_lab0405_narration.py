"""Labs 04 and 05: the sections narrated by ``lab04_speculative.narration`` and ``lab05_engine_choice.narration``
(lab 04 §2, §6, §7; lab 05 §1.3, §2's table and figure, §2.1, §5) render from records alone. Counterfactual
records — each verdict falling each way (greater / less / same / within noise / machine busy, where the
section has a timed verdict; each counted outcome both ways) — render a sentence, a table mark and a figure
title that agree, in both languages, and no static text of either lab states an outcome a record reverses.
Pure rendering: no model runs here."""

from __future__ import annotations

import re

import pytest

from labkit import i18n
from labkit.labs.common import records as R
from labkit.labs.common.measure import ArmValues, Comparison, verdict_from_ratios
from labkit.labs.lab04_speculative import narration as n04
from labkit.labs.lab04_speculative import records as r04
from labkit.labs.lab04_speculative.latency import StreamTimes
from labkit.labs.lab04_speculative.live import LabelledToken, SpecStep
from labkit.labs.lab04_speculative.lossless import homogeneity_test
from labkit.labs.lab05_engine_choice import compare as c05
from labkit.labs.lab05_engine_choice import narration as n05
from labkit.labs.lab05_engine_choice import records as r05
from labkit.labs.lab05_engine_choice.diagnose import LoadPoint, Sample
from labkit.labs.lab05_engine_choice.fixed_shapes import FixedShapeResult
from tests.labs.test_lab_records import OUTCOMES, chinese, expected, hedge_agrees, roundtrip, static_text  # noqa: F401

QUIET, BUSY, CORES = 0.3, 9.0, 2
HAN = re.compile("[\u4e00-\u9fff]")


def ctx(busy: bool = False) -> R.RunContext:
    return R.RunContext(cpu="Test CPU; torch ISA AVX512", isa="AVX512", threads=1, cores=CORES,
                        load=BUSY if busy else QUIET, mode="fast")


def timed(outcome: str, ratios=None, **info):
    load = dict(load=BUSY, cores=CORES) if outcome == "busy" else {}
    return verdict_from_ratios(ratios or OUTCOMES[outcome], **load, **info)


# ----------------------------------------------------------------------------- lab 04 §2 live demo

def live_record(accepting: bool, busy: bool = False) -> R.SectionRecord:
    def step(i, drafted, accepted):
        toks = [LabelledToken(100 + j, "accepted", j) for j in range(accepted)]
        toks += [LabelledToken(200 + j, "rejected", j) for j in range(accepted, drafted)]
        toks.append(LabelledToken(300 + i, "bonus" if accepted == drafted and drafted else
                                  "resampled" if drafted else "plain", None))
        return SpecStep(i, drafted, accepted, tuple(toks))
    steps = [step(0, 0, 0)] + [step(i, 4, (4 if i % 2 else 1) if accepting else 0) for i in range(1, 7)]
    return roundtrip(r04.live_record(steps, "ngram", 4, "copy", ctx(busy)))


@pytest.mark.parametrize("accepting, busy", [(True, False), (False, False), (True, True)])
def test_lab04_live_sentence_table_and_title_count_the_same_tokens(accepting, busy):
    rec = live_record(accepting, busy)
    n = n04.live_narration(rec)
    v = rec.verdict("tokens_per_step")
    assert v.direction == ("greater" if accepting else "same") and v.clear      # counted: a busy machine changes nothing
    assert f"{v.ratio:.2f} 个 token" in n.title and f"{v.ratio:.2f}" in n.sentences[1] and "个/步 个" not in n.text
    assert f"每步 {v.ratio:.2f} 个" in n.sentences[0]                           # the demo's own summary line agrees
    counts = dict(n.rows)
    steps = r04.live_from_record(rec)
    assert n.rows[0][1] == sum(s.accepted for s in steps[1:])                 # the "accepted" row: the steps' count
    assert sum(c for c in counts.values() if isinstance(c, int)) == sum(len(s.tokens) for s in steps[1:])
    assert ("被接受的草稿让一步多产出" in n.text) == accepting and ("没有一个草稿被接受" in n.text) == (not accepting)
    assert "机器正忙" not in n.text
    assert n.claims == {"live_more_than_one_token_per_step": f"{v.direction}|clear"}


# ----------------------------------------------------------------------------- lab 04 §6 lossless

def greedy_record(all_same: bool) -> R.SectionRecord:
    runs = {"sweep": [r04.RunIdentity("ngram", "copy", k, "2/2") for k in (1, 4)],
            "matrix": [r04.RunIdentity("draft", "code", 4, "2/2" if all_same else "1/2")]}
    return roundtrip(r04.greedy_record(runs, ctx()))


@pytest.mark.parametrize("all_same", [True, False])
def test_lab04_greedy_count_sentence_rows_and_title_agree(all_same):
    rec = greedy_record(all_same)
    n = n04.greedy_narration(rec)
    total = "5/6" if not all_same else "6/6"
    assert n.sentences[0].startswith(total) and total in n.title
    assert dict(n.rows) == {"k 扫描": "4/4", "流量矩阵": "2/2" if all_same else "1/2"}
    assert ("不同的运行" in n.text) == (not all_same)
    assert n.claims == {"greedy_identical": "all" if all_same else "not all"}


def sampling_record(differs: bool) -> R.SectionRecord:
    plain = [1] * 40 + [2] * 30 + [3] * 30
    spec = ([1] * 80 + [2] * 10 + [3] * 10) if differs else ([1] * 38 + [2] * 32 + [3] * 30)
    test = homogeneity_test(plain, spec)
    return roundtrip(r04.sampling_record(test, [repr(f" t{c}") for c in test.categories], k=2, temperature=1.0,
                                         context=ctx()))


@pytest.mark.parametrize("differs", [True, False])
def test_lab04_sampling_sentence_bars_and_title_read_one_p_value(differs):
    rec = sampling_record(differs)
    n = n04.sampling_narration(rec)
    p = rec.values["p_value"]
    assert (p < 0.01) == differs
    assert f"p = {p:.3f}" in n.title and f"p = {p:.3f}" in n.sentences[0]
    assert ("差异显著" in n.title) == ("差异显著" in n.sentences[0]) == differs
    assert ("看不出差别" in n.title) == ("噪声范围内" in n.sentences[0]) == (not differs)
    fig = n04.sampling_figure(rec)
    assert fig.layout.title.text == n.title and list(fig.data[0].x) == [r[0] for r in n.rows]
    assert [round(y, 6) for y in fig.data[1].y] == [round(r[2], 6) for r in n.rows]
    assert n.claims == {"sampling_differs": "yes" if differs else "no evidence"}


# ----------------------------------------------------------------------------- lab 04 §7 TPOT and ITL

def latency_record(multi: bool, busy: bool = False) -> R.SectionRecord:
    plain = StreamTimes(0.1, tuple(0.1 + 0.05 * i for i in range(9)), (1,) * 9)
    sizes = (1, 3, 1, 4) if multi else (1,) * 9
    spec = StreamTimes(0.1, tuple(0.1 + 0.06 * i for i in range(len(sizes))), sizes)
    return roundtrip(r04.latency_record(plain, spec, method="ngram", k=4, context=ctx(busy)))


@pytest.mark.parametrize("multi, busy", [(True, False), (False, False), (True, True)])
def test_lab04_latency_sentence_table_and_title_read_one_count(multi, busy):
    rec = latency_record(multi, busy)
    n = n04.latency_narration(rec)
    v = rec.verdict("itl_over_tpot")
    assert v.direction == ("greater" if multi else "same")
    assert f"= {v.ratio:.2f}" in n.title and (f"{v.ratio:.2f}" in n.sentences[0]) == multi
    spec_row = n.rows[1]
    assert spec_row[3] == f"{(sum(rec.values['spec']['chunk_sizes'][1:]) / (len(rec.values['spec']['chunk_sizes']) - 1)):.2f}"
    assert ("每块只有一个 token" in n.sentences[0]) == (not multi)
    assert ("机器正忙" in n.sentences[1]) == busy                    # wall-clock milliseconds: hedged when busy
    assert ("判断谁用时短" if busy else "多轮测量") in n.sentences[1]   # and never read as a speed comparison
    assert n.claims == {"itl_exceeds_tpot": f"{v.direction}|clear"}


# ----------------------------------------------------------------------------- lab 05 §1.3 fixed shapes

def fixed_record(outcome: str) -> R.SectionRecord:
    ratios = OUTCOMES[outcome]
    arms = {"eager": ArmValues("eager", (1e-3,) * 3, (0.03,) * 3, (30,) * 3, 1e-3),
            "dynamic": ArmValues("dynamic", (1e-3,) * 3, (0.03,) * 3, (30,) * 3, 1e-3),
            "fixed": ArmValues("fixed", tuple(1e-3 * r for r in ratios), tuple(0.03 * r for r in ratios), (30,) * 3,
                               1e-3 * min(ratios))}
    verdicts = {"dynamic": timed("same" if outcome != "busy" else "busy", [1.0, 1.01, 0.99] if outcome != "busy" else None),
                "fixed": timed(outcome)}
    c = Comparison(arms, "eager", verdicts, (("eager", "dynamic", "fixed"),), {}, "time", "CPU time (time.process_time)",
                   QUIET, BUSY if outcome == "busy" else QUIET, CORES, "Test CPU")
    r = FixedShapeResult((1, 2, 4, 8, 16), (3, 5, 8), 2, 0.2, {"eager": 0.0, "dynamic": 4.0, "fixed": 9.0}, c, 32,
                         {"eager": 0.01, "dynamic": 1.0, "fixed": 3.0}, 1e-6)
    return roundtrip(r05.fixed_record(r, ctx(outcome == "busy")))


FIXED_WORDS = {"greater": "每步比不构建的 eager 慢", "less": "每步比不构建的 eager 快", "same": "每步与 eager 一样快"}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab05_fixed_shapes_sentence_table_mark_and_title_agree(outcome):
    rec = fixed_record(outcome)
    n = n05.fixed_narration(rec)
    v = rec.verdict("fixed")
    direction, confidence = expected(outcome)
    assert v.confidence == confidence and (direction is None or v.direction == direction)
    cell = n.rows[2][2]                                       # the fixed arm's "over eager" cell
    assert cell.startswith(f"{v.ratio:.2f}×") and cell in n.title and f"{v.ratio:.2f}×" in n.sentences[0]
    assert n.rows[0][2] == "1（基准）"
    if v.clear:
        assert FIXED_WORDS[v.direction] in n.sentences[0]
        assert [w for d, w in FIXED_WORDS.items() if d != v.direction and w in n.sentences[0]] == []
        assert {"greater": "（更慢）", "less": "（更快）", "same": "（持平）"}[v.direction] in n.title
    hedge_agrees(outcome, n.sentences[0])
    assert ("机器正忙" in n.title) == (outcome == "busy") and ("噪声之内" in n.title) == (outcome == "noise")
    assert "省下" not in n.title                                # the title presumes no saving
    assert n05.fixed_figure(rec).layout.title.text == n.title
    assert n.claims["fixed_step_time"] == f"{v.direction}|{v.confidence}"


# ----------------------------------------------------------------------------- lab 05 §2 table and figure

def ablation_record(outcome: str) -> R.SectionRecord:
    def cell(variant, tok_per_cpu_s, tpot):
        return {"variant": variant, "zh": f"开关 {variant}", "en": f"switch {variant}", "available": True,
                "why_not_zh": "", "why_not_en": "", "output_throughput": 5.0, "tokens_per_cpu_s": tok_per_cpu_s,
                "ttft_p99_ms": 100.0, "tpot_p99_ms": tpot, "goodput": None, "memory_bytes": 2**20 * 300,
                "completed": 4, "failed": 0, "setup_s": 1.0}
    gains, cells, verdicts = {}, {}, {}
    for w in ("chat", "copy"):
        vs = {"prefix": timed(outcome, [1.02 * r for r in OUTCOMES[outcome]], margin=c05.MARGIN),
              "ngram": timed(outcome, margin=c05.MARGIN)}
        gains[w] = [{"variant": k, "zh": f"开关 {k}", "en": f"switch {k}", "throughput_x": v.ratio, "ttft_p99_x": None,
                     "memory_x": 1.0} for k, v in vs.items()]
        cells[w] = [cell("baseline", 10.0, 100.0)] + [cell(k, 10.0 * v.ratio, 100.0 / v.ratio) for k, v in vs.items()]
        cells[w].append({"variant": "compile", "zh": "编译", "en": "compile", "available": False,
                         "why_not_zh": "快速模式跳过", "why_not_en": "skipped in fast mode"})
        verdicts.update({f"{w}/{k}": v for k, v in vs.items()})
    rec = R.SectionRecord(lab="05", section=c05.ABLATION_SECTION, context=ctx(outcome == "busy"),
                          rounds={k: [v.ratio_min, v.ratio_max] for k, v in verdicts.items()},
                          values={"gains": gains, "cells": cells}, verdicts=verdicts)
    return roundtrip(rec)


GAIN_WORDS = {"greater": "（更多）", "less": "（更少）", "same": "（持平）"}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab05_ablation_table_marks_ranking_and_title_agree(outcome):
    rec = ablation_record(outcome)
    n = n05.ablation_narration(rec)
    direction, confidence = expected(outcome)
    for w in ("chat", "copy"):
        rows = [r for r in n.rows if r[0] == w]
        assert rows[0][4] == "1（基准）" and rows[-1][2] == "—"     # baseline; the unmeasured row keeps its reason
        for row in rows[1:-1]:
            v = rec.verdict(f"{w}/{'prefix' if 'prefix' in row[1] else 'ngram'}")
            assert v.confidence == confidence and (direction is None or v.direction == direction)
            assert row[4] == f"{v.ratio:.2f}×" + v.mark(**n05.V.GAIN_MARKS)
            ranking = next(x for x in n.sentences if x.startswith(f"{w} 负载"))
            if v.clear:
                assert f"{v.ratio:.2f}×" in ranking and GAIN_WORDS[v.direction] in row[4]
            else:
                assert "本次不排序" in ranking
        ngram = next(x for x in n.sentences if x.startswith(f"{w} · ") and "n-gram" in x)
        hedge_agrees(outcome, ngram)
    assert ("机器正忙" in n.title) == (outcome == "busy") and ("噪声之内" in n.title) == (outcome == "noise")
    assert ("结论都清楚" in n.title) == (confidence == "clear")
    fig = n05.ablation_figure(rec)
    assert fig.layout.title.text == n.title and list(fig.data[0].y) == [g["throughput_x"] for g in rec.values["gains"]["chat"]]
    assert str(n05.ablation_table(rec, "copy")).count("（基准）") >= 1


def test_lab05_ablation_records_saved_before_the_table_cells_still_rank():
    old = ablation_record("greater")
    old = old.replace(values=dict(old.values["gains"]))
    n = n05.ablation_narration(roundtrip(old))
    assert n.rows == () and any("结论清楚的开关" in x for x in n.sentences)


# ----------------------------------------------------------------------------- lab 05 §2.1 4-bit weights

def int4_record(outcome: str) -> R.SectionRecord:
    verdicts = {"tpot": timed(outcome, margin=c05.MARGIN), "ttft": timed(outcome, margin=c05.MARGIN),
                "throughput/copy": timed(outcome, margin=c05.MARGIN), "throughput/chat": timed(outcome, margin=c05.MARGIN)}
    rec = R.SectionRecord(lab="05", section=r05.INT4, context=ctx(outcome == "busy"),
                          rounds={k: [v.ratio_min, v.ratio_max] for k, v in verdicts.items()},
                          values={"single": "copy", "batched": "chat", "tokens": 16, "memory_x": {"copy": 0.3, "chat": 0.3},
                                  "agreement": {"num_prompts": 3, "num_identical": 1, "mean_first_divergence": 9.5,
                                                "divergences": [None, 3, 10]}},
                          verdicts=verdicts)
    return roundtrip(rec)


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab05_int4_sentences_rows_and_title_read_the_same_verdicts(outcome):
    rec = int4_record(outcome)
    n = n05.int4_narration(rec)
    tpot, ttft = rec.verdict("tpot"), rec.verdict("ttft")
    assert n.rows[0][1] == f"{tpot.ratio:.2f}×" and n.rows[0][1] in n.title and n.rows[1][1] in n.title
    assert n.rows[0][2] == tpot.confidence_label
    assert f"是基线的 {tpot.ratio:.2f} 倍" in n.sentences[0]
    marks = {"less": "（更快）", "greater": "（更慢）", "same": "（持平）"}
    if tpot.clear:
        assert marks[tpot.direction] in n.sentences[0]
    assert ("解码变快" in n.text) == (tpot.clear and tpot.direction == "less")
    assert ("首 token 反而更慢" in n.text) == (ttft.direction == "greater")     # stated when clear, else hedged
    hedge_agrees(outcome, n.sentences[2])
    assert "3 个提示里有 1 个" in n.text
    hedge_agrees(outcome, n.sentences[1])
    assert n.claims["int4_tpot"] == f"{tpot.direction}|{tpot.confidence}"


# ----------------------------------------------------------------------------- lab 05 §5 diagnosis

def diagnose_record(saturates: bool, low_host: bool, busy: bool = False) -> R.SectionRecord:
    samples = tuple(Sample(0.25 * i, 0.1 * i, 0.0, 1.0, 0.0) for i in range(4))
    lo = LoadPoint(1, 0.3, 0, 0, host_s=0.1, model_s=9.9, output_tok_s=5.0, samples=samples)
    hi = LoadPoint(8, 1.0 if saturates else 0.5, 2 if saturates else 0, 5, host_s=0.5 if low_host else 4.0,
                   model_s=9.5 if low_host else 6.0, output_tok_s=9.0, samples=samples)
    return roundtrip(r05.diagnose_record([lo, hi], ctx(busy)))


@pytest.mark.parametrize("saturates, low_host, busy", [(True, True, False), (False, False, False), (True, False, True)])
def test_lab05_diagnosis_sentences_table_and_title_agree(saturates, low_host, busy):
    rec = diagnose_record(saturates, low_host, busy)
    n = n05.diagnose_narration(rec)
    memory, host, _ = n.sentences
    hi = r05.diagnose_from_record(rec)[-1]
    kv = f"{100 * hi.peak_kv_usage:.0f}%"
    assert kv in n.title and kv in memory and n.rows[-1][1] == f"{100 * hi.peak_kv_usage:.0f}"
    assert f"抢占 {int(hi.preemptions)} 次" in n.title
    assert (f"抢占 {int(hi.preemptions)} 次" if hi.preemptions else "没有抢占") in memory
    assert ("先到顶" in memory) == saturates
    assert f"{100 * hi.host_share:.1f}%" in host and n.rows[-1][4] == f"{100 * hi.host_share:.1f}"
    assert ("模型先饱和" in host) == low_host and "随并发上升" not in host     # one run per level: no ranking
    assert ("机器正忙" in host) == busy
    assert n05.diagnose_figure(rec).layout.title.text == n.title
    assert len(n05.diagnose_figure(rec).data[0].x) == 4                       # the samples came back
    assert n.claims == {"kv_saturates_first": "yes" if saturates else "no", "host_share_low": "yes" if low_host else "no"}


# ----------------------------------------------------------------------------- both languages

def all_records():
    yield n04.live_narration, live_record(True)
    yield n04.greedy_narration, greedy_record(False)
    yield n04.sampling_narration, sampling_record(True)
    yield n04.latency_narration, latency_record(True, True)
    for o in OUTCOMES:
        yield n05.fixed_narration, fixed_record(o)
        yield n05.ablation_narration, ablation_record(o)
        yield n05.int4_narration, int4_record(o)
    yield n05.diagnose_narration, diagnose_record(True, False, True)


def test_every_narration_renders_in_english_with_no_chinese_left():
    i18n.set_language("en")
    for narrate, rec in all_records():
        n = narrate(rec)
        text = n.text + n.title + " ".join(str(c) for row in n.rows for c in row)
        assert n.sentences and n.title and not HAN.search(text), (rec.section, HAN.findall(text)[:5], text[:300])


# ----------------------------------------------------------------------------- static text

# Outcome claims the static text of labs 04 and 05 must not make: (lab, pattern, claim id, values under which
# the claim would be true). The counterfactual records above make every claim fall another way too.
OUTCOME_CLAIMS = [
    ("04", r"看绿色怎么变少", "live_more_than_one_token_per_step", {"greater|clear"}),
    ("04", r"用测量说明“无损”：贪心输出逐 token 相同", "greedy_identical", {"all"}),
    ("04", r"卡方检验(表明|证明)两组同分布", "sampling_differs", {"no evidence"}),
    ("04", r"ITL 均值(总是|一定)大于 TPOT", "itl_exceeds_tpot", {"greater|clear"}),
    ("05", r"每步省下多少", "fixed_step_time", {"less|clear"}),
    ("05", r"(固定形状|按桶编译)[^。\n]{0,12}(每步)?(更快|快了)", "fixed_step_time", {"less|clear"}),
    ("05", r"代价主要落在墙钟与 TTFT 上", "gain", {"same|clear"}),
    ("05", r"4 位权重[^。\n]{0,12}(解码|TPOT)[^。\n]{0,6}(更快|变快)", "int4_tpot", {"less|clear"}),
    ("05", r"让高并发时内存先吃紧", "kv_saturates_first", {"yes"}),
    ("05", r"调度器没有先饱和", "host_share_low", {"yes"}),
    ("05", r"在本实验的 CPU 上，主机（调度）时间只占每步的很小一部分", "host_share_low", {"yes"}),
    ("05", r"第 2 节量出了有的优化在某个负载上是负收益", "gain", {"less|clear"}),
    ("05", r"4 位权重的预填充更慢", "int4_ttft", {"greater|clear"}),
]


def counterfactual_claims() -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    records = list(all_records()) + [(n04.live_narration, live_record(False)), (n04.greedy_narration, greedy_record(True)),
                                     (n04.sampling_narration, sampling_record(False)),
                                     (n04.latency_narration, latency_record(False)),
                                     (n05.diagnose_narration, diagnose_record(False, True))]
    for narrate, rec in records:
        for key, value in narrate(rec).claims.items():
            seen.setdefault(key.split("/")[0], set()).add(value)
    return seen


def test_no_static_text_of_labs_04_and_05_states_an_outcome_a_record_can_reverse():
    seen = counterfactual_claims()
    bad = []
    for lab, pattern, claim, true_under in OUTCOME_CLAIMS:
        assert seen.get(claim, set()) - true_under, f"no counterfactual record reverses {claim}: the check would prove nothing"
        if re.search(pattern, static_text(lab)):
            bad.append((lab, pattern))
    assert not bad, f"static text states an outcome a record can reverse: {bad}"


# ----------------------------------------------------------------------------- lab 05 §6 the chapter figure

@pytest.mark.parametrize("outcome", ["greater", "noise", "busy"])
def test_lab05_chapter_line_for_this_runs_speculation_states_its_verdict(outcome, tmp_path, monkeypatch):
    from labkit.labs.lab05_engine_choice import chapter

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))               # no earlier lab recorded: §2's number is used
    monkeypatch.setattr(chapter, "simulated_gains", lambda n: (1.5, 2.5))
    v = timed(outcome, margin=c05.MARGIN)
    stages, lines = chapter.stages_for_chapter(8, v)
    spec = next(s for s in stages if s.name == "speculative")
    line = next(x for x in lines if x.startswith(spec.zh))
    assert spec.gain == v.ratio and spec.kind == "measured"
    assert f"结论：{chapter.CONFIDENCE_ZH[v.confidence]}" in line
