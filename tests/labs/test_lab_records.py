"""Labs 01-05 narrate from records: counterfactual records (each verdict falling each way: greater,
less, same, within noise, machine busy) render a sentence, a table and a figure title that agree,
no static text of the lab states an outcome a record can reverse, and every recorded bundle in the
repo (and in ../shared/lab-runs when present) renders. Pure rendering: no model runs here."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from labkit import i18n
from labkit.assess.bank import load as load_bank
from labkit.labs.common import records as R
from labkit.labs.common.measure import Verdict, verdict_from_ratios
from labkit.labs.lab01_kv_cache import measure as kv
from labkit.labs.lab01_kv_cache import preemption
from labkit.labs.lab01_kv_cache import views as v01
from labkit.labs.lab02_paged_attention import attention_cost, block_size, layouts, sharing
from labkit.labs.lab02_paged_attention import views as v02
from labkit.labs.lab03_batching import chunked, offline, online, overhead, overhead_view, scaling
from labkit.labs.lab03_batching import views as v03
from labkit.labs.lab04_speculative import narration as n04
from labkit.labs.lab04_speculative import paying as p04
from labkit.labs.lab04_speculative import records as r04
from labkit.labs.lab04_speculative import sweeps as s04
from labkit.labs.lab04_speculative import views as v04
from labkit.labs.lab04_speculative.speedup import Row
from labkit.labs.lab05_engine_choice import compare as c05
from labkit.labs.lab05_engine_choice import narration as n05
from labkit.labs.lab05_engine_choice import records as r05

REPO = Path(__file__).resolve().parents[2]
QUIET, BUSY = 0.3, 9.0          # loads on 2 cores
CORES = 2

# Per-round ratios for each way a verdict can fall (margin 0.05; lab 01 uses 0.1).
OUTCOMES = {"greater": [1.5, 1.6, 1.55], "less": [0.6, 0.62, 0.61], "same": [1.0, 1.01, 0.99],
            "noise": [0.8, 1.3, 1.1], "busy": [1.5, 1.6, 1.55]}


@pytest.fixture(autouse=True)
def chinese():
    i18n.set_language("zh")
    yield
    i18n.set_language("zh")


def roundtrip(rec: R.SectionRecord) -> R.SectionRecord:
    return R.SectionRecord.from_json(rec.to_json())


def expected(outcome: str) -> tuple[str, str]:
    return {"greater": ("greater", "clear"), "less": ("less", "clear"), "same": ("same", "clear"),
            "noise": (None, "within noise"), "busy": ("greater", "machine busy")}[outcome]


# ----------------------------------------------------------------------------- lab 01

def growing(outcome: str) -> R.SectionRecord:
    ratios = OUTCOMES[outcome]
    load = BUSY if outcome == "busy" else QUIET
    cond = kv.Conditions(1, "CPU time (time.process_time)", load, load, CORES)
    cache = tuple(kv.TokenCost("cache", 8 + i, 8 if i == 0 else 1, 0.01) for i in range(4))
    recompute = (kv.TokenCost("recompute", 8, 8, 0.01),) + tuple(
        kv.TokenCost("recompute", 8 + i, 8 + i, 0.01 * r) for i, r in enumerate(ratios, 1))
    c = kv.CacheComparison(8, cache, recompute, (1, 2, 3, 4), (1, 2, 3, 4), cond)
    return roundtrip(kv.record_comparisons(kv.GROWING, [c], total=True))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab01_growing_sentence_table_and_title_agree(outcome):
    rec = growing(outcome)
    n = v01.growing_narration(rec)
    v = rec.verdict("context_8")
    direction, confidence = expected(outcome)
    assert v.confidence == confidence and (direction is None or v.direction == direction)
    assert n.claims == {"recompute_costs_more_time": f"{v.direction}|{v.confidence}"}
    text = n.text
    # one statistic for both ratios: the totals, in the sentence, the rows and the title alike
    c = kv.comparisons_from_record(rec)[0]
    total = f"{c.total_time_ratio():.2f}×"
    assert total in n.title and total in text and f"{c.token_ratio():.1f}" in n.title
    assert n.rows[1][2] / n.rows[0][2] == pytest.approx(c.total_time_ratio())
    assert ("反而更少" in text) == (v.direction == "less")
    assert ("反了" in n.title) == (v.direction == "less")
    assert ("机器正忙" in text) == (confidence == "machine busy")
    assert ("噪声之内" in text) == (confidence == "within noise")
    assert v01._cache_mark(v) in n.title


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab01_contexts_table_marks_follow_the_records_verdicts(outcome):
    rec = growing(outcome)
    rec = roundtrip(R.SectionRecord(lab="01", section=kv.CONTEXTS, context=rec.context, rounds=rec.rounds,
                                    values={"total": False}, verdicts={
                                        "context_8": kv.comparisons_from_record(rec)[0].time_verdict()}))
    n = v01.contexts_narration(rec)
    v = rec.verdict("context_8")
    assert n.claims == {"recompute_costs_more_time/context_8": f"{v.direction}|{v.confidence}"}
    assert str(n.rows[0][5]).endswith(v01._cache_mark(v))
    assert any("被机器上的其他程序干扰" in x for x in n.sentences) == (v.direction == "less")


@pytest.mark.parametrize("recomputed", [True, False])
def test_lab01_preemption_is_told_from_counts_and_measures_the_remedy(recomputed):
    kept = preemption.PoolRun(8, 0, 0, 100, 100, 9.9, ((1,),), 20, 32)
    dropped = preemption.PoolRun(4, 2 if recomputed else 0, 30 if recomputed else 0, 130 if recomputed else 100, 100,
                                 9.9, ((1,),), 25, 32)
    frugal = preemption.PoolRun(4, 0, 0, 100, 100, 9.9, ((1,),), 40, 2)
    rec = roundtrip(preemption.record_pools((kept, dropped, frugal)))
    n = v01.preemption_narration(rec)
    assert n.claims["preemption_recomputes"] == ("yes" if recomputed else "no")
    assert f"多算了 {dropped.tokens_recomputed:,} 个 token" in n.text and f"多算了 {dropped.tokens_recomputed:,} 个 token" in n.title
    assert [row[7] for row in n.rows] == [0, dropped.tokens_recomputed, 0]
    assert "40 步" in n.text and "秒" not in n.text and "9.9" not in " ".join(map(str, n.rows))   # counts, no wall clock


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab01_timeline_title_and_sentence_come_from_one_verdict(outcome):
    from labkit.metrics import StepRow

    ratios = OUTCOMES[outcome]
    rows = [StepRow(1, 48, 0, 0, 1, 0.0, 0.1, False)] + [StepRow(2 + i, 0, 1, 0, 1, 0.0, 0.1 / r, False)
                                                          for i, r in enumerate(ratios)]
    rec = roundtrip(kv.record_timeline(rows))
    load = BUSY if outcome == "busy" else QUIET
    rec = rec.replace(verdicts={"prefill_vs_decode": verdict_from_ratios(ratios, load=load, cores=CORES)})
    n = v01.timeline_narration(rec)
    v = rec.verdict("prefill_vs_decode")
    assert f"{v.ratio:.1f} 倍" in n.title and f"{v.ratio:.1f}×" in n.sentences[0]
    assert ("反了" in n.title) == ("反而" in n.sentences[0]) == (v.direction == "less")
    assert ("机器正忙" in n.title) == ("机器正忙" in n.sentences[0]) == (v.confidence == "machine busy")


# ----------------------------------------------------------------------------- lab 02

def indirection(outcome: str) -> R.SectionRecord:
    ratios = OUTCOMES[outcome]
    load = BUSY if outcome == "busy" else QUIET
    v = verdict_from_ratios(ratios, ratio=min(ratios), load=load, cores=CORES, id="indirection/context_512")
    cost = attention_cost.IndirectionCost(512, 16, 8, 1e-3 * min(ratios), 1e-3, 1e-7, v, attention_cost.KERNEL)
    return roundtrip(attention_cost.record_indirection([cost]))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab02_indirection_sentence_table_and_title_agree(outcome):
    rec = indirection(outcome)
    n = v02.indirection_narration(rec)
    v = rec.verdict("context_512")
    direction, confidence = expected(outcome)
    assert v.confidence == confidence and (direction is None or v.direction == direction)
    mark = v02.paged_vs_contiguous_mark(v)
    assert n.rows[0][5].endswith(mark) and n.title.endswith(mark)
    sentence = n.sentences[1]
    if confidence == "clear":
        word = {"greater": "比连续的慢", "less": "反而比连续的快", "same": "一样快"}[v.direction]
        assert word in sentence and word.strip("反而") in mark.replace("分页更慢", "比连续的慢").replace(
            "分页更快", "比连续的快").replace("持平", "一样快")
    else:
        assert {"within noise": "噪声之内", "machine busy": "机器正忙"}[confidence] in sentence + mark


def prefix_record(outcome: str) -> R.SectionRecord:
    # requests alike in length whose TTFTs spread widely mark the run disturbed: noise within that bound
    ratios = [0.9, 1.2, 1.05] if outcome == "noise" else OUTCOMES[outcome]
    load = (BUSY, BUSY) if outcome == "busy" else (QUIET, QUIET)
    runs = {}
    for name, plen, scale in (("1-shot", 40, 0.5), ("5-shot", 160, 1.0)):
        off = sharing.PrefixRun(False, plen, (plen + 12,) * 4, (0.5, *(0.1 * scale * r for r in ratios)), 4 * (plen + 12), 0,
                                4, 0, load)
        on = sharing.PrefixRun(True, plen, (plen + 12,) * 4, (0.5, *(0.1 * scale,) * 3), plen + 12 + 3 * 28, 3 * (plen - 16),
                               4, 3, load)
        runs[name] = (off, on)
    return roundtrip(sharing.record_prefix(runs, lab=None))


PREFIX_WORDS = {"greater": "首 token 来得更快", "less": "首 token 反而来得更慢", "same": "首 token 一样快"}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab02_prefix_ttft_sentence_table_and_title_agree(outcome):
    rec = prefix_record(outcome)
    n = v02.prefix_narration(rec)
    runs = sharing.prefix_from_record(rec)
    assert runs == {k: tuple(sharing.PrefixRun(**{**vars(r), "load": tuple(r.load)}) for r in pair) for k, pair in runs.items()}
    direction, confidence = expected(outcome)
    for (name, (off, on)), sentence, row in zip(runs.items(), n.sentences, n.rows):
        v = rec.verdict(name)
        assert v.confidence == confidence and (direction is None or v.direction == direction)
        ratio = f"{off.mean_ttft_after_first() / on.mean_ttft_after_first():.1f}"
        assert f"{ratio} 倍" in sentence and row[7] == ratio + v02.prefix_mark(v)   # one statistic, one verdict
        assert f"预填充 token 从 {off.prefill_tokens} 降到 {on.prefill_tokens}（计数）" in sentence
        if v.clear:
            assert PREFIX_WORDS[v.direction] in sentence
            assert [w for d, w in PREFIX_WORDS.items() if d != v.direction and w in sentence] == []
        hedge_agrees(outcome, sentence)
    shown = rec.verdict("5-shot")
    assert n.title.endswith(v02.prefix_mark(shown)) and "共享前缀 160 个 token" in n.title
    # the summary at the end of the lab carries the same number and mark as the section's table
    fork = type("Fork", (), {"n": 4, "mean_saving": lambda self: 50.0})()
    paged = type("Run", (), {"waste": 3.0, "label": "x", "mean_running": 2.0, "max_running": 2})()
    summary = v02.summary_table(paged, paged, runs["5-shot"], fork, None, shown)
    assert summary.rows[2][1].replace(" ×", "") == n.rows[1][7]
    assert n.claims["prefix_shortens_ttft/5-shot"] == f"{shown.direction}|{shown.confidence}"


def block_size_record(outcome: str) -> R.SectionRecord:
    ratios = OUTCOMES[outcome]
    load = BUSY if outcome == "busy" else QUIET
    points = [block_size.BlockSizePoint(B, 10.0 - B / 16, 12.0, min(ms), 100.0 * (100 // B * B) / 120, ms, load)
              for B, ms in ((1, tuple(2.0 * r for r in ratios)), (16, (2.0, 2.0, 2.0)), (128, tuple(2.0 * r for r in ratios)))]
    return roundtrip(block_size.record_block_sizes(points))


BLOCK_WORDS = {"greater": "比它慢", "less": "比它快", "same": "持平"}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab02_block_size_sentence_table_and_title_agree(outcome):
    rec = block_size_record(outcome)
    n = v02.block_size_narration(rec)
    direction, confidence = expected(outcome)
    for B, row in ((1, n.rows[0]), (128, n.rows[2])):
        v = rec.verdict(f"B_{B}")
        assert v.confidence == confidence and (direction is None or v.direction == direction)
        sentence = next(x for x in n.sentences if f"块大小 {B}：" in x)
        assert f"{v.ratio:.2f}×" in sentence and row[5] == f"{v.ratio:.2f}×" + v02.block_size_mark(v, 16)
        if v.clear:
            assert BLOCK_WORDS[v.direction] in sentence
    assert n.rows[1][5] == "1（基准）"
    changes = {"greater": "yes", "less": "yes", "same": "no", "noise": "unsure", "busy": "unsure"}[outcome]
    assert n.claims["block_size_changes_attention"] == changes
    assert ("持平" in n.title) == (changes == "no") and ("随块大小变化" in n.title) == (changes == "yes")
    assert ("分不出" in n.title) == (changes == "unsure")
    assert ("几乎不随块大小变化" in n.text) == (changes == "no")     # the explanation only where the record shows it
    assert ("机器正忙" in n.text) == (outcome == "busy")


# ----------------------------------------------------------------------------- lab 03

def chunking(outcome: str) -> R.SectionRecord:
    ratios = OUTCOMES[outcome]
    pairs = []
    for r in ratios:
        whole = chunked.ChunkedRun("不分块", 1024, False, (0.01, 0.01, 0.01 * r), 0.1, 516)
        chunk = chunked.ChunkedRun("分块", 64, True, (0.01, 0.01, 0.01), 0.1 * r, 64)
        pairs.append((whole, chunk))
    load = BUSY if outcome == "busy" else QUIET
    rec = chunked.record_chunking(pairs)
    verdicts = {k: verdict_from_ratios(ratios, load=load, cores=CORES, id=k) for k in ("itl_p99", "ttft")}
    return roundtrip(rec.replace(verdicts=verdicts))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab03_chunked_sentences_and_title_agree_and_a_level_ttft_is_no_price(outcome):
    rec = chunking(outcome)
    n = v03.chunked_narration(rec)
    ttft = rec.verdict("ttft")
    assert ttft.mark(**v03.CHUNK_MARKS["ttft"]) in n.title
    price = "分块的代价：长提示的 TTFT"
    assert (price in n.sentences[1] and "噪声" not in n.sentences[1] and "正忙" not in n.sentences[1]) == (
        ttft.direction == "greater" and ttft.clear)
    if ttft.direction == "same":
        assert "没有量出分块的代价" in n.sentences[1] or not ttft.clear


def scaling_record(outcome: str) -> R.SectionRecord:
    # steps of one batch size alike in time; a wide spread marks the run disturbed: noise within that bound
    ratios = [0.9, 1.2, 1.05] if outcome == "noise" else OUTCOMES[outcome]
    load = BUSY if outcome == "busy" else QUIET
    decode = [scaling.StepTiming("decode", 1, 0.01, (0.01, 0.01, 0.01), load, CORES),
              scaling.StepTiming("decode", 4, 0.012, (0.012, 0.012, 0.012), load, CORES),
              scaling.StepTiming("decode", 16, min(0.16 / r for r in ratios), tuple(0.16 / r for r in ratios), load, CORES)]
    prefill = [scaling.StepTiming("prefill", n, 0.0005 * n) for n in (32, 128)]
    return roundtrip(scaling.record_scaling(decode, prefill))


SCALING_WORDS = {"greater": "每个 token 越便宜", "less": "token 吞吐反而只有", "same": "并没有更便宜"}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab03_scaling_sentence_table_and_title_read_one_verdict(outcome):
    rec = scaling_record(outcome)
    n = v03.scaling_narration(rec)
    v = rec.verdict("batching")
    direction, confidence = expected(outcome)
    assert v.confidence == confidence and (direction is None or v.direction == direction)
    mark = v.mark(**v03.BATCHING_MARKS)
    assert n.rows[-1][4] == f"{v.ratio:.1f}×{mark}" and all(not str(r[4]).endswith("）") for r in n.rows[:-1])
    assert n.title.endswith(f"{v.ratio:.1f}×{mark}")                # the table's statistic, the table's mark
    sentence = n.sentences[0]
    assert f"{v.ratio:.2f}×" in sentence and "批 1 → 批 16" in sentence
    if v.clear:
        assert SCALING_WORDS[v.direction] in sentence
        assert [w for d, w in SCALING_WORDS.items() if d != v.direction and w in sentence] == []
    hedge_agrees(outcome, sentence)
    assert n.claims == {"decode_batching_pays": f"{v.direction}|{v.confidence}"}


def host_rows(per_request_us: dict[int, float]) -> list:
    return [overhead.OverheadRow(n, 1e-6 * us * n, 0.0, 0.0) for n, us in per_request_us.items()]


@pytest.mark.parametrize("second_round", [{1: 1.0, 64: 1.0, 4096: 100.0}, {1: 1.0, 64: 1.0, 4096: 0.1}])
def test_lab03_crossover_longer_side_and_verdict_read_every_round(second_round):
    first = host_rows({1: 1.0, 64: 1.0, 4096: 100.0})
    sweep = overhead.HostSweep([min(a, b, key=lambda r: r.engine_host_s) for a, b in zip(first, host_rows(second_round))],
                               [first, host_rows(second_round)], QUIET, 12)
    rec = roundtrip(overhead_view.record_host_sweep(sweep))
    n = overhead_view.host_sweep_narration(rec)
    agree = second_round[4096] == 100.0
    top_small = n.rows[-1][4]
    assert (top_small == "主机") == agree and (top_small == "各轮不一") == (not agree)
    small_line = next(x for x in n.sentences if x.startswith("SmolLM2"))
    assert ("各轮不一致" in small_line) == (not agree)
    v = rec.verdict("SmolLM2-135M / H100")
    assert (v.direction == "greater" and v.clear) == agree


def test_lab03_remedy_ratio_is_per_round_and_flags_a_disturbed_rung():
    rows, steps, hosts = {}, {}, {}
    for i, (name, _) in enumerate(overhead.RUNGS):
        rows[name] = overhead.OverheadRow(64, 1e-3, 2e-3, 0.0, engine_host_mean_s=10e-3, step_s=12e-3)
        steps[name] = [12e-3, 40e-3, 12.5e-3] if i == 1 else [12e-3, 12.2e-3, 12.1e-3]
        hosts[name] = [10e-3, 38e-3, 10.5e-3] if i == 1 else [10e-3, 10.2e-3, 10.1e-3]
    run = overhead.RemedyRun("SmolLM2-135M / H100", 64, rows, steps, QUIET, hosts)
    ratios = overhead_view.step_over_bound(run, overhead.RUNGS[1][0])
    assert max(ratios) < 1.3                  # a busy round's step over the same round's host: no impossible 2.5
    table = overhead_view.remedies_table([run], {})
    marks = [row[9] for row in table.rows]
    assert "机器正忙" in marks[1] and all("机器正忙" not in m for i, m in enumerate(marks) if i != 1)
    rec = roundtrip(overhead_view.record_remedies([run]))
    n = overhead_view.remedies_narration(rec)
    assert n.rows == tuple(tuple(r) for r in table.rows)
    v = rec.verdict("SmolLM2-135M / H100")
    assert n.claims == {"async_shortens/SmolLM2-135M / H100": f"{v.direction}|{v.confidence}"}
    assert "12.10" in n.text            # the async rung's rounds, as the table's step column shows them


# ----------------------------------------------------------------------------- lab 04 and lab 05
#
# Lab 04's k sweep, matrix and batch sections save their rows (``lab04_speculative.records``) and the
# lab prints ``views`` of the rows read back; §3.1 renders itself (``paying.render_regime``); lab 05 §2
# prints its ranking from the record. The narrators below gather what each section prints (sentence,
# table rows, figure title) from the record alone, as the lab's cells do.

def lab04_rows_narration(table, figure_title, verdict_text):
    def narrate(rec: R.SectionRecord) -> R.Narration:
        rows = r04.rows_from_record(rec)
        best = max(rows, key=lambda r: r.speedup)
        v = best.verdict or Verdict.exact(best.speedup, margin=0.05)
        return R.Narration(sentences=(verdict_text(rows),), rows=tuple(tuple(r) for r in table(rows).rows),
                           title=figure_title(rows), claims={"best_speeds_up": f"{v.direction}|{v.confidence}"})
    return narrate


sweep_narration = lab04_rows_narration(v04.sweep_table, lambda rows: v04.sweep_figure(rows).layout.title.text,
                                       lambda rows: v04.sweep_verdict(s04.read_sweep(rows), rows))
matrix_narration = lab04_rows_narration(v04.matrix_table, lambda rows: v04.matrix_figure(rows).layout.title.text,
                                        v04.matrix_verdict)


def batch_narration(rec: R.SectionRecord) -> R.Narration:
    rows = r04.batch_from_record(rec)
    _, speed = s04.batch_verdicts(rows)
    return R.Narration(sentences=(v04.batch_verdict(rows),), rows=tuple(tuple(r) for r in v04.batch_table(rows).rows),
                       title=v04.batch_figure(rows).layout.title.text,
                       claims={"speedup_with_batch": f"{speed.direction}|{speed.confidence}"})


def ablation_narration(rec: R.SectionRecord) -> R.Narration:
    """Lab 05 §2's ranking sentences, and per gain its ratio and confidence (the marks beside it); the
    lab's own narrator (``lab05_engine_choice.narration``, in NARRATORS) adds the table and the figure title."""
    by_w = c05.gains_from_record(rec)
    rows = tuple((w, i18n.t(g.zh, g.en), f"{g.throughput_x:.2f}×", g.verdict.confidence_label if g.verdict else "—")
                 for w, gs in by_w.items() for g in gs)
    ranked = {w: sum(len(x) for x in c05.clear_order(gs)) >= 2 for w, gs in by_w.items()}
    return R.Narration(sentences=tuple(c05.ranking_sentences_from_gains(by_w)), rows=rows,
                       claims={f"ranked/{w}": "yes" if r else "no" for w, r in ranked.items()})


