"""Lab 03 §7's tables, figure and conclusions: drawn only from what ``overhead`` measured.

Every conclusion is a verdict (``labkit.labs.common.measure``): the direction and how sure the
measurement is (clear / within noise / machine busy), rendered into a sentence, never a fixed claim.
"""

from __future__ import annotations

import statistics

import plotly.graph_objects as go

from labkit.i18n import t
from labkit.labs.common.measure import Verdict, cores, verdict_from_ratios
from labkit.labs.lab03_batching.overhead import (
    PROFILES,
    RUNGS,
    MeasuredCrossover,
    OverheadRow,
    RealAsync,
    RemedyRun,
    fit_deviation,
    fit_linear,
    measured_crossover,
    model_step_s,
)
from labkit.report.figures import COLORS, style
from labkit.report.tables import Table


def _us(s: float) -> str:
    return f"{1e6 * s:,.0f}"


def _ms(s: float) -> str:
    return f"{1e3 * s:.2f}"


# ------------------------------------------------------------------------------ host line vs each profile's step

def longer_side(values: list[float], step: float) -> str:
    """Which side is longer, judged on every round's host time: a round-by-round disagreement is said."""
    if all(v > step for v in values):
        return t("主机", "host")
    if all(v <= step for v in values):
        return t("加速器", "accelerator")
    return t("各轮不一", "rounds disagree")


def host_vs_step_table(rows: list[OverheadRow], context_len: int,
                       round_rows: list[list[OverheadRow]] | None = None) -> Table:
    """Per concurrency: the engine's host path (measured; the fastest round) beside each profile's step
    (simulated); "longer side" is judged on every round (``round_rows``; default: the rows alone)."""
    body = []
    round_rows = round_rows or [rows]
    for i, r in enumerate(rows):
        values = [rr[i].engine_host_s for rr in round_rows]
        line = [f"{r.num_running:,}", _us(r.engine_host_s), f"{1e6 * r.engine_host_s / r.num_running:.2f}"]
        for model, hw in PROFILES.values():
            step = model_step_s(r.num_running, model, hw, context_len)
            line += [_ms(step), longer_side(values, step)]
        body.append(line)
    head = [t("运行中请求", "running requests"), t("主机路径 µs/步（实测，最快一轮）", "host path µs/step (measured, fastest round)"),
            t("µs/请求", "µs per request")]
    for name in PROFILES:
        head += [t(f"{name} 步（毫秒，模拟）", f"{name} step (ms, simulated)"), t("更长的一方（每一轮）", "longer side (every round)")]
    return Table(head, body, caption=t(
        f"同一并发下：主机路径（调度 + 输入准备 + 采样 + 写回 + 统计，本机实测）vs 加速器一步（成本模型，上下文 {context_len} token）",
        f"At the same concurrency: the host path (deciding + input prep + sampling + update + stats, measured here) "
        f"vs one accelerator step (cost model, {context_len}-token context)"))


def host_vs_step_figure(rows: list[OverheadRow], context_len: int) -> go.Figure:
    xs = [r.num_running for r in rows]
    a, b = fit_linear(rows, value=lambda r: r.engine_host_s)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[1e3 * r.engine_host_s for r in rows], mode="markers",
                             name=t("主机路径（实测）", "host path (measured)"), marker=dict(color=COLORS["used"])))
    fig.add_trace(go.Scatter(x=xs, y=[1e3 * (a + b * x) for x in xs], mode="lines", line=dict(dash="dot", color=COLORS["used"]),
                             name=t("拟合 a + b·n（a ≥ 0，仅作参考）", "fit a + b·n (a ≥ 0, a guide only)")))
    for (name, (model, hw)), color in zip(PROFILES.items(), (COLORS["verify"], COLORS["prefill"])):
        fig.add_trace(go.Scatter(x=xs, y=[1e3 * model_step_s(x, model, hw, context_len) for x in xs], mode="lines+markers",
                                 name=t(f"{name} 加速器步（模拟）", f"{name} accelerator step (simulated)"), line=dict(color=color)))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return style(fig, t("主机路径 vs 加速器步，同一并发", "Host path vs accelerator step at the same concurrency"),
                 t("运行中请求数（对数）", "running requests (log)"), t("毫秒/步（对数）", "ms per step (log)"))


