"""Lab 04's measuring sections as records (``labkit.labs.common.records``): the k sweep, the workload
matrix and the batch sizes are saved as the rows they measured (every round, every verdict, the machine),
and read back as the same rows, so each table, figure and sentence of those sections can be rendered from a
record made here or on another CPU (``rows_from_record`` then the ``views`` functions). The live demo
(§2), the lossless checks (§6: greedy and sampling) and the TPOT/ITL stream (§7) are saved the same way and narrated by
``narration``.

    save_record(sweep_record(SWEEP, sweep))        # in the lab, after measuring
    rows_from_record(load_record(path))            # anywhere: the rows the views render
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from labkit.labs.common.measure import Verdict
from labkit.labs.common.records import RunContext, SectionRecord, verdict_from_dict, verdict_to_dict
from labkit.labs.lab04_speculative.latency import StreamTimes
from labkit.labs.lab04_speculative.live import LabelledToken, SpecStep, summarize
from labkit.labs.lab04_speculative.lossless import SampleTest
from labkit.labs.lab04_speculative.speedup import Row
from labkit.labs.lab04_speculative.sweeps import BatchRow

SWEEP, MATRIX, BATCH = "3-sweep", "4-matrix", "5-batch"
_VERDICTS = ("verdict", "verify_verdict")


def _key(row: Row) -> str:
    return f"{row.workload}/{row.name.replace(' ', '_')}"


def row_to_dict(row: Row) -> dict[str, Any]:
    d = {f.name: getattr(row, f.name) for f in dataclasses.fields(Row) if f.name not in _VERDICTS}
    for name in _VERDICTS:
        v = getattr(row, name)
        d[name] = None if v is None else verdict_to_dict(v)
    return d


def row_from_dict(d: dict[str, Any]) -> Row:
    known = {f.name for f in dataclasses.fields(Row)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"lab 04 row record has unknown field(s) {unknown}")
    kw = dict(d)
    for name in ("drafted", "round_speedups", "round_verify_costs"):
        kw[name] = tuple(kw.get(name) or ())
    for name in _VERDICTS:
        kw[name] = None if kw.get(name) is None else verdict_from_dict(kw[name])
    return Row(**kw)


def rows_record(section: str, rows: list[Row], context: RunContext | None = None) -> SectionRecord:
    """A section of plain rows (the k sweep, the matrix): each row whole, its rounds and verdicts by key."""
    return SectionRecord(lab="04", section=section, context=context or RunContext.current(),
                         rounds={_key(r): {"speedup": list(r.round_speedups), "verify_cost": list(r.round_verify_costs)}
                                 for r in rows},
                         values={"rows": [row_to_dict(r) for r in rows]},
                         verdicts={_key(r): r.verdict for r in rows if r.verdict is not None})


def rows_from_record(rec: SectionRecord) -> list[Row]:
    return [row_from_dict(d) for d in rec.values["rows"]]


def batch_record(rows: list[BatchRow], context: RunContext | None = None) -> SectionRecord:
    return SectionRecord(lab="04", section=BATCH, context=context or RunContext.current(),
                         rounds={str(b.batch): {"speedup": list(b.row.round_speedups),
                                                "plain_step_s": list(b.plain_step_rounds)} for b in rows},
                         values={"rows": [{"batch": b.batch, "plain_step_s": b.plain_step_s, "spec_step_s": b.spec_step_s,
                                           "plain_step_rounds": list(b.plain_step_rounds), "row": row_to_dict(b.row)}
                                          for b in rows]},
                         verdicts={str(b.batch): b.row.verdict for b in rows if b.row.verdict is not None})


def batch_from_record(rec: SectionRecord) -> list[BatchRow]:
    return [BatchRow(d["batch"], row_from_dict(d["row"]), d["plain_step_s"], d["spec_step_s"],
                     tuple(d.get("plain_step_rounds") or ())) for d in rec.values["rows"]]


# ----------------------------------------------------------------------------- §2, §6 and §7

LIVE, GREEDY, SAMPLING, LATENCY = "2-live", "6-greedy", "6-sampling", "7-latency"


def live_record(steps: list[SpecStep], method: str, k: int, workload: str,
                context: RunContext | None = None) -> SectionRecord:
    """§2: one request decoded step by step, every token with its label (counted, not timed: the same
    counts on a busy machine). The verdict compares tokens per decode step with plain decoding's one."""
    summary = summarize(steps)
    return SectionRecord(lab="04", section=LIVE, context=context or RunContext.current(),
                         rounds={"drafted": [s.drafted for s in steps], "accepted": [s.accepted for s in steps],
                                 "emitted": [len(s.emitted) for s in steps]},
                         values={"method": method, "k": k, "workload": workload,
                                 "steps": [{"step": s.step, "drafted": s.drafted, "accepted": s.accepted,
                                            "tokens": [[x.token_id, x.kind, x.position] for x in s.tokens]}
                                           for s in steps]},
                         verdicts={"tokens_per_step": Verdict.exact(summary.tokens_per_step, id="live/tokens_per_step",
                                                                    claim=("每个解码步产出的 token ÷ 普通解码的 1 个",
                                                                           "tokens per decode step over plain decoding's one"))})


