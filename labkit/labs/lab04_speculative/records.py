"""Lab 04's measuring sections as records (``labkit.labs.common.records``): the k sweep, the workload
matrix and the batch sizes are saved as the rows they measured (every round, every verdict, the machine),
and read back as the same rows, so each table, figure and sentence of those sections can be rendered from a
record made here or on another CPU (``rows_from_record`` then the ``views`` functions).

    save_record(sweep_record(SWEEP, sweep))        # in the lab, after measuring
    rows_from_record(load_record(path))            # anywhere: the rows the views render
"""

from __future__ import annotations

import dataclasses
from typing import Any

from labkit.labs.common.records import RunContext, SectionRecord, verdict_from_dict, verdict_to_dict
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