def crossover_text(c: MeasuredCrossover) -> str:
    """A measured crossover in words (the table's rows, interpolated between two measured points)."""
    if c.n is None:
        return t(f"在测到的范围内没有追上（到 {c.below:,} 个运行中请求，主机路径仍比加速器步短）",
                 f"not reached within the measured range (up to {c.below:,} running requests the host path is shorter)")
    if c.below is None:
        return t(f"在测到的第一个点（{c.above:,} 个运行中请求）就已经追上", f"already at the first measured point ({c.above:,} running requests)")
    return t(f"约 {c.n:,.0f} 个运行中请求（在实测的 {c.below:,} 和 {c.above:,} 之间线性插值）",
             f"about {c.n:,.0f} running requests (interpolated between the measured {c.below:,} and {c.above:,})")


def rounds_crossover_text(crossovers: list[MeasuredCrossover]) -> str:
    """The crossover read from every round: said once when the rounds agree on where it lies (the same
    measured points around it), else the disagreement, round by round."""
    brackets = {(c.below, c.above) for c in crossovers}
    if len(brackets) == 1:
        c = crossovers[0]
        if c.n is None or c.below is None or len(crossovers) == 1:
            return crossover_text(c)
        lo, hi = min(x.n for x in crossovers), max(x.n for x in crossovers)
        span = f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}–{hi:,.0f}"
        return t(f"约 {span} 个运行中请求（每一轮都在实测的 {c.below:,} 和 {c.above:,} 之间，线性插值）",
                 f"about {span} running requests (every round between the measured {c.below:,} and {c.above:,}, interpolated)")
    parts = "；".join(crossover_text(c) for c in crossovers)
    parts_en = "; ".join(crossover_text(c) for c in crossovers)
    return t(f"各轮不一致（{parts}），这次测量定不下交点", f"the rounds disagree ({parts_en}); this measurement cannot place it")


def crossover_lines(rows: list[OverheadRow], context_len: int,
                    round_rows: list[list[OverheadRow]] | None = None) -> list[str]:
    """Where the measured host path reaches each profile's step: read from every round's measured rows
    (the statistic the table's "longer side" column and the verdicts use), never from the fitted line;
    the fit is printed with how far it strays."""
    a, b = fit_linear(rows, value=lambda r: r.engine_host_s)
    n_worst, dev = fit_deviation(rows, (a, b))
    out = [t(f"主机路径拟合（截距不为负，仅作图中参考）：{1e3 * a:.3f} ms + {1e6 * b:.2f} µs × 运行中请求数；"
             f"它在 {n_worst:,} 个请求处偏离实测 {dev:+.0%}，所以交点从实测点读，不从拟合线读",
             f"host path fit (non-negative intercept, a guide in the figure only): {1e3 * a:.3f} ms + {1e6 * b:.2f} µs × "
             f"running requests; it strays {dev:+.0%} from the measurement at {n_worst:,} requests, so the crossover is "
             "read from the measured points, not the line")]
    for name, (model, hw) in PROFILES.items():
        cs = [measured_crossover(rr, model, hw, context_len) for rr in (round_rows or [rows])]
        out.append(t(f"{name}：主机路径追上加速器步：", f"{name}: the host path reaches the accelerator step: ")
                   + rounds_crossover_text(cs))
    return out


def host_vs_step_verdict(round_rows: list[list[OverheadRow]], profile: str, context_len: int, load: float | None) -> Verdict:
    """At the highest concurrency: host path over the profile's step, one ratio per measured round."""
    model, hw = PROFILES[profile]
    ratios = [rows[-1].engine_host_s / model_step_s(rows[-1].num_running, model, hw, context_len) for rows in round_rows]
    return verdict_from_ratios(ratios, load=load, cores=cores(), id=f"lab03_host_vs_step_{model}",
                               claim=(f"主机路径 ÷ {profile} 加速器步", f"host path / {profile} accelerator step"))


def host_vs_step_sentence(verdict: Verdict, profile: str, num_running: int) -> str:
    return verdict.sentence(
        greater=(f"{num_running:,} 个运行中请求时，主机路径比 {profile} 的加速器步长（{{ratio}}）：同步引擎里是 CPU 定节奏，GPU 在等",
                 f"at {num_running:,} running requests the host path is longer than {profile}'s accelerator step "
                 "({ratio}x): in a synchronous engine the CPU sets the pace and the GPU waits"),
        less=(f"{num_running:,} 个运行中请求时，{profile} 的加速器步比主机路径长（主机只占它的 {{ratio}}）：加速器是瓶颈",
              f"at {num_running:,} running requests {profile}'s accelerator step is longer than the host path "
              "(the host is {ratio}x of it): the accelerator is the bottleneck"),
        same=(f"{num_running:,} 个运行中请求时，主机路径和 {profile} 的加速器步差不多长（{{ratio}}）",
              f"at {num_running:,} running requests the host path and {profile}'s accelerator step are about equal ({{ratio}}x)"))


