"""Lab 05's measuring sections as records (``labkit.labs.common.records``): §1.3 (fixed shapes), §2.1
(4-bit weights) and §5 (diagnosis); §2's gains and table rows are ``compare.gains_record``. Each is
saved with its rounds and the machine, and read back as the values the lab's views draw, so every table,
figure and sentence of those sections renders from a record made here or on another CPU (``narration``).

    save_record(fixed_record(fixed))            # in the lab, after measuring
    fixed_from_record(load_record(path))        # anywhere: the FixedShapeResult the views render
"""

from __future__ import annotations

from labkit.labs.common.measure import ArmValues, Comparison, Verdict
from labkit.labs.common.records import RunContext, SectionRecord
from labkit.labs.lab05_engine_choice.ablation import AblationRow
from labkit.labs.lab05_engine_choice.compare import Gain, gains
from labkit.labs.lab05_engine_choice.diagnose import LoadPoint, Sample
from labkit.labs.lab05_engine_choice.fixed_shapes import FixedShapeResult
from labkit.model.agreement import Agreement

FIXED, INT4, DIAGNOSE = "1.3-fixed-shapes", "2.1-int4", "5-diagnose"


# ----------------------------------------------------------------------------- §1.3 fixed shapes

def fixed_record(r: FixedShapeResult, context: RunContext | None = None) -> SectionRecord:
    c = r.comparison
    return SectionRecord(
        lab="05", section=FIXED, context=context or RunContext.current(),
        rounds={name: {"values": list(a.values), "seconds": list(a.seconds), "units": list(a.units)}
                for name, a in c.arms.items()},
        values={"buckets": list(r.buckets), "trace": list(r.trace), "num_layers": r.num_layers,
                "padding_waste": r.padding_waste, "build_s": dict(r.build_s), "new_batch": r.new_batch,
                "rebuild_s": dict(r.rebuild_s), "max_abs_diff": r.max_abs_diff,
                "best": {name: a.best for name, a in c.arms.items()},
                "comparison": {"baseline": c.baseline, "order": [list(o) for o in c.order], "quantity": c.quantity,
                               "clock": c.clock, "load_before": c.load_before, "load_after": c.load_after,
                               "cores": c.cores, "cpu": c.cpu}},
        verdicts=dict(c.verdicts))


def fixed_from_record(rec: SectionRecord) -> FixedShapeResult:
    v, c = rec.values, rec.values["comparison"]
    arms = {name: ArmValues(name, tuple(d["values"]), tuple(d["seconds"]), tuple(d["units"]), v["best"][name])
            for name, d in rec.rounds.items()}
    comparison = Comparison(arms, c["baseline"], {name: rec.verdict(name) for name in rec.verdicts},
                            tuple(tuple(o) for o in c["order"]), {}, c["quantity"], c["clock"], c["load_before"],
                            c["load_after"], c["cores"], c["cpu"])
    return FixedShapeResult(tuple(v["buckets"]), tuple(v["trace"]), v["num_layers"], v["padding_waste"],
                            dict(v["build_s"]), comparison, v["new_batch"], dict(v["rebuild_s"]), v["max_abs_diff"])


# ----------------------------------------------------------------------------- §2.1 4-bit weights

def int4_record(rows: list[AblationRow], batched: str, single: str, agreement: Agreement, tokens: int,
                context: RunContext | None = None) -> SectionRecord:
    """The int4 row read out of §2 (its phase verdicts on ``single``, its throughput gains on both
    workloads, its memory) and the greedy agreement with fp32 measured in §2.1."""
    from labkit.labs.lab05_engine_choice.quant4 import phase_verdicts

    tpot, ttft = phase_verdicts(rows, single)
    by_w = {w: next((g for g in gains(rows, w) if g.variant == "int4"), None) for w in (single, batched)}
    verdicts = {name: v for name, v in (("tpot", tpot), ("ttft", ttft)) if v is not None}
    verdicts.update({f"throughput/{w}": g.verdict for w, g in by_w.items() if g is not None and g.verdict is not None})
    return SectionRecord(
        lab="05", section=INT4, context=context or RunContext.current(),
        rounds={name: [v.ratio_min, v.ratio_max] for name, v in verdicts.items()},
        values={"single": single, "batched": batched, "tokens": tokens,
                "memory_x": {w: g.memory_x for w, g in by_w.items() if g is not None},
                "agreement": {"num_prompts": agreement.num_prompts, "num_identical": agreement.num_identical,
                              "mean_first_divergence": agreement.mean_first_divergence,
                              "divergences": list(agreement.divergences)}},
        verdicts=verdicts)


def int4_from_record(rec: SectionRecord) -> tuple[Verdict | None, Verdict | None, dict[str, Gain | None], Agreement]:
    """(TPOT verdict, TTFT verdict, int4 gain per workload, agreement)."""
    v = rec.values
    def maybe(name):
        return rec.verdict(name) if name in rec.verdicts else None
    by_w = {}
    for w in (v["single"], v["batched"]):
        verdict = maybe(f"throughput/{w}")
        by_w[w] = None if verdict is None else Gain("int4", "", "", verdict.ratio, None, v["memory_x"][w], verdict)
    a = v["agreement"]
    return (maybe("tpot"), maybe("ttft"), by_w,
            Agreement(a["num_prompts"], a["num_identical"], a["mean_first_divergence"], tuple(a["divergences"])))


# ----------------------------------------------------------------------------- §5 diagnosis

POINT_FIELDS = ("concurrency", "peak_kv_usage", "preemptions", "peak_waiting", "host_s", "model_s", "output_tok_s")


def diagnose_record(points: list[LoadPoint], context: RunContext | None = None) -> SectionRecord:
    """Every load level: the server's metrics, the engine's host and model time, and the /metrics samples."""
    return SectionRecord(
        lab="05", section=DIAGNOSE, context=context or RunContext.current(),
        rounds={str(p.concurrency): [[s.t_s, s.kv_usage, s.preemptions, s.running, s.waiting] for s in p.samples]
                for p in points},
        values={"points": [{f: getattr(p, f) for f in POINT_FIELDS} for p in points]})


def diagnose_from_record(rec: SectionRecord) -> list[LoadPoint]:
    return [LoadPoint(**d, samples=tuple(Sample(*s) for s in rec.rounds.get(str(d["concurrency"]), [])))
            for d in rec.values["points"]]