def lab04_row(k, ratios, outcome, *, method="ngram", workload="copy", verify=1.2):
    load = BUSY if outcome == "busy" else QUIET
    v = verdict_from_ratios(ratios, load=load, cores=CORES)
    return Row(workload, f"{method} k={k}", k, 0.8, 0.7, 0.8, 0.01, 2.5, verify, v.ratio, "2/2", (k,) * 4, 10, 30, 38,
               round_speedups=tuple(ratios), round_verify_costs=(verify, verify), verdict=v,
               verify_verdict=verdict_from_ratios([verify, verify * 1.01]))


def lab04_ctx(outcome):
    return R.RunContext(cpu="Test CPU; torch ISA AVX512", isa="AVX512", threads=1, cores=CORES,
                        load=BUSY if outcome == "busy" else QUIET, mode="fast")


def sweep_record(outcome: str) -> R.SectionRecord:
    best = OUTCOMES[outcome]
    rows = [lab04_row(1, [0.7 * x for x in best], outcome), lab04_row(2, best, outcome),
            lab04_row(4, [0.5 * x for x in best], outcome, verify=1.6)]
    return roundtrip(r04.rows_record(r04.SWEEP, rows, lab04_ctx(outcome)))


# the clause each speed verdict chooses, as the lab's views word it
SWEEP_WORDS = {"greater": "比普通解码快", "less": "比普通解码还慢", "same": "与普通解码差不多快"}
MATRIX_WORDS = {"greater": "比普通解码快", "less": "连最好的组合", "same": "也只与普通解码差不多快"}