# ------------------------------------------------------------------------------ the remedies

def step_over_bound(run: RemedyRun, rung: str) -> list[float]:
    """Per round: that round's mean virtual step over max(that round's mean host time, the accelerator
    step): one statistic (the mean, which a collector pause moves in both), round by round (a median
    step of one round over the mean host time of another is no ratio at all). The host time here is
    the engine's; the simulated runner's own work (the model's stand-in) is on the virtual clock too, so
    a value above 1 is not all engine overhead. A run recorded without means falls back to medians."""
    model_s = run.rows[rung].model_s
    steps = run.step_means.get(rung) or run.steps[rung]
    hosts = run.host_means.get(rung) or [run.rows[rung].engine_host_mean_s or run.rows[rung].engine_host_s] * len(steps)
    return [step / max(host, model_s) for step, host in zip(steps, hosts)]


def rung_confidence(run: RemedyRun, rung: str) -> str:
    """"机器正忙" when the load was above the cores or the rung's step moved by more than ``measure``'s
    spread limit between rounds, naming which of the two it was; else how far apart the rounds were
    (the numbers of a quiet run)."""
    from labkit.labs.common.measure import DEFAULT_MAX_SPREAD

    steps = run.steps[rung]
    spread = max(steps) / min(steps) if steps and min(steps) > 0 else 1.0
    why = []
    if run.load is not None and run.load > cores():
        why.append((f"负载 {run.load:.1f}，{cores()} 个核", f"load {run.load:.1f} on {cores()} cores"))
    if spread > DEFAULT_MAX_SPREAD:
        why.append((f"各轮相差 {spread:.2f} 倍", f"rounds {spread:.2f}× apart"))
    if why:
        return t("机器正忙（" + "；".join(zh for zh, _ in why) + "）",
                 "machine busy (" + "; ".join(en for _, en in why) + ")")
    return t(f"各轮相差 {spread:.2f} 倍", f"rounds {spread:.2f}× apart")


def remedies_table(runs: list[RemedyRun], anchors: dict[str, str]) -> Table:
    body = []
    for run in runs:
        for name, r in run.rows.items():
            step = rung_step_s(run, name)
            ratios = step_over_bound(run, name)
            body.append([run.profile, f"{run.num_running:,}", rung_name(name), _us(r.engine_host_s),
                         f"{1e6 * r.engine_host_s / run.num_running:.2f}", f"{1e6 * r.engine_host_mean_s / run.num_running:.2f}",
                         _ms(r.model_s), f"{_ms(step)}（{_rounds_ms(run.steps[name])}）",
                         f"{statistics.median(ratios):.2f}（{' / '.join(f'{x:.2f}' for x in ratios)}）",
                         rung_confidence(run, name),
                         f"{min(1.0, r.model_s / step):.0%}", f"{run.num_running / step:,.0f}", anchors.get(name, "")])
    return Table([t("模型 / 硬件", "model / hardware"), t("运行中请求", "running"), t("开关（逐级叠加）", "rung (cumulative)"),
                  t("主机 µs/步（最快一步，实测）", "host µs/step (fastest step, measured)"),
                  t("µs/请求（最快一步）", "µs/request (fastest step)"),
                  t("µs/请求（均值，含 GC：推动虚拟时钟的是它）", "µs/request (mean, GC incl.: what drives the clock)"),
                  t("加速器毫秒（模拟）", "accelerator ms (sim)"),
                  t("一步毫秒（虚拟时钟，各轮中位的中位；括号里是每轮）", "step ms (virtual clock, median of the rounds' medians; each round)"),
                  t("平均一步 ÷ max(主机均值, 加速器)（逐轮相除的中位；括号里是每轮）",
                    "mean step / max(host mean, accel) (median of the per-round ratios; each round)"),
                  t("把握", "confidence"),
                  t("加速器忙碌", "accelerator busy"), t("吞吐 token/s（模拟）", "tokens/s (simulated)"),
                  t("已发表的对照", "published anchor")], body,
                 caption=t("逐个打开补救办法：主机时间在本机实测，加速器时间来自成本模型，一步的长短由虚拟时钟记录（所有主机工作都推动它）",
                           "The remedies one at a time: host time measured here, accelerator time from the cost model, the step "
                           "from the virtual clock (every piece of host work advances it)"))


