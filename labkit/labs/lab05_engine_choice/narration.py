"""What lab 05 prints about §1.3 (fixed shapes), §2 (the ablation), §2.1 (4-bit weights) and §5
(diagnosis), rendered from their records alone: the sentences, the table rows, the figure title and the
outcomes they decide (``claims``). The lab's cells print these narrations of the record they just saved
(``lines``), and the tables and figures are drawn from the same record, so a record made on another CPU
renders the same way.
"""

from __future__ import annotations

from labkit.i18n import t
from labkit.labs.common.records import Narration, SectionRecord
from labkit.labs.lab05_engine_choice import compare, diagnose, quant4
from labkit.labs.lab05_engine_choice import records as R
from labkit.labs.lab05_engine_choice import views as V


def lines(n: Narration) -> None:
    """Print a narration's sentences, one a line (what a lab cell shows)."""
    for line in n.sentences:
        print(line)


def _claim(v) -> str:
    return "none" if v is None else f"{v.direction}|{v.confidence}"


# ----------------------------------------------------------------------------- §1.3 fixed shapes

def fixed_narration(rec: SectionRecord) -> Narration:
    r = R.fixed_from_record(rec)
    return Narration(sentences=tuple(V.fixed_shape_sentences(r)), rows=tuple(tuple(x) for x in V.fixed_shape_table(r).rows),
                     title=V.fixed_shape_title(r),
                     claims={"fixed_step_time": _claim(r.comparison.verdicts["fixed"]),
                             "dynamic_step_time": _claim(r.comparison.verdicts["dynamic"])})


def fixed_table(rec: SectionRecord):
    return V.fixed_shape_table(R.fixed_from_record(rec))


def fixed_figure(rec: SectionRecord):
    return V.fixed_shape_figure(R.fixed_from_record(rec))


# ----------------------------------------------------------------------------- §2 the ablation

GAIN_SENTENCES = (("ngram", ("n-gram 投机解码", "n-gram speculative decoding")), ("static", ("静态批处理", "static batching")))


def ablation_narration(rec: SectionRecord) -> Narration:
    """The ranking, two switches' sentences per workload, the tables' rows (every workload, its name first)
    and the figure's title, all from the record."""
    by_w = compare.gains_from_record(rec)
    sentences = list(compare.ranking_sentences_from_gains(by_w))
    for w, gs in by_w.items():
        found = {g.variant: g for g in gs}
        for variant, name in GAIN_SENTENCES:
            g = found.get(variant)
            sentences.append(f"{w} · " + compare.gain_sentence(t(*name), None if g is None else g.verdict))
    cells = rec.values.get("cells", {})
    rows = tuple((w, *row) for w in by_w if w in cells for row in V.cells_table(cells[w], by_w[w], w).rows)
    ranked = {w: sum(len(x) for x in compare.clear_order(gs)) >= 2 for w, gs in by_w.items()}
    claims = {f"ranked/{w}": "yes" if r else "no" for w, r in ranked.items()}
    claims.update({f"gain/{w}/{g.variant}": _claim(g.verdict) for w, gs in by_w.items() for g in gs})
    return Narration(sentences=tuple(sentences), rows=rows, title=V.gains_title(by_w), claims=claims)


def ablation_table(rec: SectionRecord, workload: str):
    return V.cells_table(rec.values["cells"][workload], compare.gains_from_record(rec)[workload], workload)


def ablation_figure(rec: SectionRecord):
    by_w = compare.gains_from_record(rec)
    return V.gains_figure({w: rec.values["cells"][w] for w in by_w}, by_w)


# ----------------------------------------------------------------------------- §2.1 4-bit weights

def int4_narration(rec: SectionRecord) -> Narration:
    tpot, ttft, by_w, agreement = R.int4_from_record(rec)
    v = rec.values
    sentences = quant4.sentences_from(tpot, ttft, by_w, agreement, v["tokens"], v["batched"], v["single"])
    rows = tuple((name, "—" if x is None else f"{x.ratio:.2f}×", "" if x is None else x.confidence_label)
                 for name, x in (("TPOT P99", tpot), ("TTFT P99", ttft)))
    return Narration(sentences=tuple(sentences), rows=rows,
                     title=t(f"4 位权重（{v['single']} 负载）：TPOT P99 {rows[0][1]}，TTFT P99 {rows[1][1]}（÷ 基线）",
                             f"4-bit weights ({v['single']}): TPOT P99 {rows[0][1]}, TTFT P99 {rows[1][1]} (over the baseline)"),
                     claims={"int4_tpot": _claim(tpot), "int4_ttft": _claim(ttft),
                             "int4_identical": f"{agreement.num_identical}/{agreement.num_prompts}"})


# ----------------------------------------------------------------------------- §5 diagnosis

def diagnose_narration(rec: SectionRecord) -> Narration:
    points = R.diagnose_from_record(rec)
    hi = points[-1]
    saturates = (hi.preemptions or 0) > 0 or (hi.peak_kv_usage or 0) >= 0.95
    return Narration(sentences=tuple(diagnose.diagnosis_sentences(points, busy=rec.busy)),
                     rows=tuple(tuple(x) for x in V.diagnosis_table(points).rows), title=V.diagnosis_title(points),
                     claims={"kv_saturates_first": "yes" if saturates else "no",
                             "host_share_low": "yes" if hi.host_share < diagnose.HOST_SHARE_LOW else "no"})


def diagnose_table(rec: SectionRecord):
    return V.diagnosis_table(R.diagnose_from_record(rec))


def diagnose_figure(rec: SectionRecord):
    return V.diagnosis_figure(R.diagnose_from_record(rec))