def live_from_record(rec: SectionRecord) -> list[SpecStep]:
    return [SpecStep(d["step"], d["drafted"], d["accepted"],
                     tuple(LabelledToken(tid, kind, pos) for tid, kind, pos in d["tokens"])) for d in rec.values["steps"]]


@dataclass(frozen=True)
class RunIdentity:
    """What §6's greedy count needs of a speculative run: which one it was and how many of its runs
    gave plain greedy's tokens ("same/total")."""

    method: str
    workload: str
    k: int
    identical: str

    @property
    def all_identical(self) -> bool:
        same, total = self.identical.split("/")
        return same == total


# the tables §6 counts over, in the order the lab shows them
GREEDY_GROUPS = {"sweep": ("k 扫描", "k sweep"), "paying": ("3.1 候选目标", "3.1 candidate targets"),
                 "matrix": ("流量矩阵", "workload matrix"), "batch": ("批大小", "batch sizes")}


def greedy_record(greedy: dict[str, list], context: RunContext | None = None) -> SectionRecord:
    """§6, greedy: the count over every speculative table (``greedy``: group id of ``GREEDY_GROUPS`` ->
    rows with ``method``, ``workload``, ``k``, ``identical``)."""
    unknown = sorted(set(greedy) - set(GREEDY_GROUPS))
    if unknown:
        raise ValueError(f"unknown greedy group(s) {unknown}; expected some of {list(GREEDY_GROUPS)}")
    runs = {g: [{"method": r.method, "workload": r.workload, "k": r.k, "identical": r.identical} for r in rows]
            for g, rows in greedy.items()}
    return SectionRecord(lab="04", section=GREEDY, context=context or RunContext.current(),
                         rounds={g: [r["identical"] for r in rows] for g, rows in runs.items()}, values={"greedy": runs})


def greedy_from_record(rec: SectionRecord) -> dict[str, list[RunIdentity]]:
    return {g: [RunIdentity(**d) for d in rows] for g, rows in rec.values["greedy"].items()}


def sampling_record(test: SampleTest, labels: list[str], *, k: int, temperature: float,
                    context: RunContext | None = None) -> SectionRecord:
    """§6, sampling: the two samples' counts per token column, each column's decoded label, chi-square and p."""
    if len(labels) != len(test.categories):
        raise ValueError(f"labels: {len(labels)} given for {len(test.categories)} token columns")
    return SectionRecord(lab="04", section=SAMPLING, context=context or RunContext.current(),
                         rounds={"plain_counts": list(test.plain_counts), "spec_counts": list(test.spec_counts)},
                         values={"categories": list(test.categories), "labels": list(labels), "chi2": test.chi2,
                                 "dof": test.dof, "p_value": test.p_value, "k": k, "temperature": temperature})


def sampling_from_record(rec: SectionRecord) -> tuple[SampleTest, list[str]]:
    v = rec.values
    test = SampleTest(tuple(v["categories"]), tuple(rec.rounds["plain_counts"]), tuple(rec.rounds["spec_counts"]),
                      v["chi2"], v["dof"], v["p_value"])
    return test, list(v["labels"])


def _times(s: StreamTimes) -> dict[str, Any]:
    return {"ttft_s": s.ttft_s, "chunk_times": list(s.chunk_times), "chunk_sizes": list(s.chunk_sizes)}


def latency_record(plain: StreamTimes, spec: StreamTimes, *, method: str, k: int,
                   context: RunContext | None = None) -> SectionRecord:
    """§7: one request streamed plain and speculative, every chunk's arrival (wall clock) and size. The
    verdict is on mean ITL / TPOT, which is (tokens − 1) / (chunks − 1): counted, exact on any machine."""
    return SectionRecord(lab="04", section=LATENCY, context=context or RunContext.current(),
                         rounds={"plain_chunk_times": list(plain.chunk_times), "spec_chunk_times": list(spec.chunk_times)},
                         values={"plain": _times(plain), "spec": _times(spec), "method": method, "k": k},
                         verdicts={"itl_over_tpot": Verdict.exact(spec.itl_over_tpot, id="latency/itl_over_tpot",
                                                                  claim=("ITL 均值 ÷ TPOT", "mean ITL over TPOT"))})


def latency_from_record(rec: SectionRecord) -> tuple[StreamTimes, StreamTimes]:
    def times(d):
        return StreamTimes(d["ttft_s"], tuple(d["chunk_times"]), tuple(d["chunk_sizes"]))
    return times(rec.values["plain"]), times(rec.values["spec"])
