"""Reading the ablation: gains against the baseline, rankings per workload, and the sentences a lab
prints about them (rendered from verdicts: each gain's rounds decide whether it is clear, within
noise, or measured on a busy machine)."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.i18n import t
from labkit.labs.common.measure import Verdict, cores, describe_machine, verdict_from_ratios
from labkit.labs.lab05_engine_choice.ablation import AblationRow, table_cells

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


def clear_order(gains_: list[Gain]) -> list[list[Gain]]:
    """The gains whose verdicts are clear, from the largest to the smallest, grouped: a gain whose round
    range overlaps the next one's cannot be told apart from it and shares its group."""
    clear = sorted((g for g in gains_ if g.verdict is not None and g.verdict.clear), key=lambda g: -g.throughput_x)
    groups: list[list[Gain]] = []
    for g in clear:
        if groups and g.verdict.ratio_max >= min(x.verdict.ratio_min for x in groups[-1]):
            groups[-1].append(g)
        else:
            groups.append([g])
    return groups


def _ranked_text(groups: list[list[Gain]]) -> tuple[str, str]:
    def one(g: Gain, zh: bool) -> str:
        v = g.verdict
        return f"{g.zh if zh else g.en} {g.throughput_x:.2f}×（{v.ratio_min:.2f}–{v.ratio_max:.2f}）" if zh else \
            f"{g.en} {g.throughput_x:.2f}x ({v.ratio_min:.2f}-{v.ratio_max:.2f})"
    return (" > ".join(" ≈ ".join(one(g, True) for g in grp) for grp in groups),
            " > ".join(" ≈ ".join(one(g, False) for g in grp) for grp in groups))


def ranking_sentences_from_gains(by_workload: dict[str, list[Gain]]) -> list[str]:
    """Per workload, a ranking of the switches whose verdicts are clear (overlapping round ranges joined
    by ≈), or a plain "not ranked" when fewer than two are clear; then the switches clear on both
    workloads that point opposite ways. Nothing is ranked from bare point estimates."""
    lines = []
    for w, gs in by_workload.items():
        groups = clear_order(gs)
        n_clear = sum(len(g) for g in groups)
        unsure = len(gs) - n_clear
        if n_clear < 2:
            some_zh = f"只有 {n_clear} 个" if n_clear else "没有一个"
            some_en = f"only {n_clear}" if n_clear else "none"
            lines.append(t(f"{w} 负载：{len(gs)} 个开关里{some_zh}的结论是清楚的（其余在噪声之内或测量时机器正忙）：本次不排序。",
                           f"{w} workload: {some_en} of {len(gs)} switches have a clear verdict (the rest are within "
                           "noise or measured while busy): no ranking this time."))
            continue
        zh, en = _ranked_text(groups)
        tail_zh = f"；另有 {unsure} 个结论不清楚，不参与排序" if unsure else ""
        tail_en = f"; {unsure} more are not clear and are left out" if unsure else ""
        lines.append(t(f"{w} 负载，结论清楚的开关（每 CPU 秒吞吐 ÷ 基线，括号里是各轮范围；范围重叠的用 ≈ 连接）：{zh}{tail_zh}。",
                       f"{w} workload, switches with a clear verdict (tokens per CPU second over the baseline, round range "
                       f"in brackets; overlapping ranges joined by ≈): {en}{tail_en}."))
    names = list(by_workload)
    if len(names) == 2:
        a, b = (({g.variant: g for g in by_workload[w] if g.verdict is not None and g.verdict.clear}) for w in names)
        flips = [v for v in a if v in b and {a[v].verdict.direction, b[v].verdict.direction} == {"greater", "less"}]
        if flips:
            parts_zh = "；".join(f"{a[v].zh}（{names[0]} 上 {a[v].throughput_x:.2f}×，{names[1]} 上 {b[v].throughput_x:.2f}×）"
                                for v in flips)
            parts_en = "; ".join(f"{a[v].en} ({names[0]} {a[v].throughput_x:.2f}x, {names[1]} {b[v].throughput_x:.2f}x)"
                                 for v in flips)
            lines.append(t(f"同一个开关在两个负载上方向相反，而且两边都清楚：{parts_zh}。",
                           f"The same switch points opposite ways on the two workloads, clearly on both: {parts_en}."))
        else:
            lines.append(t("本次没有哪个开关在两个负载上都有清楚、方向相反的结论：排序是否随负载变，这次量不出来。",
                           "No switch has clear, opposite verdicts on the two workloads this time: whether the ranking "
                           "moves with the workload is not shown by this run."))
    return lines


