"""Lab 04 narrated from records, each verdict falling each way: section 3.1 finds the "verification nearly
free" regime among candidates (or says none was), the blog comparison and the summary read the rows, the
matrix counts agreement from the rounds, and the static text states no outcome a record can reverse."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.labs.common.measure import ArmValues, Comparison, Verdict, verdict_from_ratios
from labkit.labs.common.records import RunContext, SectionRecord
from labkit.labs.lab04_speculative import paying, sweeps, views
from labkit.labs.lab04_speculative.speedup import Row

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "04_speculative.ipynb"
QUIET = RunContext(cpu="Test CPU; torch ISA AVX512", isa="AVX512", threads=1, cores=2, load=0.3, mode="fast")
BUSY = replace(QUIET, load=9.0)
BLOG = "1.5x draft model ShareGPT; 2.8x n-gram CNN/DM"


def _row(verify, speedup, rounds_verify, k=6, workload="copy", method="ngram", rounds_speed=None, alpha=0.8, c=0.01):
    return Row(workload, f"{method} k={k}", k, alpha, 0.7, 0.8, c, 2.5, verify, speedup, "2/2", (k,) * 4, 10, 30, 38,
               round_speedups=tuple(rounds_speed or (speedup, speedup)), round_verify_costs=tuple(rounds_verify))


def _comparison(ratio, lo, hi, confidence="clear"):
    direction = "greater" if ratio > 1.05 else "less" if ratio < 0.95 else "same"
    v = Verdict(direction, confidence, ratio, lo, hi, 0.05, id="x", claim=("c", "c"), clock="CPU time")
    arms = {"plain": ArmValues("plain", [1.0, 1.0], [1, 1], [1.0, 1.0]), "ngram k=6": ArmValues("ngram k=6", [1.0], [1], [ratio])}
    return Comparison(arms, "plain", {"ngram k=6": v}, (), {}, "speed", "CPU time", 0.5, 0.5, 2, "cpu")


def _paying(target, verify, rounds_verify, speed=2.0, confidence="clear"):
    return paying.PayingRow(target, "ngram", "copy", 6, _row(verify, speed, rounds_verify),
                            _comparison(speed, speed * 0.95, speed * 1.05, confidence))


def _record(costs: dict[str, tuple], context=QUIET, speed=2.0, confidence="clear") -> SectionRecord:
    rows = [_paying(name, sum(r) / len(r), r, speed, confidence) for name, r in costs.items()]
    return paying.regime_record(rows, context)


@pytest.mark.parametrize("costs, found", [
    ({"fp32": (1.39, 1.4), "bf16": (1.6, 1.7), "q4_1": (1.79, 1.8)}, None),          # the Intel run: none
    ({"fp32": (1.3, 1.35), "bf16": (1.05, 1.1), "q4_1": (1.5, 1.6)}, "bf16"),        # an AMX-like CPU
    ({"fp32": (1.3, 1.35), "bf16": (1.5, 1.6), "q4_1": (1.02, 1.12)}, "q4_1"),
    ({"fp32": (1.05, 1.2), "bf16": (1.5, 1.6), "q4_1": (1.7, 1.8)}, None),          # one round above: not found
])
def test_the_regime_is_found_by_its_rounds_and_the_sentence_table_and_title_agree(costs, found):
    rec = _record(costs)
    assert paying.found_target(rec) == found
    narration = paying.render_regime(rec)
    assert narration.claims == {"nearly_free_target": found or "none"}
    yes = {r[0] for r in narration.rows if r[7] == "是"}
    assert yes == ({found} if found else set()) or (found and found in yes)
    text = narration.text
    if found is None:
        assert "没有候选满足" in text and "没有“验证几乎免费”的候选" in narration.title
        assert "找到的“验证几乎免费”的目标" not in text
    else:
        assert f"找到的“验证几乎免费”的目标：{found}" in text and found in narration.title
        assert "没有候选满足" not in text
    # the record survives JSON: a record from another machine renders the same
    again = SectionRecord.from_json(rec.to_json())
    assert paying.render_regime(again) == narration


def test_a_busy_record_hedges_the_regime_and_a_quiet_one_does_not():
    costs = {"fp32": (1.3, 1.35), "bf16": (1.05, 1.1)}
    quiet, busy = _record(costs), _record(costs, BUSY)
    assert "不可靠" not in paying.render_regime(quiet).text and "不可靠" in paying.render_regime(busy).text
    assert paying.found_target(quiet) == paying.found_target(busy) == "bf16"
    assert "机器正忙" in " ".join(paying.regime_sentences(busy)) or busy.busy


def test_the_regime_table_prints_every_candidate_and_the_machine():
    rec = _record({"fp32": (1.39, 1.4), "q4_1": (1.79, 1.8)})
    html = paying.regime_table(rec)._repr_html_()
    assert "fp32" in html and "q4_1" in html and "Test CPU" in html and "1.15" in html


@pytest.mark.parametrize("ours, word", [(3.06, "本次更大"), (2.0, "本次更小"), (2.8, "本次相当")])
def test_the_blog_comparison_takes_its_direction_from_the_rows(ours, word):
    rows = [_row(1.2, ours, (1.2,), workload="code"), _row(1.2, 0.9, (1.2,), method="draft", workload="chat", c=0.1)]
    text = views.blog_sentence(rows, BLOG)
    assert f"{ours:.2f}×" in text and "博客 2.8×" in text and word in text
    assert "草稿" in text and "博客 1.5×——本次更小" in text
    assert "我们的数字更小" not in text


def test_matrix_counts_rows_slower_in_every_round_from_the_rounds_not_the_busy_flag():
    busy = dict(load=8.0, cores=2)
    rows = [_row(1.2, 3.06, (1.2,), rounds_speed=(3.0, 3.1)),
            _row(1.2, 0.66, (1.2,), method="draft", workload="code", rounds_speed=(0.63, 0.69)),
            _row(1.2, 0.9, (1.2,), method="draft", workload="chat", rounds_speed=(0.8, 1.05))]
    rows = [replace(r, verdict=verdict_from_ratios(list(r.round_speedups), **busy)) for r in rows]
    text = views.matrix_verdict(rows)
    assert "（其中 1 个各轮都一致）" in text, text
    quiet = [replace(r, verdict=verdict_from_ratios(list(r.round_speedups))) for r in rows]
    assert views.slower_in_every_round(quiet) == 1


def test_the_summary_names_the_best_row_over_every_table_and_marks_a_busy_batch():
    sweep = [_row(1.2, 2.2, (1.2,))]
    matrix = [_row(1.2, 3.06, (1.2,), workload="code"), _row(1.2, 0.6, (1.2,), method="draft", workload="code")]
    hedge = dict(load=8.0, cores=2)
    b1 = sweeps.BatchRow(1, replace(_row(1.0, 1.5, (1.0,), rounds_speed=(1.4, 1.6)),
                                    verdict=verdict_from_ratios([1.4, 1.6], **hedge)), 0.06, 0.06, (0.06, 0.061))
    b8 = sweeps.BatchRow(8, replace(_row(1.2, 0.84, (1.2,), rounds_speed=(0.2, 0.84)),
                                    verdict=verdict_from_ratios([0.2, 0.84], **hedge)), 0.08, 0.1, (0.08, 0.09))
    opt = sweeps.read_sweep(sweep)
    table = views.summary_table(opt, sweep, matrix, [b1, b8])
    body = table._repr_html_()
    assert "3.06×" in body and "流量矩阵" in body and "2.20×" not in body.split("最差")[0].split("最好")[1]
    batch_row = next(r for r in table.rows if "批大小" in str(r[0]))
    assert "机器正忙" in batch_row[2] or "噪声" in batch_row[2]
    with_paying = views.summary_table(opt, sweep, matrix, [b1, b8], [_paying("bf16", 1.05, (1.05,), speed=4.0)])
    assert "4.00×" in with_paying._repr_html_() and "bf16" in with_paying._repr_html_()


def test_the_sweep_figure_draws_the_measurement_on_top_and_no_bar_shares_a_line_colour():
    rows = [_row(1.05, s, (1.05,), k=k) for k, s in ((1, 1.5), (2, 2.1), (4, 2.3))]
    fig = views.sweep_figure(rows)
    lines = [tr for tr in fig.data if tr.type == "scatter"]
    assert lines[-1].name == "实测"                              # drawn last: on top
    assert len({tr.line.dash for tr in lines}) == len(lines)      # the lines differ by dash too
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert {b.marker.color for b in bars}.isdisjoint({tr.line.color for tr in lines})


def test_the_matrix_figure_puts_value_labels_at_the_foot_of_the_bars():
    fig = views.matrix_figure([_row(1.2, 1.02, (1.2,)), _row(1.2, 0.97, (1.2,), method="draft")])
    for bar in (tr for tr in fig.data if tr.type == "bar"):
        assert bar.textposition == "inside" and bar.insidetextanchor == "start"


def _static_text() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


# Outcome claims a record can reverse: none of them may be typed into the lab's markdown.
OUTCOME_CLAIMS = ["因为验证代价接近 1", "我们的数字更小", "第 3 节已经量出它并不免费", "2023 年由 DeepMind 和清华提出",
                  "这台 CPU 没有 AMX", "验证一步比普通一步贵、n-gram 不是每步都有草稿", "正是用这种分布检验抓它的"]


def test_no_static_cell_states_an_outcome_a_record_can_reverse():
    text = _static_text()
    assert [c for c in OUTCOME_CLAIMS if c in text] == []
    assert "各自提出雏形" in text and "总变差距离" in text


def test_the_chi_square_note_matches_the_exercises_hidden_check():
    from labkit.labs.lab04_speculative import exercises
    text = _static_text()
    assert f"{exercises.STAT_MAX_TV}" in text and "1 万次" in text and exercises.STAT_TRIALS == 10_000


def test_every_recorded_bundle_renders_section_3_1():
    """Section 3.1 records from any bundle in the repository or beside it (../shared/lab-runs/) render in both
    languages; a bundle without lab 04's section is skipped by name."""
    from labkit import i18n
    from labkit.labs.common import records as R

    repo = Path(__file__).resolve().parents[2]
    bundles = {**R.find_bundles(repo / "data" / "lab-runs"), **R.find_bundles(repo.parent / "shared" / "lab-runs")}
    found = [rec for path in bundles.values() for lab, sections in R.load_bundle(path).items() if lab == "04"
             for name, rec in sections.items() if name == paying.SECTION]
    if not found:
        pytest.skip("no recorded bundle holds lab 04 section 3.1 yet (make record writes one)")
    for rec in found:
        for language in ("zh", "en"):
            i18n.set_language(language)
            n = paying.render_regime(rec)
            assert n.sentences and n.title and n.claims["nearly_free_target"] in (*rec.values, "none")
    i18n.set_language("zh")