def hedge_agrees(outcome: str, text: str):
    assert ("噪声之内" in text) == (outcome == "noise"), text
    assert ("机器正忙" in text) == (outcome == "busy"), text


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab04_sweep_sentence_table_and_title_agree(outcome):
    rec = sweep_record(outcome)
    n = sweep_narration(rec)
    best = max(r04.rows_from_record(rec), key=lambda r: r.speedup)
    v = best.verdict
    direction, confidence = expected(outcome)
    assert v.confidence == confidence and (direction is None or v.direction == direction)
    assert n.claims == {"best_speeds_up": f"{v.direction}|{v.confidence}"}
    sentence = n.sentences[0]
    assert f"实测最优 k = {best.k}" in sentence and f"{best.speedup:.2f}×" in sentence
    row = next(r for r in n.rows if r[0] == best.k)
    assert row[7] == f"{best.speedup:.2f}×"                        # the table shows the sentence's number
    if confidence == "clear":
        assert SWEEP_WORDS[v.direction] in sentence
        assert [w for d, w in SWEEP_WORDS.items() if d != v.direction and w in sentence] == []
    hedge_agrees(outcome, sentence)
    assert "本机实测" in n.title and not re.search("快|慢|更好|免费", n.title)   # the title states no outcome


def matrix_record(outcome: str) -> R.SectionRecord:
    best = OUTCOMES[outcome]
    rows = [lab04_row(6, best, outcome, workload="code"), lab04_row(6, [0.8 * x for x in best], outcome, workload="chat"),
            lab04_row(6, [0.5 * x for x in best], outcome, method="draft", workload="code")]
    return roundtrip(r04.rows_record(r04.MATRIX, rows, lab04_ctx(outcome)))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab04_matrix_sentence_table_marks_and_title_agree(outcome):
    rec = matrix_record(outcome)
    n = matrix_narration(rec)
    rows = r04.rows_from_record(rec)
    best = max(rows, key=lambda r: r.speedup)
    v = best.verdict
    sentence = n.sentences[0]
    assert f"{best.speedup:.2f}×" in sentence
    if v.clear:
        assert MATRIX_WORDS[v.direction] in sentence
    hedge_agrees(outcome, sentence)
    # a row is marked slower in the table exactly when its verdict says so clearly
    for row, cells in zip(rows, n.rows):
        assert cells[8].startswith(f"{row.speedup:.2f}×")
        assert ("（更慢）" in cells[8]) == (row.verdict.clear and row.verdict.direction == "less"), cells[8]
    worst = min(rows, key=lambda r: r.speedup)
    slower = sum(r.verdict.direction == "less" for r in rows)
    assert (f"{slower}/{len(rows)} 个组合比普通解码更慢" in sentence) == (worst.verdict.direction == "less")
    assert "本机实测" in n.title and not re.search("快|慢", n.title)