RUNG_NAMES = {"per-request sampling": ("逐请求采样（per-request sampling）", "per-request sampling"),
              "+ batched sampling": ("+ 批量采样（batched sampling）", "+ batched sampling"),
              "+ persistent batch": ("+ 持久批（persistent batch）", "+ persistent batch"),
              "+ async scheduling": ("+ 异步调度（async scheduling）", "+ async scheduling")}


def rung_name(key: str) -> str:
    """A rung of ``RUNGS`` in the reader's language (the key stays the English name)."""
    return t(*RUNG_NAMES.get(key, (key, key)))


def rung_step_s(run: RemedyRun, rung: str) -> float:
    """The rung's step as the async verdict reads it: the median of each round's median virtual step."""
    return statistics.median(run.steps[rung])


def _rounds_ms(values: list[float]) -> str:
    return " / ".join(_ms(v) for v in values)


def async_verdict(run: RemedyRun, load: float | None) -> Verdict:
    """Async scheduling's step over the same engine's synchronous step (the rung below), per round; a
    rung whose median step moved by more than ``measure``'s spread limit between rounds was disturbed."""
    (sync_name, _), (async_name, _) = RUNGS[-2], RUNGS[-1]
    spread = max(max(run.steps[name]) / min(run.steps[name]) for name in (sync_name, async_name))
    return verdict_from_ratios(run.step_ratio(async_name, sync_name), load=load, cores=cores(), spread=spread,
                               id=f"lab03_async_step_{PROFILES[run.profile][0]}", claim=(f"{run.profile} 异步 ÷ 同步一步",
                                                                           f"{run.profile} async / sync step"))


def async_sentence(verdict: Verdict, run: RemedyRun) -> str:
    """The verdict's sentence, then the numbers it was computed from (the table's step column)."""
    (sync_name, _), (async_name, _) = RUNGS[-2], RUNGS[-1]
    basis = t(f"依据：一步（虚拟时钟，每轮中位）同步 {_rounds_ms(run.steps[sync_name])} ms → 异步 {_rounds_ms(run.steps[async_name])} ms，"
              f"逐轮相除；表中“一步毫秒”一列是同一组数。",
              f"Basis: the step (virtual clock, each round's median) sync {_rounds_ms(run.steps[sync_name])} ms -> async "
              f"{_rounds_ms(run.steps[async_name])} ms, divided round by round; the table's step column shows the same numbers.")
    return _async_clause(verdict, run) + " " + basis


def _async_clause(verdict: Verdict, run: RemedyRun) -> str:
    return verdict.sentence(
        greater=(f"{run.profile}：异步调度让一步变长了（{{ratio}}）", f"{run.profile}: async scheduling made the step longer ({{ratio}}x)"),
        less=(f"{run.profile}：异步调度把一步缩短到同步的 {{ratio}}（主机工作藏到了加速器的一步后面）",
              f"{run.profile}: async scheduling shortens the step to {{ratio}}x the synchronous one (host work hides behind the accelerator's step)"),
        same=(f"{run.profile}：异步调度没有改变一步的长短（{{ratio}}）：重叠只能藏起两者中较短的那个",
              f"{run.profile}: async scheduling leaves the step as it was ({{ratio}}x): overlap can only hide the shorter of the two"))


# ------------------------------------------------------------------------------ the real model

def real_async_table(real: RealAsync) -> Table:
    c = real.comparison
    body = [[name, f"{a.best:,.1f}", f"{a.median:,.1f}", " / ".join(f"{v:,.1f}" for v in a.values)] for name, a in c.arms.items()]
    return Table([t("调度", "scheduling"), t("最好 token/s", "best tokens/s"), t("中位 token/s", "median tokens/s"),
                  t("每轮", "each round")], body,
                 caption=t(f"真实 CPU 模型，批 {real.batch}，每个请求 {real.max_tokens} 个 token（墙钟，两条线程真的重叠；负载 {c.loads}）",
                           f"Real CPU model, batch {real.batch}, {real.max_tokens} tokens each (wall clock: the two threads really "
                           f"overlap; load {c.loads})"))


