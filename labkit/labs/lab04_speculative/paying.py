"""Where speculation pays: one measured row in the regime where Leviathan's formula comes true.

Sections 3–5 run an fp32 target on the CPU, where verifying k + 1 rows costs several plain steps and
the textbook's "verification is one ordinary step" does not hold. The regime the formula was written
for needs a target whose multi-row step costs about one plain step:

    bf16 target, on a CPU with AMX (the matrix units take 16 rows for the price of one)   → preferred
    the GGUF's 4-bit codes (weights="q4_1"), otherwise: a decode step reads a fifth of the bytes

and two pairs that suit each other: n-gram prompt lookup on copy-heavy edits, and the target's own
4-bit copy drafting for open chat (skipped with a q4_1 target: the copy would cost what the target
costs, and ``EngineConfig`` refuses the pair). Each row is timed by ``measure.compare`` (plain and
speculative interleaved in rounds, decode steps only) and printed beside both predictions: the
textbook formula at the measured α and c, and the formula with the measured proposal rate and verify
cost (``speedup.Row.adjusted_prediction``).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.i18n import t
from labkit.kernels.cpu_features import has_amx
from labkit.labs.common.measure import Comparison, Sample, Verdict, compare
from labkit.labs.lab04_speculative.speedup import Row, aggregate, run_one
from labkit.labs.lab04_speculative.sweeps import LAB_CONFIG, Engines, engine_name
from labkit.labs.lab04_speculative.views import workload_label
from labkit.report.tables import Table

PAIRS = (("ngram", "copy"), ("int4", "chat"))     # (method, workload) that suit each other


@dataclass(frozen=True)
class PayingTarget:
    name: str            # "bf16" or "q4_1"
    zh: str
    en: str
    config: dict         # EngineConfig overrides for ``sweeps.Engines``

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The (method, workload) rows this target can run (a q4_1 target has no cheaper 4-bit copy)."""
        return tuple(p for p in PAIRS if not (self.name == "q4_1" and p[0] == "int4"))


def choose_target(amx: bool | None = None) -> PayingTarget:
    """bf16 where the CPU has AMX (its matrix units make a few more rows nearly free), else q4_1."""
    if has_amx() if amx is None else amx:
        return PayingTarget("bf16", "bf16 目标模型（这台 CPU 有 AMX）", "bf16 target (this CPU has AMX)",
                            {**LAB_CONFIG, "dtype": "bfloat16"})
    return PayingTarget("q4_1", "4 位权重的目标模型（weights=\"q4_1\"，这台 CPU 没有 AMX）",
                        "4-bit target (weights=\"q4_1\"; this CPU has no AMX)", {**LAB_CONFIG, "weights": "q4_1"})


@dataclass(frozen=True)
class PayingRow:
    target: str
    method: str
    workload: str
    k: int
    row: Row                     # α, c, verify cost, both predictions, output identical (speedup.aggregate)
    comparison: Comparison       # plain vs speculative decode speed, interleaved rounds

    @property
    def verdict(self) -> Verdict:
        return self.comparison.verdict

    @property
    def measured(self) -> float:
        """Decode speed-up: speculative tokens per second over plain's (best rounds)."""
        return self.comparison.ratio


def _arm(engines: Engines, name: str, prompts: list[list[int]], max_tokens: int, log: list) -> callable:
    method, _, k = name.partition(" k=")
    llm = engines.get(method, int(k or 0))

    def run() -> Sample:
        stats = [run_one(llm, p, max_tokens, engines.timed(name)) for p in prompts]
        log.append(stats)
        return Sample(sum(s.decode_s for s in stats), sum(s.decode_tokens for s in stats), stats)
    return run


def measure_pair(engines: Engines, target: str, method: str, workload: str, k: int, num_prompts: int,
                 max_tokens: int, rounds: int, lab: str | None = None) -> PayingRow:
    """One row: plain and ``method`` at ``k`` serve the same prompts, one at a time, in rounds."""
    name = engine_name(method, k)
    prompts = engines.encode(workload, num_prompts)
    logs: dict[str, list] = {"plain": [], name: []}
    arms = {n: _arm(engines, n, prompts, max_tokens, logs[n]) for n in ("plain", name)}
    comparison = compare(arms, baseline="plain", rounds=rounds, warmup=1, quantity="speed",
                         id=f"paying_{target}_{method}_{workload}",
                         claim=(f"{target} 目标上 {method} 的加速比（{workload}）", f"{method} speed-up on a {target} "
                                f"target ({workload})"), lab=lab)
    paired = [{"plain": p, name: s} for plain_run, spec_run in zip(logs["plain"][1:], logs[name][1:])
              for p, s in zip(plain_run, spec_run)]           # warm-up round dropped, as compare does
    return PayingRow(target, method, workload, k, aggregate(workload, name, paired), comparison)