def batch_record(outcome: str) -> R.SectionRecord:
    first = replace(lab04_row(6, [1.0, 1.0, 1.0], outcome), verdict=verdict_from_ratios([1.0, 1.0, 1.0]))
    last = lab04_row(6, OUTCOMES[outcome], outcome)
    rows = [s04.BatchRow(1, first, 0.05, 0.06, (0.05, 0.05)), s04.BatchRow(8, last, 0.07, 0.09, (0.07, 0.071))]
    return roundtrip(r04.batch_record(rows, lab04_ctx(outcome)))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab04_batch_sentence_table_and_title_agree(outcome):
    rec = batch_record(outcome)
    n = batch_narration(rec)
    rows = r04.batch_from_record(rec)
    _, speed = s04.batch_verdicts(rows)
    direction, confidence = expected(outcome)
    assert speed.confidence == confidence and (direction is None or speed.direction == direction)
    s0, s1 = (f"{b.row.speedup:.2f}×" for b in rows)
    assert f"{s0} → {s1}" in n.title and [r[5] for r in n.rows] == [s0, s1]      # title and table: same numbers
    sentence = n.sentences[0]
    assert s0 in sentence and s1 in sentence
    words = {"greater": "上升到", "less": "下降到", "same": "几乎不变"}
    if speed.clear:
        assert words[speed.direction] in sentence
        assert [w for d, w in words.items() if d != speed.direction and w in sentence] == []
    hedge_agrees(outcome, sentence)