def real_async_sentence(real: RealAsync) -> str:
    same_tokens = (t("两边的贪心输出逐 token 相同。", "Greedy output is identical token for token.") if real.identical else
                   t("两边的输出不同——这是引擎的错误，请报告。", "The outputs differ — an engine bug, please report it."))
    return real.comparison.verdict.sentence(
        greater=("真实模型上异步调度的吞吐是同步的 {ratio}", "on the real model async scheduling gives {ratio}x the synchronous throughput"),
        less=("真实模型上异步调度反而更慢（{ratio}）", "on the real model async scheduling is slower ({ratio}x)"),
        same=("真实模型上异步调度的吞吐和同步一样（{ratio}）：CPU 上一步的模型计算远长于主机工作，能藏起来的很少",
              "on the real model async scheduling gives the synchronous throughput ({ratio}x): a CPU forward is far longer than "
              "the host work, so there is little to hide")) + " " + same_tokens


# ------------------------------------------------------------------------------ section 7's record

SECTION = "7-host-sweep"


def record_host_sweep(sweep):
    """Section 7 as a record: every round's rows, the load, the context and one verdict per profile."""
    from dataclasses import asdict

    from labkit.labs.common.records import RunContext, SectionRecord

    return SectionRecord(
        lab="03", section=SECTION, context=RunContext.current(load=sweep.load),
        rounds={"rows": [[asdict(r) for r in rows] for rows in sweep.rounds]},
        values={"context_len": sweep.context_len, "load": sweep.load},
        verdicts={profile: host_vs_step_verdict(sweep.rounds, profile, sweep.context_len, sweep.load)
                  for profile in PROFILES})


def sweep_from_record(rec):
    from labkit.labs.lab03_batching.overhead import HostSweep

    rounds = [[OverheadRow(**r) for r in rows] for rows in rec.rounds["rows"]]
    best = [min((rr[i] for rr in rounds), key=lambda row: row.engine_host_s) for i in range(len(rounds[0]))]
    return HostSweep(best, rounds, rec.values["load"], rec.values["context_len"])


def host_sweep_narration(rec):
    """Section 7 rendered from its record alone: the table, the crossover lines and the verdicts' sentences."""
    from labkit.labs.common.records import Narration

    sweep = sweep_from_record(rec)
    top = sweep.rows[-1].num_running
    sentences = crossover_lines(sweep.rows, sweep.context_len, sweep.rounds)
    sentences += ["· " + host_vs_step_sentence(rec.verdict(p), p, top) for p in PROFILES]
    table = host_vs_step_table(sweep.rows, sweep.context_len, sweep.rounds)
    return Narration(tuple(sentences), tuple(tuple(r) for r in table.rows), table.caption,
                     {f"host_longer/{p}": f"{rec.verdict(p).direction}|{rec.verdict(p).confidence}" for p in PROFILES})


REMEDIES = "7.1-remedies"


def record_remedies(runs: list[RemedyRun]):
    """Section 7.1 as a record: every rung's best row, each round's virtual step and mean host time,
    the load, and the async verdict per profile."""
    from dataclasses import asdict

    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [r.load for r in runs if r.load is not None]
    return SectionRecord(
        lab="03", section=REMEDIES, context=RunContext.current(load=max(loads) if loads else None),
        rounds={"runs": [{"profile": r.profile, "num_running": r.num_running, "load": r.load,
                          "rows": {k: asdict(v) for k, v in r.rows.items()}, "steps": r.steps,
                          "host_means": r.host_means, "step_means": r.step_means} for r in runs]},
        verdicts={r.profile: async_verdict(r, r.load) for r in runs})


def remedies_from_record(rec) -> list[RemedyRun]:
    return [RemedyRun(r["profile"], r["num_running"], {k: OverheadRow(**v) for k, v in r["rows"].items()},
                      r["steps"], r["load"], r.get("host_means") or {}, r.get("step_means") or {})
            for r in rec.rounds["runs"]]


def remedies_narration(rec, anchors: dict[str, str] | None = None):
    """Section 7.1 rendered from its record alone: the table and one async sentence per profile."""
    from labkit.labs.common.records import Narration

    runs = remedies_from_record(rec)
    table = remedies_table(runs, anchors or {})
    sentences = tuple("· " + async_sentence(rec.verdict(r.profile), r) for r in runs)
    return Narration(sentences, tuple(tuple(x) for x in table.rows), table.caption,
                     {f"async_shortens/{r.profile}": f"{rec.verdict(r.profile).direction}|{rec.verdict(r.profile).confidence}"
                      for r in runs})