def paying_rows(target: PayingTarget, k: int, num_prompts: int, max_tokens: int, rounds: int,
                lab: str | None = None, engines: Engines | None = None) -> list[PayingRow]:
    engines = engines or Engines(target.config)
    return [measure_pair(engines, target.name, m, w, k, num_prompts, max_tokens, rounds, lab) for m, w in target.pairs()]


# ------------------------------------------------------------------------------------ reading them

def within(measured: float, predicted: float | None) -> float | None:
    """|measured − predicted| / predicted (None without a prediction)."""
    return None if predicted is None or predicted <= 0 else abs(measured - predicted) / predicted


def row_sentence(r: PayingRow, warn: bool = True) -> str:
    """The verdict's sentence, then how close each prediction came (counted from the numbers).
    ``warn=False``: a busy machine's long warning is left to ``row_sentences`` (once per section)."""
    label, workload = METHOD_NAMES[r.method], workload_label(r.workload)
    head = r.verdict.sentence(warn=warn,
        greater=(f"{label[0]} 在{workload}上让解码变快了：加速比 {{ratio}}",
                 f"{label[1]} speeds up decoding on {workload}: {{ratio}}"),
        less=(f"{label[0]} 在{workload}上让解码变慢了：加速比只有 {{ratio}}",
              f"{label[1]} slows decoding on {workload}: only {{ratio}}"),
        same=(f"{label[0]} 在{workload}上与普通解码一样快（{{ratio}}）",
              f"{label[1]} decodes {workload} as fast as plain ({{ratio}})"))
    zh, en = [], []
    for name_zh, name_en, pred in (("教科书公式", "the textbook formula", r.row.prediction),
                                   ("按实测验证代价修正的公式", "the formula with the measured verify cost",
                                    r.row.adjusted_prediction)):
        gap = within(r.measured, pred)
        if gap is not None:
            zh.append(f"{name_zh}预测 {pred:.2f}×，实测与它相差 {100 * gap:.0f}%")
            en.append(f"{name_en} predicted {pred:.2f}x, {100 * gap:.0f}% from the measurement")
    if not zh:
        return head
    return f"{head} " + t("；".join(zh) + "。", "; ".join(en).capitalize() + ".")


def row_sentences(rows: list[PayingRow]) -> list[str]:
    """Every row's sentence, and one busy-machine warning for the section when any row needs it."""
    from labkit.labs.common.measure import busy_warning

    warning = busy_warning([r.verdict for r in rows])
    return [row_sentence(r, warn=False) for r in rows] + ([warning] if warning else [])


METHOD_NAMES = {"ngram": ("n-gram", "n-gram"), "int4": ("4 位副本草稿", "the 4-bit copy")}


def paying_table(rows: list[PayingRow]) -> Table:
    body = []
    for r in rows:
        v = r.verdict
        body.append([r.target, t(*METHOD_NAMES[r.method]), workload_label(r.workload), r.k, _f(r.row.alpha), f"{r.row.c:.3f}",
                     f"{r.row.verify_cost:.2f}", _x(r.row.prediction), _x(r.row.adjusted_prediction),
                     f"{r.measured:.2f}× ({v.ratio_min:.2f}–{v.ratio_max:.2f})",
                     v.confidence_label, r.row.identical])
    return Table([t("目标", "target"), t("方法", "method"), t("流量", "workload"), "k", "α", "c", t("验证代价", "verify cost"),
                  t("教科书预测", "textbook prediction"), t("修正后预测", "adjusted prediction"),
                  t("实测加速比（各轮范围）", "measured speed-up (round range)"), t("把握", "confidence"),
                  t("输出相同", "identical")], body,
                 caption=t("投机付得起的区间：本机实测的一行，旁边是两种预测", "Where speculation pays: measured rows beside both predictions"),
                 notes=[t(f"计时：{rows[0].comparison.clock}，普通与投机交替轮次，只计解码步。", f"Clock: {rows[0].comparison.clock}, "
                          "plain and speculative in interleaved rounds, decode steps only.")] if rows else [])