# a second switch whose verdict falls the same way as OUTCOMES[outcome], at another ratio
SECOND = {"greater": [2.5, 2.6, 2.55], "less": [0.3, 0.31, 0.32], "same": [1.0, 1.02, 1.01],
          "noise": [0.85, 1.25, 1.05], "busy": [2.5, 2.6, 2.55]}


def ablation_record(chat: str, copy: str) -> R.SectionRecord:
    def gains(outcome):
        load = dict(load=BUSY, cores=CORES) if outcome == "busy" else {}
        out = []
        for variant, zh, ratios in (("prefix", "+ 前缀缓存", OUTCOMES[outcome]), ("draft", "+ 投机解码：草稿模型", SECOND[outcome])):
            v = verdict_from_ratios(ratios, margin=c05.MARGIN, **load)
            out.append(c05.Gain(variant, zh, variant, v.ratio, None, 1.0, v))
        return out

    by_w = {"chat": gains(chat), "copy": gains(copy)}
    rec = R.SectionRecord(lab="05", section=c05.ABLATION_SECTION, context=lab04_ctx("busy" if "busy" in (chat, copy) else "x"),
                          rounds={f"{w}/{g.variant}": [g.verdict.ratio_min, g.verdict.ratio_max] for w, gs in by_w.items() for g in gs},
                          values={w: [{"variant": g.variant, "zh": g.zh, "en": g.en, "throughput_x": g.throughput_x,
                                       "ttft_p99_x": None, "memory_x": 1.0} for g in gs] for w, gs in by_w.items()},
                          verdicts={f"{w}/{g.variant}": g.verdict for w, gs in by_w.items() for g in gs})
    return roundtrip(rec)