def test_sections_saved_as_records_render_exactly_as_the_rows_they_came_from(tmp_path):
    """The k sweep, the matrix and the batch sizes saved and read back (JSON, as from another machine)
    give the same tables, figure titles and sentences as the live rows."""
    from labkit.labs.common.records import load_record, save_record
    from labkit.labs.lab04_speculative import records

    busy = dict(load=8.0, cores=2)
    sweep = [replace(_row(v, s, (v, v + 0.02), k=k, rounds_speed=(s, s + 0.1)), verdict=verdict_from_ratios([s, s + 0.1], **busy),
                     verify_verdict=verdict_from_ratios([v, v + 0.02])) for k, s, v in ((1, 1.5, 1.05), (4, 2.2, 1.3))]
    matrix = [replace(_row(1.2, s, (1.2,), method=m, workload=w, rounds_speed=(s, s * 1.02)),
                      verdict=verdict_from_ratios([s, s * 1.02])) for m, w, s in
              (("ngram", "code", 3.06), ("draft", "chat", 0.9), ("draft", "code", 0.6))]
    batches = [sweeps.BatchRow(b, replace(_row(1.1, s, (1.1,), rounds_speed=(s, s)), verdict=verdict_from_ratios([s, s])),
                               p, p * 1.2, (p, p * 1.05)) for b, s, p in ((1, 1.5, 0.06), (8, 0.84, 0.08))]
    saved = [save_record(records.rows_record(records.SWEEP, sweep, QUIET), tmp_path),
             save_record(records.rows_record(records.MATRIX, matrix, QUIET), tmp_path),
             save_record(records.batch_record(batches, QUIET), tmp_path)]
    s2, m2 = (records.rows_from_record(load_record(p)) for p in saved[:2])
    b2 = records.batch_from_record(load_record(saved[2]))
    assert s2 == sweep and m2 == matrix and b2 == batches
    opt = sweeps.read_sweep(sweep)
    assert views.sweep_verdict(sweeps.read_sweep(s2), s2) == views.sweep_verdict(opt, sweep)
    assert views.matrix_verdict(m2) == views.matrix_verdict(matrix)
    assert views.batch_verdict(b2) == views.batch_verdict(batches) and views.batch_title(b2) == views.batch_title(batches)
    assert (views.summary_table(opt, s2, m2, b2)._repr_html_() == views.summary_table(opt, sweep, matrix, batches)._repr_html_())
    assert views.sweep_figure(s2).layout.title.text == views.sweep_figure(sweep).layout.title.text