def ranking_sentence(rows: list[AblationRow], a: str, b: str) -> str:
    """The rankings of the two workloads from clear verdicts only (``ranking_sentences_from_gains``)."""
    return " ".join(ranking_sentences_from_gains({a: gains(rows, a), b: gains(rows, b)}))


def lab04_draft_on_chat(summary: dict | None) -> str:
    """What lab 04 recorded for the 2-layer draft model on open chat (its training domain), from the
    learner's results/lab04.json; says so when lab 04 has not recorded it."""
    entry = ((summary or {}).get("verdicts") or {}).get(LAB04_DRAFT_CHAT)
    if not isinstance(entry, dict):
        return t("实验 04 的结果里还没有“2 层草稿模型在开放对话上”这一行：做完实验 04 第 4 节后再运行本格。",
                 "Lab 04's results hold no row for the 2-layer draft on open chat yet: run lab 04's section 4, then this cell.")
    return Verdict.from_entry(entry).sentence(
        greater=("实验 04 里，2 层草稿模型在它的训练领域（开放对话）上比普通解码快：{ratio}",
                 "In lab 04 the 2-layer draft decoded its own domain (open chat) faster than plain decoding: {ratio}"),
        less=("实验 04 里，2 层草稿模型连在它的训练领域（开放对话）上也比普通解码慢：{ratio}",
              "In lab 04 the 2-layer draft was slower than plain decoding even on its own domain (open chat): {ratio}"),
        same=("实验 04 里，2 层草稿模型在它的训练领域（开放对话）上与普通解码差不多：{ratio}",
              "In lab 04 the 2-layer draft was about as fast as plain decoding on its own domain (open chat): {ratio}"))


LAB04_DRAFT_CHAT = "speedup/chat/draft k=4"


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


# ----------------------------------------------------------------------------- section 2 as a record

ABLATION_SECTION = "2-ablation"


def gains_record(rows: list[AblationRow], workloads: list[str], context=None):
    """Section 2's gains per workload (each with its verdict and rounds) as a section record
    (``labkit.labs.common.records``): the ranking sentences render from it alone (``gains_from_record``)."""
    from labkit.labs.common.records import RunContext, SectionRecord

    by_w = {w: gains(rows, w) for w in workloads}
    return SectionRecord(
        lab="05", section=ABLATION_SECTION, context=context or RunContext.current(),
        rounds={f"{w}/{g.variant}": [g.verdict.ratio_min, g.verdict.ratio_max] for w, gs in by_w.items() for g in gs
                if g.verdict is not None},
        values={"gains": {w: [{"variant": g.variant, "zh": g.zh, "en": g.en, "throughput_x": g.throughput_x,
                               "ttft_p99_x": g.ttft_p99_x, "memory_x": g.memory_x} for g in gs] for w, gs in by_w.items()},
                "cells": {w: table_cells(rows, w) for w in workloads}},
        verdicts={f"{w}/{g.variant}": g.verdict for w, gs in by_w.items() for g in gs if g.verdict is not None})


def gains_from_record(rec) -> dict[str, list[Gain]]:
    out = {}
    by_w = rec.values["gains"] if "gains" in rec.values else rec.values     # records before the table's cells
    for w, items in by_w.items():
        out[w] = [Gain(d["variant"], d["zh"], d["en"], d["throughput_x"], d["ttft_p99_x"], d["memory_x"],
                       rec.verdict(f"{w}/{d['variant']}") if f"{w}/{d['variant']}" in rec.verdicts else None)
                  for d in items]
    return out


def ranking_from_record(rec) -> str:
    return " ".join(ranking_sentences_from_gains(gains_from_record(rec)))