@pytest.mark.parametrize("chat, copy", [(o, o) for o in OUTCOMES] + [("greater", "less")])
def test_lab05_ablation_ranks_exactly_the_clear_gains_and_says_when_a_switch_flips(chat, copy):
    rec = ablation_record(chat, copy)
    n = ablation_narration(rec)
    for w, outcome in (("chat", chat), ("copy", copy)):
        line = next(x for x in n.sentences if x.startswith(f"{w} 负载"))
        clear = outcome not in ("noise", "busy")
        assert n.claims[f"ranked/{w}"] == ("yes" if clear else "no")
        assert ("本次不排序" in line) == (not clear), line
        assert {r[3] for r in n.rows if r[0] == w} == {rec.verdict(f"{w}/prefix").confidence_label}
        if clear:                                # the ranked ratios are the table's
            for r in (r for r in n.rows if r[0] == w):
                assert f"{r[1]} {r[2]}" in line, (r, line)
    flipped = any("方向相反，而且两边都清楚" in x for x in n.sentences)
    assert flipped == ({chat, copy} == {"greater", "less"})


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_lab04_and_lab05_render_in_english_too(outcome):
    i18n.set_language("en")
    for narrate, rec in ((sweep_narration, sweep_record(outcome)), (matrix_narration, matrix_record(outcome)),
                         (batch_narration, batch_record(outcome)), (ablation_narration, ablation_record(outcome, outcome))):
        n = narrate(rec)
        assert n.sentences and not re.search("[\u4e00-\u9fff]", n.text + n.title), n.text