def _f(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


# ------------------------------------------------------------------------- finding the regime (3.1)
#
# The regime where "verification is nearly free" is not assumed from the CPU's name: every candidate
# target is measured on the same pair (n-gram on copy-heavy edits) and the section says which one, if
# any, verified k + 1 rows for about the price of one plain step, in every round. The record
# (``labkit.labs.common.records``) holds the rounds; the table, the sentences and the choice are
# rendered from it alone (``render_regime``), so a record from another CPU renders the same way.

FREE_VERIFY = 1.15          # "nearly free": a verify step within 15 % of a plain step in every round
SECTION = "3.1-paying"
CANDIDATES = (
    PayingTarget("fp32", "fp32 目标模型（第 3 节的目标）", "fp32 target (section 3's)",
                 {**LAB_CONFIG, "dtype": "float32"}),
    PayingTarget("bf16", "bf16 目标模型（矩阵乘用 bf16）", "bf16 target (bf16 matrix products)",
                 {**LAB_CONFIG, "dtype": "bfloat16"}),
    PayingTarget("q4_1", "4 位权重的目标模型（weights=\"q4_1\"，解码一步读约五分之一的字节）",
                 "4-bit target (weights=\"q4_1\": a decode step reads about a fifth of the bytes)",
                 {**LAB_CONFIG, "weights": "q4_1"}),
)
TARGET_NAMES = {c.name: (c.zh, c.en) for c in CANDIDATES}


def measure_candidates(k: int, num_prompts: int, max_tokens: int, rounds: int, lab: str | None = "04",
                       candidates=CANDIDATES, engines: dict[str, Engines] | None = None) -> list[PayingRow]:
    """The same pair (n-gram, copy-heavy edits, ``k``) on every candidate target, each timed in
    interleaved rounds against plain decoding on that target. ``engines``: targets already built (the
    lab passes its fp32 ``Engines`` so the weights load once)."""
    engines = engines or {}
    return [measure_pair(engines.get(c.name) or Engines(c.config), c.name, "ngram", "copy", k, num_prompts, max_tokens,
                         rounds, lab) for c in candidates]


def regime_record(rows: list[PayingRow], context=None):
    """The section's record: per target its rounds, its values and its speed-up verdict."""
    from labkit.labs.common.records import RunContext, SectionRecord

    rounds = {r.target: {"verify_cost": list(r.row.round_verify_costs or (r.row.verify_cost,)),
                         "speedup": list(r.row.round_speedups or (r.measured,))} for r in rows}
    values = {r.target: {"method": r.method, "workload": r.workload, "k": r.k, "alpha": r.row.alpha, "c": r.row.c,
                         "verify_cost": r.row.verify_cost, "prediction": r.row.prediction,
                         "adjusted_prediction": r.row.adjusted_prediction, "measured": r.measured,
                         "identical": r.row.identical} for r in rows}
    return SectionRecord(lab="04", section=SECTION, context=context or RunContext.current(), rounds=rounds,
                         values=values, verdicts={r.target: r.verdict for r in rows})


def nearly_free(rec, target: str) -> bool:
    """Did every round of ``target`` verify k + 1 rows within ``FREE_VERIFY`` of a plain step?"""
    costs = rec.rounds[target]["verify_cost"]
    return bool(costs) and max(costs) <= FREE_VERIFY


def found_target(rec) -> str | None:
    """The candidate whose verification was nearly free in every round (the cheapest such), or None."""
    free = [name for name in rec.values if nearly_free(rec, name)]
    return min(free, key=lambda name: rec.values[name]["verify_cost"]) if free else None


def _span(xs) -> str:
    return f"{min(xs):.2f}" if min(xs) == max(xs) else f"{min(xs):.2f}–{max(xs):.2f}"


def render_regime(rec):
    """Table rows, sentences, title and the claim ``nearly_free_target`` of section 3.1, from the record alone."""
    from labkit.labs.common.records import Narration

    found = found_target(rec)
    rows, sentences = [], []
    for name, v in rec.values.items():
        verdict = rec.verdict(name)
        costs = rec.rounds[name]["verify_cost"]
        rows.append((name, t(*METHOD_NAMES[v["method"]]), workload_label(v["workload"]), v["k"], _f(v["alpha"]),
                     f"{v['c']:.3f}", f"{v['verify_cost']:.2f} ({_span(costs)})",
                     t("是", "yes") if nearly_free(rec, name) else t("否", "no"),
                     _x(v["prediction"]), _x(v["adjusted_prediction"]),
                     f"{v['measured']:.2f}× ({verdict.ratio_min:.2f}–{verdict.ratio_max:.2f})",
                     verdict.confidence_label, v["identical"]))
    costs = "，".join(f"{n} {v['verify_cost']:.2f}" for n, v in rec.values.items())
    costs_en = ", ".join(f"{n} {v['verify_cost']:.2f}" for n, v in rec.values.items())
    busy = t("（测量时机器正忙：验证代价偏大、偏乱，这个结论不可靠）", " (measured while the machine was busy: verify "
             "costs come out larger and noisier, so this is not reliable)") if rec.busy else ""
    if found is None:
        cheapest = min(rec.values, key=lambda n: rec.values[n]["verify_cost"])
        sentences.append(t(f"在这台 CPU 上没有候选满足“验证几乎免费”（每一轮验证一步都在普通步的 {FREE_VERIFY:.2f} 倍以内）："
                           f"验证代价 {costs}，最低的是 {cheapest}。教科书公式假设的区间在这里找不到，各行的公式预测都要按实测验证代价修正{busy}。",
                           f"On this CPU no candidate met 'verification nearly free' (a verify step within {FREE_VERIFY:.2f} "
                           f"plain steps in every round): verify costs {costs_en}, the lowest {cheapest}. The regime the "
                           f"textbook formula assumes is not here; every row's prediction needs the measured verify cost{busy}."))
    else:
        v = rec.values[found]
        gap = within(v["measured"], v["prediction"])
        adjusted = within(v["measured"], v["adjusted_prediction"])
        sentences.append(t(f"在这台 CPU 上找到的“验证几乎免费”的目标：{found}（验证代价 {v['verify_cost']:.2f}，各轮 "
                           f"{_span(rec.rounds[found]['verify_cost'])}，都在 {FREE_VERIFY:.2f} 以内；所有候选：{costs}）{busy}。",
                           f"The 'verification nearly free' target found on this CPU: {found} (verify cost "
                           f"{v['verify_cost']:.2f}, rounds {_span(rec.rounds[found]['verify_cost'])}, all within "
                           f"{FREE_VERIFY:.2f}; every candidate: {costs_en}){busy}."))
        if gap is not None and adjusted is not None:
            sentences.append(t(f"在它上面，实测加速比 {v['measured']:.2f}× 与教科书公式（{v['prediction']:.2f}×）相差 {100 * gap:.0f}%，"
                               f"与按实测验证代价修正的公式（{v['adjusted_prediction']:.2f}×）相差 {100 * adjusted:.0f}%。",
                               f"There the measured {v['measured']:.2f}x is {100 * gap:.0f}% from the textbook formula "
                               f"({v['prediction']:.2f}x) and {100 * adjusted:.0f}% from the formula with the measured "
                               f"verify cost ({v['adjusted_prediction']:.2f}x)."))
    for name in rec.values:
        sentences.append(t(f"{name}：", f"{name}: ") + row_verdict_sentence(rec, name))
    title = (t(f"找到的区间：{found}", f"Regime found: {found}") if found else
             t("这台 CPU 上没有“验证几乎免费”的候选", "No 'verification nearly free' candidate on this CPU"))
    return Narration(sentences=tuple(sentences), rows=tuple(rows), title=title,
                     claims={"nearly_free_target": found or "none"})


def row_verdict_sentence(rec, name: str) -> str:
    v, verdict = rec.values[name], rec.verdict(name)
    label, workload = METHOD_NAMES[v["method"]], workload_label(v["workload"])
    return verdict.sentence(warn=False,
        greater=(f"{label[0]} 在{workload}上让解码变快了：加速比 {{ratio}}", f"{label[1]} speeds up decoding on {workload}: {{ratio}}"),
        less=(f"{label[0]} 在{workload}上让解码变慢了：加速比只有 {{ratio}}", f"{label[1]} slows decoding on {workload}: only {{ratio}}"),
        same=(f"{label[0]} 在{workload}上与普通解码一样快（{{ratio}}）", f"{label[1]} decodes {workload} as fast as plain ({{ratio}})"))


REGIME_HEADERS = (("目标", "target"), ("方法", "method"), ("流量", "workload"), ("k", "k"), ("α", "α"), ("c", "c"),
                  ("验证代价（各轮）", "verify cost (rounds)"), ("验证几乎免费？", "verification nearly free?"),
                  ("教科书预测", "textbook prediction"), ("修正后预测", "adjusted prediction"),
                  ("实测加速比（各轮范围）", "measured speed-up (round range)"), ("把握", "confidence"),
                  ("输出相同", "identical"))


def regime_table(rec) -> Table:
    narration = render_regime(rec)
    return Table([t(*h) for h in REGIME_HEADERS], [list(r) for r in narration.rows],
                 caption=t(f"寻找“验证几乎免费”的区间：n-gram、抄写式编辑，每个候选目标一行——{narration.title}",
                           f"Looking for 'verification nearly free': n-gram on copy-heavy edits, one row per candidate "
                           f"target — {narration.title}"),
                 notes=[t(f"“几乎免费”：每一轮的验证代价都 ≤ {FREE_VERIFY:.2f}（验证一步 / 普通解码一步，同一目标上交替轮次）。",
                          f"'Nearly free': every round's verify cost ≤ {FREE_VERIFY:.2f} (verify step / plain step, "
                          "interleaved rounds on the same target)."), rec.context.caption()])


def regime_sentences(rec) -> list[str]:
    narration = render_regime(rec)
    from labkit.labs.common.measure import busy_warning

    warning = busy_warning([rec.verdict(n) for n in rec.values])
    return list(narration.sentences) + ([warning] if warning else [])
