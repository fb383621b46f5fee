"""Reading the ablation: gains against the baseline, rankings per workload, and the sentences a lab
prints about them (rendered from verdicts: each gain's rounds decide whether it is clear, within
noise, or measured on a busy machine)."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.i18n import t
from labkit.labs.common.measure import Verdict, cores, describe_machine, verdict_from_ratios
from labkit.labs.lab05_engine_choice.ablation import AblationRow

MARGIN = 0.05     # a gain within 5 % of 1 is "level with the baseline"


@dataclass(frozen=True)
class Gain:
    variant: str
    zh: str
    en: str
    throughput_x: float          # output tokens per CPU second ÷ the baseline's
    ttft_p99_x: float | None     # P99 TTFT ÷ the baseline's (below 1 = better)
    memory_x: float              # weights + peak KV ÷ the baseline's
    verdict: Verdict | None = None   # on throughput_x, from the paired rounds


def throughput_verdict(row: AblationRow, base: AblationRow) -> Verdict:
    """Tokens per CPU second of ``row`` over ``base``, round by round (rows measured together)."""
    mine, theirs = row.round_tokens_per_cpu_s, base.round_tokens_per_cpu_s
    ratios = [a / b for a, b in zip(mine, theirs) if b > 0] or [row.tokens_per_cpu_s / base.tokens_per_cpu_s]
    spreads = [max(v) / min(v) for v in (mine, theirs) if len(v) > 1 and min(v) > 0]
    loads = [x for x in (*row.load, *base.load) if x is not None]
    return verdict_from_ratios(ratios, ratio=row.tokens_per_cpu_s / base.tokens_per_cpu_s, margin=MARGIN,
                               load=max(loads, default=None), cores=cores(), spread=max(spreads, default=None),
                               quantity="speed", clock="CPU time (time.process_time)", cpu=describe_machine(),
                               load_before=row.load[0], load_after=row.load[1],
                               id=f"ablation/{row.workload}/{row.variant.name}",
                               claim=(f"{row.variant.zh}：每 CPU 秒输出 token ÷ 基线（{row.workload}）",
                                      f"{row.variant.en}: output tokens per CPU s over the baseline ({row.workload})"))


def gains(rows: list[AblationRow], workload: str) -> list[Gain]:
    """Every measured variant of ``workload`` against its baseline (the row named "baseline")."""
    mine = [r for r in rows if r.workload == workload and r.available]
    base = next((r for r in mine if r.variant.name == "baseline"), None)
    if base is None:
        raise ValueError(f"workload {workload!r} has no measured baseline row")
    out = []
    for r in mine:
        if r.variant.name == "baseline":
            continue
        ttft = (r.metrics.ttft.p99_ms / base.metrics.ttft.p99_ms
                if r.metrics.ttft.p99_ms and base.metrics.ttft.p99_ms else None)
        out.append(Gain(r.variant.name, r.variant.zh, r.variant.en, r.tokens_per_cpu_s / base.tokens_per_cpu_s,
                        ttft, r.memory_bytes / base.memory_bytes, throughput_verdict(r, base)))
    return out


def ranking(rows: list[AblationRow], workload: str) -> list[str]:
    """Variant names from the largest throughput gain to the smallest."""
    return [g.variant for g in sorted(gains(rows, workload), key=lambda g: -g.throughput_x)]


def ranking_sentence(rows: list[AblationRow], a: str, b: str) -> str:
    """Whether the two workloads rank the optimisations differently, and which one moved most."""
    ra, rb = ranking(rows, a), ranking(rows, b)
    common = [v for v in ra if v in rb]
    if not common:
        return t("两个负载没有共同的已测变体。", "The two workloads share no measured variant.")
    moved = max(common, key=lambda v: abs(ra.index(v) - rb.index(v)))
    shift = abs(ra.index(moved) - rb.index(moved))
    if ra == rb:
        return t(f"这次两个负载的排序相同（首位都是 {ra[0]}）：本次测量没有显出差别，噪声也可能掩盖了它；再跑一次或加大负载。",
                 f"This time both workloads rank the variants the same (both led by {ra[0]}): this run shows no "
                 "difference, or noise hid it; run again or enlarge the workload.")
    move_zh = f"变化最大的是 {moved}（第 {ra.index(moved) + 1} 位 → 第 {rb.index(moved) + 1} 位，移动 {shift} 位）"
    move_en = f"{moved} moved most (rank {ra.index(moved) + 1} → {rb.index(moved) + 1}, {shift} places)"
    if ra[0] == rb[0]:
        return t(f"两个负载的首位相同（都是 {ra[0]}），后面的排序不同：{move_zh}。",
                 f"Both workloads are led by {ra[0]}, but the rest rank differently: {move_en}.")
    return t(f"两个负载的排序不同：{a} 的首位是 {ra[0]}，{b} 的首位是 {rb[0]}；{move_zh}。",
             f"The two workloads rank the variants differently: {a} is led by {ra[0]}, {b} by {rb[0]}; {move_en}.")


def plain_table(rows: list[AblationRow], workload: str) -> list[dict]:
    """The measured table as plain dicts (what the exercise hands to the learner's function)."""
    return [{"variant": r.variant.name, "tokens_per_cpu_s": round(r.tokens_per_cpu_s, 3),
             "tpot_p99_ms": None if r.metrics.tpot.p99_ms is None else round(r.metrics.tpot.p99_ms, 3),
             "memory_mib": round(r.memory_bytes / 2**20, 3)}
            for r in rows if r.workload == workload and r.available]


def gain_of(rows: list[AblationRow], workload: str, variant: str) -> float | None:
    """Throughput gain (tokens per CPU second ÷ the baseline's) of one variant; None if not measured."""
    found = [g for g in gains(rows, workload) if g.variant == variant]
    return found[0].throughput_x if found else None


def verdict_of(rows: list[AblationRow], workload: str, variant: str) -> Verdict | None:
    """The throughput verdict of one variant against the baseline; None if not measured."""
    found = [g for g in gains(rows, workload) if g.variant == variant]
    return found[0].verdict if found else None


def record_gains(rows: list[AblationRow], workloads: list[str], lab: str = "05") -> None:
    """Every gain's verdict into the learner's results/lab05.json."""
    from labkit.labs.common.measure import record_verdict

    for w in workloads:
        for g in gains(rows, w):
            record_verdict(lab, g.verdict, memory_x=g.memory_x, ttft_p99_x=g.ttft_p99_x)


def gain_sentence(name: str, gain: Verdict | float | None) -> str:
    """"X 是基线的 1.23 倍", hedged by the verdict (a bare number counts as one round: within noise)."""
    if gain is None:
        return t(f"{name}：本次没有测。", f"{name}: not measured in this run.")
    v = gain if isinstance(gain, Verdict) else verdict_from_ratios([gain], margin=MARGIN)
    return v.sentence(
        greater=(f"{name} 的每 CPU 秒吞吐是基线的 {{ratio}}", f"{name} yields {{ratio}} the baseline's tokens per CPU second"),
        same=(f"{name} 的每 CPU 秒吞吐是基线的 {{ratio}}：与基线持平", f"{name} yields {{ratio}} the baseline's tokens per CPU second: level with it"),
        less=(f"{name} 的每 CPU 秒吞吐是基线的 {{ratio}}——在这个负载上它是负收益（付出代价而没有换来吞吐）",
              f"{name} yields {{ratio}} the baseline's tokens per CPU second: on this workload it costs more than it buys"))