# ----------------------------------------------------------------------------- static text

def static_text(lab: str) -> str:
    """Every markdown cell of the lab, its quiz module's text, and every string of its question file."""
    nb = next((REPO / "labs").glob(f"{lab}_*.ipynb"))
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    package = next((REPO / "labkit" / "labs").glob(f"lab{lab}_*"))
    rows = load_bank(package / "quiz.toml")
    bank = "\n".join(text for row in rows for text in (*row.question, *(s for o in row.options for s in o)))
    return md + "\n" + (package / "quiz.py").read_text(encoding="utf-8") + "\n" + bank


# Outcome claims a lab's static text must not make: (lab, pattern, claim id prefix, values under which
# the claim would be true). Each claim is decided by the record field its narration reports; the
# counterfactual records above make every value occur, so a pattern found in static text fails.
OUTCOME_CLAIMS = [
    ("02", r"分页注意力[^。；\n]{0,12}(反而)?更慢（第 7 节）", "paging_cost", {"greater|clear"}),
    ("02", r"paged attention is slower, it looks up", "paging_cost", {"greater|clear"}),
    ("02", r"分页注意力比读连续 K/V 的注意力慢", "paging_cost", {"greater|clear"}),
    ("02", r"间接寻址让注意力慢了多少", "paging_cost", {"greater|clear"}),
    ("02", r"本机慢多少", "paging_cost", {"greater|clear"}),
    ("02", r"几乎不随块大小变化", "block_size_changes_attention", {"no"}),
    ("02", r"(开启|打开)前缀缓存[^。；\n]{0,8}首 token[^。；\n]{0,6}(更快|快了|缩短)", "prefix_shortens_ttft", {"greater|clear"}),
    ("01", r"代价是算力和时间", "recompute_costs_more_time", {"greater|clear"}),
    ("03", r"解码批越大，每个 token 越便宜", "decode_batching_pays", {"greater|clear"}),
    ("03", r"解码步的时间在小批时应当几乎是平的", "decode_batching_pays", {"greater|clear"}),
    ("03", r"解码者的尾延迟被压平", "chunking_cuts_itl", {"greater|clear"}),
    ("03", r"代价是长提示的 TTFT", "chunking_costs_ttft", {"greater|clear"}),
    ("03", r"（第 6 节实测）", "chunking_costs_ttft", {"greater|clear"}),
    ("03", r"首 token 晚一些", "chunking_costs_ttft", {"greater|clear"}),
]


def all_counterfactual_claims() -> dict[str, set[str]]:
    claims: dict[str, set[str]] = {}
    narrations = ([v01.growing_narration(growing(o)) for o in OUTCOMES]
                  + [v02.indirection_narration(indirection(o)) for o in OUTCOMES]
                  + [v02.prefix_narration(prefix_record(o)) for o in OUTCOMES]
                  + [v02.block_size_narration(block_size_record(o)) for o in OUTCOMES]
                  + [v03.chunked_narration(chunking(o)) for o in OUTCOMES]
                  + [v03.scaling_narration(scaling_record(o)) for o in OUTCOMES])
    for n in narrations:
        for key, value in n.claims.items():
            claims.setdefault(key.split("/")[0], set()).add(value)
    return claims


def test_no_static_text_states_an_outcome_a_record_can_reverse():
    claims = all_counterfactual_claims()
    bad = []
    for lab, pattern, claim, true_under in OUTCOME_CLAIMS:
        seen = claims.get(claim, set())
        assert seen - true_under, f"no counterfactual record reverses {claim}: the test would prove nothing"
        if re.search(pattern, static_text(lab)):
            bad.append((lab, pattern))
    assert not bad, f"static text states an outcome a record can reverse: {bad}"


@pytest.mark.parametrize("lab", ["01", "03"])
def test_cited_lines_are_printed_in_the_readers_language(lab):
    nb = next((REPO / "labs").glob(f"{lab}_*.ipynb"))
    code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "code")
    assert "{c.claim}" not in code, "a cited row's English claim printed as the line: use cite_line"


def test_cite_line_switches_language():
    from labkit.labs.common.references import cite_line

    zh = cite_line("vLLM KV memory waste", "vLLM 的 KV 显存浪费")
    assert zh.startswith("vLLM 的 KV 显存浪费（vLLM KV memory waste）：")
    i18n.set_language("en")
    assert cite_line("vLLM KV memory waste", "vLLM 的 KV 显存浪费").startswith("vLLM KV memory waste: ")


# ----------------------------------------------------------------------------- recorded bundles

NARRATORS = {("01", kv.GROWING): v01.growing_narration, ("01", kv.TIMELINE): v01.timeline_narration, ("01", kv.CONTEXTS): v01.contexts_narration,
             ("01", preemption.SECTION): v01.preemption_narration,
             ("02", attention_cost.SECTION): v02.indirection_narration, ("02", sharing.PREFIX_SECTION): v02.prefix_narration,
             ("02", block_size.SECTION): v02.block_size_narration,
             ("02", layouts.LAYOUTS_SECTION): v02.layouts_narration, ("02", layouts.FIT_SECTION): v02.fit_narration,
             ("03", chunked.SECTION): v03.chunked_narration, ("03", scaling.SECTION): v03.scaling_narration, ("03", overhead_view.SECTION): overhead_view.host_sweep_narration,
             ("03", overhead_view.REMEDIES): overhead_view.remedies_narration,
             ("03", offline.SECTION): v03.offline_narration, ("03", online.SERVING_SECTION): v03.serving_narration,
             ("03", online.FIDELITY_SECTION): v03.fidelity_narration,
             ("04", p04.SECTION): p04.render_regime, ("04", r04.SWEEP): sweep_narration,
             ("04", r04.MATRIX): matrix_narration, ("04", r04.BATCH): batch_narration,
             ("04", r04.LIVE): n04.live_narration, ("04", r04.GREEDY): n04.greedy_narration,
             ("04", r04.SAMPLING): n04.sampling_narration, ("04", r04.LATENCY): n04.latency_narration,
             ("05", c05.ABLATION_SECTION): n05.ablation_narration, ("05", r05.FIXED): n05.fixed_narration,
             ("05", r05.INT4): n05.int4_narration, ("05", r05.DIAGNOSE): n05.diagnose_narration}
UNTITLED: set = set()      # every recorded section now renders a figure or table title from its record

REPO_BUNDLES = R.find_bundles(REPO / "data" / "lab-runs")
SHARED = REPO.parent / "shared" / "lab-runs"
SHARED_BUNDLES = R.find_bundles(SHARED)


def render_bundle(path: Path) -> int:
    rendered = 0
    for lab, sections in R.load_bundle(path).items():
        for section, rec in sections.items():
            narrate = NARRATORS.get((lab, section))
            assert narrate is not None, f"{path}: lab {lab} section {section} has no narrator in NARRATORS"
            for language in ("zh", "en"):
                i18n.set_language(language)
                n = narrate(rec)
                assert n.sentences and (n.title or (lab, section) in UNTITLED), (lab, section)
            rendered += 1
    return rendered


@pytest.mark.parametrize("name", sorted(REPO_BUNDLES) or ["none"])
def test_every_repo_bundle_renders(name):
    if name == "none":
        pytest.skip("no recorded bundle under data/lab-runs/ (make record writes one)")
    assert render_bundle(REPO_BUNDLES[name]) > 0


@pytest.mark.parametrize("name", sorted(SHARED_BUNDLES) or ["none"])
def test_every_shared_bundle_renders(name):
    if name == "none":
        why = "absent" if not SHARED.is_dir() else "holds no records (only saved notebooks)"
        pytest.skip(f"../shared/lab-runs/ {why}")
    render_bundle(SHARED_BUNDLES[name])


def test_a_simulated_serving_run_charges_host_work_in_cpu_time_not_the_wall_clock():
    """Lab 03 §4: the simulator's clock moves by the engine's host work too; read on the wall clock, a
    busy machine stretched every simulated step (static batching's throughput once stalled at 0.42/s
    for three rates). A simulated replay reads the host in process CPU time; an injected clock stays."""
    import time

    from labkit import host_clock
    from labkit.events import StepEnd
    from labkit.labs.common.measure import clock_override
    from labkit.labs.lab03_batching import online
    from labkit.traces import TraceRequest

    trace = [TraceRequest(0.1 * i, 16, 4) for i in range(3)]
    seen = []
    llm = online.sim_server("continuous", max_num_seqs=4)
    llm.engine.hooks.subscribe(lambda e: seen.append(host_clock.now), StepEnd)
    online.serve_trace(llm, trace, 10.0, online.SLO(2.0, 0.1), "x")
    assert seen and all(now is time.process_time for now in seen) and host_clock.now is time.perf_counter
    injected = seen.clear() or (lambda: 0.0)
    with clock_override(injected):
        llm = online.sim_server("continuous", max_num_seqs=4)
        llm.engine.hooks.subscribe(lambda e: seen.append(host_clock.now), StepEnd)
        online.serve_trace(llm, trace, 10.0, online.SLO(2.0, 0.1), "x")
    assert seen and all(now is injected for now in seen)
