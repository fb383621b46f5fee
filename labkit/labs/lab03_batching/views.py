"""Lab 03 figures and tables. Each takes a measured result and returns a titled plotly figure with
labelled axes and units, or a ``Table``. Nothing here measures; simulated rows say so."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.labs.common.references import cite
from labkit.labs.lab03_batching.chunked import ChunkedRun
from labkit.labs.lab03_batching.offline import (
    AnyscaleRow,
    OfflineComparison,
    offline_from_record,
)
from labkit.labs.lab03_batching.online import (
    ServingResult,
    fidelity_from_record,
    saturated_throughput,
    saturation_rate,
    serving_from_record,
    slo_capacity,
)
from labkit.labs.lab03_batching.overhead import MeasuredCrossover, OverheadRow
from labkit.labs.lab03_batching.overhead_view import crossover_text
from labkit.labs.lab03_batching.preemption import PressureRun
from labkit.labs.lab03_batching.scaling import StepTiming, step_ratio_spread
from labkit.report.figures import COLORS, axis_titles, decade_ticks, reference_line, style
from labkit.report.tables import Table

POLICY_COLORS = {"static": COLORS["idle"], "continuous": COLORS["decode"]}
SIM = t("（模拟）", " (simulated)")


def policy_name(key: str) -> str:
    """The reader's name of a scheduler or Anyscale system key ("static", "continuous, paged KV")."""
    names = {"static": t("静态批处理", "static batching"), "continuous": t("连续批处理", "continuous batching"),
             "static, max-length reservation": t("静态 + 按最大长度预留", "static, max-length reservation"),
             "continuous, max-length reservation": t("连续 + 按最大长度预留", "continuous, max-length reservation"),
             "continuous, paged KV": t("连续 + 分页 KV", "continuous, paged KV")}
    head, sep, tail = key.partition(", burstiness ")          # "continuous, burstiness 0.25"
    if sep:
        return policy_name(head) + t(f"，突发性 {tail}", f", burstiness {tail}")
    return names.get(key, key)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{1000 * seconds:,.1f}"


def _sim(run_simulated: bool) -> str:
    return SIM if run_simulated else ""


# ------------------------------------------------------------------------------ offline

OFFLINE_MARKS = dict(greater=("（连续更快）", " (continuous faster)"), less=("（连续反而更慢）", " (continuous slower)"),
                     same=("（持平）", " (level)"))


def offline_table(comparisons: list[tuple[str, OfflineComparison]], verdicts: list | None = None,
                  caption: str | None = None) -> Table:
    """Both runs per comparison and the ratio row; ``verdicts`` (one per comparison, section 2's record)
    mark the throughput ratio with the words the sentence uses."""
    rows = []
    for i, (name, c) in enumerate(comparisons):
        mark = verdicts[i].mark(**OFFLINE_MARKS) if verdicts is not None else ""
        for run in (c.static, c.continuous):
            rows.append([name + _sim(run.simulated), policy_name(run.label), run.num_requests, run.steps, f"{run.seconds:,.2f}",
                         f"{run.wall_s:,.2f}", f"{run.tokens_per_s:,.1f}", f"{run.occupancy_perc:.1f}",
                         _pct(run.decode_occupancy_perc)])
        rows.append([name, t("连续 ÷ 静态", "continuous / static"), "", f"{c.step_ceiling:.2f}×", "",
                     f"{c.static.wall_s / c.continuous.wall_s:.2f}×", f"{c.time_ratio:.2f}×{mark}", "",
                     t(f"预测静态 {c.predicted_static_occupancy_perc:.1f}",
                       f"static predicted {c.predicted_static_occupancy_perc:.1f}")])
    return Table([t("轨迹", "trace"), t("策略", "policy"), t("请求数", "requests"), t("步数", "steps"),
                  t("秒（CPU；模拟为加速器秒）", "seconds (CPU; simulated: accelerator)"), t("墙钟秒", "wall s"),
                  t("输出 token/s", "output tok/s"), t("批占用率 %", "occupancy %"),
                  t("纯解码步占用率 %", "decode-step occupancy %")], rows,
                 caption=caption or t("离线吞吐：静态 vs 连续批处理（同一条轨迹、同一个引擎）",
                                      "Offline throughput: static vs continuous batching (same trace, same engine)"),
                 notes=[t("“步数”一栏的比值就是步数上限：若每步耗时相同，吞吐提升不会超过它。真实模型的“秒”是本进程的 "
                          "CPU 时间（单线程：它数的是工作量；墙钟时间还包括机器分给别的程序的时间），吞吐按它算；"
                          "模拟模型的“秒”是成本模型给出的加速器时间。",
                          "The ratio in the steps column is the step-count ceiling: if every step cost the same, the "
                          "throughput gain could not exceed it. On the real model seconds are this process's CPU time "
                          "(one thread: it counts the work; wall time also counts what the machine gave other "
                          "programs) and throughput uses them; on the simulated one, the cost model's accelerator time.")])


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def ceiling_sentence(name: str, c: OfflineComparison, v=None) -> str:
    """The throughput ratio rendered from its verdict (``v``: the recorded one), then the step ceiling
    (counted, exact)."""
    head = (v if v is not None else c.verdict()).sentence(
        greater=(f"{name}：连续批处理的吞吐是静态的 {{ratio}}", f"{name}: continuous throughput is {{ratio}} static"),
        same=(f"{name}：连续批处理的吞吐与静态持平（{{ratio}}）", f"{name}: continuous throughput is level with static ({{ratio}})"),
        less=(f"{name}：这次连续批处理反而更慢（是静态的 {{ratio}}），多半是机器在忙别的事，重跑一次",
              f"{name}: continuous came out slower this time ({{ratio}} static); the machine was probably busy, rerun"))
    line = head + t(f" 步数上限 {c.step_ceiling:.2f} 倍（不超过 静态步数 ÷ 最长请求 = {c.longest_bound:.2f} 倍），"
                    f"实测达到上限的 {c.share_of_ceiling:.0%}。",
                    f" The step ceiling is {c.step_ceiling:.2f}x (at most static steps / longest request = "
                    f"{c.longest_bound:.2f}x); the measurement reaches {c.share_of_ceiling:.0%} of it.")
    if c.share_of_ceiling > 1:
        line += t("超过上限说明这次每步的耗时并不恒定：静态批处理的某些步受了别的程序干扰（看本页开头的负载），重跑可以验证。",
                  " Above the ceiling means steps did not cost the same: some static steps were disturbed by other "
                  "programs (see the load note at the top); rerun to check.")
    return line


def above_ceiling(rows: list[AnyscaleRow]) -> list[tuple[int, str, float, float]]:
    """(output cap, system, throughput ratio, step ceiling) of every row whose ratio beats its ceiling."""
    return [(row.max_output_len, name, row.speedup(name), row.step_ceiling(name)) for row in rows for name in row.runs
            if row.speedup(name) > row.step_ceiling(name) + 5e-3]


def anyscale_table(rows: list[AnyscaleRow]) -> Table:
    body = []
    beyond = above_ceiling(rows)
    above = {(cap, name) for cap, name, _, _ in beyond}
    for row in rows:
        for name, run in row.runs.items():
            mark = t("（超过上限，见注）", " (above the ceiling, see note)") if (row.max_output_len, name) in above else ""
            body.append([row.max_output_len, policy_name(name), run.steps, f"{run.mean_batch:.1f}", f"{run.tokens_per_s:,.0f}",
                         f"{row.speedup(name):.2f}×{mark}", f"{row.step_ceiling(name):.2f}×"])
    notes = [t(f"上限 {cap}、{policy_name(name)}：吞吐倍数 {ratio:.2f}× 高于步数上限 {ceil:.2f}×。步数上限只在每步耗时相同时成立；"
               "成本模型里一步的耗时随这一步的 token 数和上下文长度变化，这个系统的步平均比静态批处理的步便宜，所以倍数可以超过它。",
               f"Cap {cap}, {name}: throughput ratio {ratio:.2f}x above the step ceiling {ceil:.2f}x. The ceiling holds only "
               "if every step costs the same; in the cost model a step's time varies with its tokens and context length, "
               "and this system's steps are cheaper on average than static batching's, so the ratio can exceed it.")
             for cap, name, ratio, ceil in beyond]
    return Table([t("输出上限", "output cap"), t("系统", "system"), t("步数", "steps"), t("平均批大小", "mean batch"),
                  t("输出 token/s（模拟）", "output tok/s (simulated)"), t("吞吐相对静态", "throughput vs static"),
                  t("步数上限（静态步数 ÷ 本系统步数）", "step ceiling (static steps / these steps)")], body,
                 caption=t("Anyscale 设置（模拟）：512 token 提示，输出长度 ~ 指数分布（均值 128）并截断",
                           "The Anyscale setup (simulated): 512-token prompts, outputs ~ exponential (mean 128), capped"),
                 notes=notes)


def anyscale_figure(rows: list[AnyscaleRow], cited: dict[str, float]) -> go.Figure:
    fig = go.Figure()
    caps = [r.max_output_len for r in rows]
    for name, color in zip(rows[0].runs, (COLORS["idle"], COLORS["reserved_unused"], COLORS["decode"])):
        fig.add_trace(go.Scatter(x=caps, y=[r.speedup(name) for r in rows], mode="lines+markers",
                                 name=policy_name(name) + SIM, line=dict(color=color)))
    for label, value in cited.items():
        reference_line(fig, y=value, text=label)
    fig.update_xaxes(type="log", tickvals=caps)
    return style(fig, t("吞吐相对静态批处理的倍数 vs 输出长度上限（模拟）与博客数字",
                        "Throughput relative to static batching vs output cap (simulated) and the blog's numbers"),
                 t("输出长度上限（token，对数）", "output length cap (tokens, log)"), t("相对静态的倍数（×）", "x static"))


def occupancy_table(items: list[tuple[str, OfflineComparison]]) -> Table:
    rows = [[name + SIM, f"{c.static.occupancy_perc:.1f}", _pct(c.static.occupancy_while_waiting_perc),
             f"{c.predicted_static_occupancy_perc:.1f}", f"{c.continuous.occupancy_perc:.1f}",
             _pct(c.continuous.occupancy_while_waiting_perc), f"{c.continuous.token_budget_perc:.1f}",
             f"{c.time_ratio:.2f}×"] for name, c in items]
    return Table([t("轨迹", "trace"), t("静态：全部步 %", "static: all steps %"),
                  t("静态：有请求排队时 %", "static: while requests wait %"), t("静态：由长度预测 %", "static: predicted %"),
                  t("连续：全部步 %", "continuous: all steps %"), t("连续：有请求排队时 %", "continuous: while requests wait %"),
                  t("连续：token 预算使用 %", "continuous: token budget use %"),
                  t("吞吐 连续 ÷ 静态", "throughput continuous / static")], rows,
                 caption=t("批占用率：对话 vs 代码轨迹（模拟，Azure 2023 长度分布）",
                           "Batch occupancy: conversation vs code traces (simulated, Azure 2023 length distributions)"))


def utilisation_claim_sentence(name: str, c: OfflineComparison, low: float = 30.0, high: float = 80.0) -> str:
    """The chapter's "30 % -> 80 %+" read as batch occupancy while requests wait, from the numbers."""
    s, k = c.static.occupancy_while_waiting_perc, c.continuous.occupancy_while_waiting_perc
    if s is None or k is None:
        return t(f"{name}：没有请求排队的步，无法检验。", f"{name}: no step had requests waiting; nothing to check.")
    fits = s <= low + 10 and k >= high
    verdict = (t(f"与“{low:.0f}% → {high:.0f}%+”相符", f"consistent with '{low:.0f}% -> {high:.0f}%+'") if fits else
               t(f"与“{low:.0f}% → {high:.0f}%+”不符", f"not what '{low:.0f}% -> {high:.0f}%+' says"))
    return t(f"{name}：有请求排队时，批占用率 静态 {s:.0f}% → 连续 {k:.0f}%，{verdict}。",
             f"{name}: while requests wait, occupancy static {s:.0f}% -> continuous {k:.0f}%, {verdict}.")


# ------------------------------------------------------------------------------ online

def serving_figure(sweep: dict[str, list[ServingResult]], slo, title: str | None = None) -> go.Figure:
    """``title``: section 4's title rendered from its record (``serving_narration(rec).title``)."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08)
    ttfts = []
    for name, results in sweep.items():
        rates = [r.rate for r in results]
        color = POLICY_COLORS.get(name, COLORS["ink"])
        ttfts += [r.ttft_p99_s for r in results]
        for col, ys in ((1, [r.ttft_p99_s for r in results]), (2, [1000 * r.tpot_p99_s for r in results]),
                        (3, [r.goodput for r in results])):
            fig.add_trace(go.Scatter(x=rates, y=ys, mode="lines+markers", name=policy_name(name), line=dict(color=color),
                                     legendgroup=name, showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=rates, y=[r.throughput for r in results], mode="lines", legendgroup=name,
                                 name=policy_name(name) + t("：完成吞吐", ": completed"),
                                 line=dict(color=color, dash="dash", width=1)), row=1, col=3)
    reference_line(fig, y=slo.ttft_s, text=t(f"SLO：TTFT ≤ {slo.ttft_s:g} 秒", f"SLO: TTFT ≤ {slo.ttft_s:g} s"),
                   log=True, row=1, col=1, color=COLORS["internal_frag"])
    reference_line(fig, y=1000 * slo.tpot_s, text=t(f"SLO：TPOT ≤ {1000 * slo.tpot_s:g} 毫秒",
                                                    f"SLO: TPOT ≤ {1000 * slo.tpot_s:g} ms"),
                   row=1, col=2, color=COLORS["internal_frag"])
    decade_ticks(fig, "y", ttfts + [slo.ttft_s], row=1, col=1)
    style(fig, title or t("在线服务（模拟）：请求率扫描", "Online serving (simulated): request-rate sweep"), height=430)
    fig.update_layout(margin=dict(t=110))
    rate = t("请求率（请求/秒）", "request rate (req/s)")
    return axis_titles(fig, [(rate, t("TTFT P99（秒，对数）", "TTFT P99 (s, log)")), (rate, t("TPOT P99（毫秒）", "TPOT P99 (ms)")),
                             (rate, t("goodput 与完成吞吐（请求/秒）", "goodput and completed (req/s)"))])


def serving_table(results: list[ServingResult], caption: str) -> Table:
    rows = [[policy_name(r.label) + _sim(r.simulated), f"{r.rate:g}", f"{r.ttft_p50_s:.2f} / {r.ttft_p99_s:.2f}",
             f"{_ms(r.tpot_p50_s)} / {_ms(r.tpot_p99_s)}", f"{_ms(r.itl_p50_s)} / {_ms(r.itl_p99_s)}",
             f"{r.num_good}/{r.num_requests}", f"{r.goodput:.2f}", f"{r.throughput:.2f}"] for r in results]
    return Table([t("策略", "policy"), t("请求率 /s", "rate /s"), "TTFT P50 / P99 (s)", "TPOT P50 / P99 (ms)",
                  "ITL P50 / P99 (ms)", t("达标请求", "met SLO"), t("goodput（请求/s）", "goodput (req/s)"),
                  t("完成（请求/s）", "completed (req/s)")], rows, caption=caption)


# ------------------------------------------------------------------------------ scaling

def scaling_figure(decode: list[StepTiming], prefill: list[StepTiming], knee: float, title: str | None = None) -> go.Figure:
    """``title``: rendered from section 5's record (``scaling_narration(rec).title``)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    sizes, step_ms, token_ms = [], [], []
    for timings, name, color in ((decode, t("解码步：批大小 = token 数", "decode step: batch = tokens"), COLORS["decode"]),
                                 (prefill, t("预填充步：一个请求的提示", "prefill step: one prompt"), COLORS["prefill"])):
        x = [p.size for p in timings]
        sizes += x
        step_ms += [1000 * p.step_s for p in timings]
        token_ms += [1000 * p.step_s / p.size for p in timings]
        fig.add_trace(go.Scatter(x=x, y=[1000 * p.step_s for p in timings], mode="lines+markers", name=name,
                                 line=dict(color=color)), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[1000 * p.step_s / p.size for p in timings], mode="lines+markers", name=name,
                                 line=dict(color=color), showlegend=False), row=1, col=2)
    reference_line(fig, x=knee, text=t(f"拐点 ≈ {knee:.0f} token", f"knee ≈ {knee:.0f} tokens"), log=True, row=1, col=1)
    for col, ys in ((1, step_ms), (2, token_ms)):
        decade_ticks(fig, "x", sizes + ([knee] if col == 1 else []), row=1, col=col)
        decade_ticks(fig, "y", ys, row=1, col=col)
    style(fig, title or t("一步的耗时 vs 这一步的 token 数（真实模型，本机实测）", "Step time vs tokens in the step (real model, measured here)"))
    tokens = t("这一步的 token 数（对数）", "tokens in the step (log)")
    return axis_titles(fig, [(tokens, t("步耗时（毫秒，对数）", "step time (ms, log)")),
                             (tokens, t("每个 token 的耗时（毫秒，对数）", "time per token (ms, log)"))])


# One set of words for section 5's verdict: the table mark, the sentence and the figure title use them.
BATCHING_MARKS = dict(greater=("（批大更省）", " (cheaper batched)"), less=("（批大反而更贵）", " (dearer batched)"),
                      same=("（持平）", " (level)"))


def scaling_narration(rec):
    """Section 5 rendered from its record alone (``scaling.record_scaling``): does a bigger decode batch
    make each token cheaper? The sentence, the table's throughput column and the figure title read one verdict."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab03_batching.scaling import timings_from_record

    decode, _ = timings_from_record(rec)
    v = rec.verdict("batching")
    base, top = min(decode, key=lambda d: d.size), max(decode, key=lambda d: d.size)
    step_x = top.step_s / base.step_s
    a, b = base.size, top.size
    sentence = v.sentence(
        greater=(f"批 {a} → 批 {b}：一步的耗时变成 {step_x:.2f} 倍，token 吞吐是批 {a} 的 {{ratio}}——批越大，每个 token 越便宜",
                 f"batch {a} → {b}: a step takes {step_x:.2f}× as long, token throughput is {{ratio}} batch {a}'s: the bigger "
                 "the batch, the cheaper each token"),
        same=(f"批 {a} → 批 {b}：一步的耗时变成 {step_x:.2f} 倍，token 吞吐与批 {a} 持平（{{ratio}}）——在这台机器上，批大了每个 token 并没有更便宜",
              f"batch {a} → {b}: a step takes {step_x:.2f}× as long, token throughput level with batch {a} ({{ratio}}): "
              "on this machine a bigger batch did not make tokens cheaper"),
        less=(f"批 {a} → 批 {b}：一步的耗时变成 {step_x:.2f} 倍，token 吞吐反而只有批 {a} 的 {{ratio}}",
              f"batch {a} → {b}: a step takes {step_x:.2f}× as long, token throughput only {{ratio}} batch {a}'s"))
    table = scaling_table(decode, v)
    title = t(f"一步的耗时 vs 这一步的 token 数（真实模型，本机实测）：批 {b} 的 token 吞吐是批 {a} 的 {v.ratio:.1f}×{v.mark(**BATCHING_MARKS)}",
              f"Step time vs tokens in the step (real model, measured here): batch {b}'s token throughput {v.ratio:.1f}× "
              f"batch {a}'s{v.mark(**BATCHING_MARKS)}")
    return Narration((sentence,), tuple(tuple(r) for r in table.rows), title,
                     {"decode_batching_pays": f"{v.direction}|{v.confidence}"})


def scaling_table(decode: list[StepTiming], verdict=None) -> Table:
    """Each batch's fastest step (what the ratios and §5.1's calibration use), its spread over the
    measured steps and whether the machine was busy; the step ratio with its step-by-step range."""
    base, top = decode[0], max(decode, key=lambda d: d.size)
    rows = []
    for d in decode:
        pair = step_ratio_spread(d, base)
        ratio_range = "" if pair is None or d is base else f"（{pair[0]:.2f}–{pair[1]:.2f}）"
        mark = verdict.mark(**BATCHING_MARKS) if verdict is not None and d is top and d is not base else ""
        rows.append([d.size, _ms(d.step_s), _spread(d), f"{d.step_s / base.step_s:.2f}×{ratio_range}",
                     f"{(d.size / d.step_s) / (base.size / base.step_s):.1f}×{mark}", busy_flag(d.busy)])
    loads = [d.load for d in decode if d.load is not None]
    load = t(f"测量期间最高负载 {max(loads):.1f}（{decode[0].cores} 个核）", f"highest load while measuring {max(loads):.1f} "
             f"({decode[0].cores} cores)") if loads else t("负载未知", "load unknown")
    return Table([t("批大小", "batch"), t("解码步（毫秒，最快一步）", "decode step (ms, fastest)"),
                  t("各步 最慢 ÷ 最快", "steps: slowest / fastest"),
                  t("步耗时倍数（逐步范围）", "step time x (step-by-step range)"), t("吞吐倍数", "throughput x"),
                  t("机器正忙？", "machine busy?")], rows,
                 caption=t("解码步耗时 vs 批大小（真实模型，本机实测）", "Decode step time vs batch size (real model, measured here)"),
                 notes=[t(f"每个批大小测 {len(base.all_s)} 步，取最快的一步（别的程序只可能让一步用时增加）；{load}。"
                          "标着“正忙”的行，倍数不可靠：重跑这两格。第 5.1 节的定标用的就是第一行的批 1 步。",
                          f"{len(base.all_s)} steps per batch size, the fastest kept (other programs can only add to a step's time); {load}. "
                          "Rows marked busy give unreliable ratios: rerun these two cells. Section 5.1 calibrates with the "
                          "first row's batch-1 step.")])


def _spread(d: StepTiming) -> str:
    return "—" if d.spread is None else f"{d.spread:.2f}×"


def busy_flag(busy: bool) -> str:
    return t("是：不可靠", "yes: unreliable") if busy else t("否", "no")


def calibration_note(decode: list[StepTiming]) -> str:
    """What §5.1's calibration stands on: the batch-1 step of §5's table, flagged when busy."""
    base = min(decode, key=lambda d: d.size)
    flag = t("；测它时机器正忙，定标和下面的对比都不可靠，先重跑第 5 节", "; the machine was busy when it was measured, so the "
             "calibration and the comparison below are unreliable: rerun section 5 first") if base.busy else ""
    return t(f"定标用的批 {base.size} 解码步：{_ms(base.step_s)} ms（第 5 节表的第一行，各步 最慢 ÷ 最快 = {_spread(base)}）{flag}。",
             f"Calibrated on the batch-{base.size} decode step: {_ms(base.step_s)} ms (first row of section 5's table, "
             f"slowest / fastest = {_spread(base)}){flag}.")


# ------------------------------------------------------------------------------ chunked prefill

def chunked_table(runs: tuple[ChunkedRun, ...]) -> Table:
    rows = [[r.label, r.max_num_batched_tokens, r.max_step_tokens, _ms(r.itl_p50_s), _ms(r.itl_p99_s), _ms(r.itl_max_s),
             _ms(r.long_ttft_s)] for r in runs]
    return Table([t("配置", "setting"), t("token 预算", "token budget"), t("最大一步 token 数", "largest step (tokens)"),
                  t("解码者 ITL P50（毫秒）", "decoders' ITL P50 (ms)"), "ITL P99 (ms)", "ITL max (ms)",
                  t("长提示的 TTFT（毫秒）", "long prompt's TTFT (ms)")], rows,
                 caption=t("分块预填充：一个长提示在别人解码时到达（真实模型，本机实测，墙钟时间，第一轮）",
                           "Chunked prefill: a long prompt arrives while others decode (real model, measured here, wall "
                           "clock, first round)"))


CHUNK_MARKS = {"itl_p99": dict(greater=("（分块压低了尾延迟）", " (chunking cut the tail)"),
                               less=("（分块反而更高）", " (chunking came out higher)"), same=("（持平）", " (level)")),
               "ttft": dict(greater=("（分块的代价：TTFT 更长）", " (chunking's price: longer TTFT)"),
                            less=("（分块的 TTFT 反而更短）", " (chunked TTFT came out shorter)"),
                            same=("（TTFT 持平：没量出代价）", " (TTFT level: no price measured)"))}


def chunked_lines(rec) -> list[str]:
    """Section 6's conclusions, from its record's two verdicts (wall clock, rounds alternated)."""
    itl, ttft = rec.verdict("itl_p99"), rec.verdict("ttft")
    return [itl.sentence(greater=("不分块时解码者的 ITL P99 是分块时的 {ratio}：分块压低了长提示造成的尾延迟",
                                  "without chunking the decoders' ITL P99 is {ratio} the chunked one: chunking cuts the tail"),
                         less=("不分块时解码者的 ITL P99 只有分块时的 {ratio}：这次分块没有压低尾延迟",
                               "without chunking the decoders' ITL P99 is only {ratio} the chunked one: chunking did not cut the tail"),
                         same=("两种配置下解码者的 ITL P99 一样（{ratio}）", "the decoders' ITL P99 is the same either way ({ratio})")),
            ttft.sentence(greater=("分块的代价：长提示的 TTFT 是不分块时的 {ratio}", "chunking's price: the long prompt's TTFT is {ratio} the unchunked one"),
                          less=("长提示的 TTFT 分块时反而更短（{ratio}）", "the long prompt's TTFT came out shorter with chunking ({ratio})"),
                          same=("长提示的 TTFT 分块与不分块一样（{ratio}）：这次没有量出分块的代价",
                                "the long prompt's TTFT is the same either way ({ratio}): no price of chunking measured this time"))]


def chunked_narration(rec):
    """Section 6 rendered from its record alone (``chunked.record_chunking``)."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab03_batching.chunked import pairs_from_record

    pairs = pairs_from_record(rec)
    table = chunked_table(pairs[0])
    itl, ttft = rec.verdict("itl_p99"), rec.verdict("ttft")
    title = t(f"分块预填充：ITL P99 {itl.ratio:.2f}×{itl.mark(**CHUNK_MARKS['itl_p99'])}，长提示 TTFT {ttft.ratio:.2f}×"
              f"{ttft.mark(**CHUNK_MARKS['ttft'])}",
              f"Chunked prefill: ITL P99 {itl.ratio:.2f}×{itl.mark(**CHUNK_MARKS['itl_p99'])}, long prompt's TTFT "
              f"{ttft.ratio:.2f}×{ttft.mark(**CHUNK_MARKS['ttft'])}")
    return Narration(tuple(chunked_lines(rec)), tuple(tuple(r) for r in table.rows), title,
                     {"chunking_cuts_itl": f"{itl.direction}|{itl.confidence}",
                      "chunking_costs_ttft": f"{ttft.direction}|{ttft.confidence}"})


# ------------------------------------------------------------------------------ scheduler overhead

def overhead_table(rows: list[OverheadRow], accelerator_s: float, label: str = "") -> Table:
    body = [[r.num_running, _ms(r.schedule_s), _ms(r.sample_s), _ms(r.scheduler_s - r.schedule_s - r.sample_s),
             _ms(r.scheduler_s), _ms(r.other_s), _ms(r.model_s), f"{r.scheduler_share():.0%}",
             f"{r.scheduler_share(accelerator_s):.0%}"] for r in rows]
    return Table([t("运行中请求", "running requests"), t("调度决策", "deciding"), t("采样", "sampling"),
                  t("写回与记账", "update, bookkeeping"), t("调度器合计（毫秒/步，实测）", "scheduler total (ms/step, measured)"),
                  t("其他主机时间（毫秒）", "other host (ms)"), t("加速器（毫秒，模拟）", "accelerator (ms, simulated)"),
                  t("调度占比（模拟加速器）", "scheduler share (sim accelerator)"),
                  t(f"调度占比（{1000 * accelerator_s:.0f} ms 的步）", f"scheduler share ({1000 * accelerator_s:.0f} ms step)")],
                 body, caption=t(f"每步的时间划分{label}：主机时间在本机实测（毫秒），加速器时间来自成本模型（模拟 Llama-3-8B / H100）",
                                 f"Per-step split{label}: host times measured on this machine (ms), accelerator time from "
                                 "the cost model (simulated Llama-3-8B / H100)"))


def overhead_figure(series: dict[str, list[OverheadRow]], accelerator_s: float) -> go.Figure:
    fig = go.Figure()
    colors = [COLORS["internal_frag"], COLORS["used"], COLORS["verify"]]
    xs, ys = [], [1000 * accelerator_s]
    for (name, rows), color in zip(series.items(), colors):
        xs += [r.num_running for r in rows]
        ys += [1000 * r.scheduler_s for r in rows]
        fig.add_trace(go.Scatter(x=[r.num_running for r in rows], y=[1000 * r.scheduler_s for r in rows],
                                 mode="lines+markers", name=name, line=dict(color=color)))
    first = next(iter(series.values()))
    ys += [1000 * r.model_s for r in first]
    fig.add_trace(go.Scatter(x=[r.num_running for r in first], y=[1000 * r.model_s for r in first], mode="lines+markers",
                             name=t("加速器步（模拟）", "accelerator step (simulated)"), line=dict(color=COLORS["prefill"])))
    reference_line(fig, y=1000 * accelerator_s, log=True,
                   text=t(f"引用的 {1000 * accelerator_s:.0f} ms 步", f"cited {1000 * accelerator_s:.0f} ms step"))
    decade_ticks(fig, "x", xs)
    decade_ticks(fig, "y", ys)
    return style(fig, t("调度器 CPU 时间/步 vs 运行中请求数", "Scheduler CPU time per step vs running requests"),
                 t("运行中请求数（对数）", "running requests (log)"), t("毫秒/步（对数）", "ms per step (log)"))


# ------------------------------------------------------------------------------ preemption

def pressure_table(runs: tuple[PressureRun, ...]) -> Table:
    rows = [[r.label + SIM, r.num_blocks, r.num_preemptions, r.tokens_lost, r.tokens_computed, f"{r.e2e_p50_s:.2f}",
             f"{r.e2e_p99_s:.2f}", f"{r.seconds:.1f}"] for r in runs]
    return Table([t("KV 池", "KV pool"), t("块数", "blocks"), t("抢占次数", "preemptions"), t("丢掉的 token", "tokens lost"),
                  t("模型算过的 token", "tokens computed"), "E2E P50 (s)", "E2E P99 (s)", t("总时间（秒）", "total (s)")],
                 rows, caption=t("内存压力下的抢占（重算）（模拟）", "Preemption (recompute) under memory pressure (simulated)"))


def _crossover_cell(crossover: MeasuredCrossover | float | None) -> str:
    if isinstance(crossover, MeasuredCrossover):
        return crossover_text(crossover)
    return t("不会追上", "never") if crossover is None else f"≈ {crossover:,.0f}"


def summary_table(offline: OfflineComparison, decode: list[StepTiming],
                  saturation: MeasuredCrossover | float | None, offline_verdict=None, batching_verdict=None) -> Table:
    """``saturation``: §7's crossover as its table shows it (``overhead.measured_crossover``); a bare
    number is printed as given. ``offline_verdict`` (section 2's record) and ``batching_verdict`` (section
    5's) mark their rows as those sections' tables do: the words, or the hedge (within noise, machine busy)."""
    offline_mark = offline_verdict.mark(**OFFLINE_MARKS) if offline_verdict is not None else ""
    step_mark = batching_verdict.mark() if batching_verdict is not None else ""    # a hedge only: the row is a step ratio
    rows = [[t("连续 ÷ 静态吞吐（真实模型，按 CPU 时间）", "continuous / static throughput (real model, CPU time)"), f"{offline.time_ratio:.2f}×{offline_mark}",
             t(f"步数上限 {offline.step_ceiling:.2f}×", f"step ceiling {offline.step_ceiling:.2f}x")],
            [t(f"解码批 {decode[-1].size} ÷ 批 {decode[0].size} 的步耗时（真实模型）",
               f"decode step, batch {decode[-1].size} / batch {decode[0].size} (real model)"),
             f"{decode[-1].step_s / decode[0].step_s:.2f}×{step_mark}", t(f"批大小是 {decode[-1].size // decode[0].size} 倍",
                                                                 f"{decode[-1].size // decode[0].size}x the batch")],
            [t("主机路径追上加速器一步的并发（SmolLM2-135M / H100 的步，模拟）",
               "concurrency where the host path reaches the accelerator step (SmolLM2-135M / H100 step, simulated)"),
             _crossover_cell(saturation), t("§7 的表：实测点，不是拟合线", "§7's table: measured points, not the fitted line")]]
    return Table([t("量", "quantity"), t("本次测量", "measured in this run"), t("对照", "for comparison")], rows,
                 caption=t("要记住的三个数", "Three numbers to remember"))


def anyscale_sentence(rows: list[AnyscaleRow], system: str = "continuous, paged KV") -> str:
    """How the gain moves with the output cap, read from the numbers."""
    lo, hi = rows[0], rows[-1]
    a, b = lo.speedup(system), hi.speedup(system)
    trend = (t("长度差异越大，连续批处理的优势越大。", "the more the lengths vary, the larger continuous batching's gain.")
             if b > a else t("这次倍数没有随长度差异增大，和预期相反：看看表里的步数是否也没有变。",
                             "this time the gain did not grow with the spread, against expectation: check whether the step counts did."))
    return t(f"“{policy_name(system)}”相对静态：上限 {lo.max_output_len} 时 {a:.2f} 倍，上限 {hi.max_output_len} 时 {b:.2f} 倍（模拟）；{trend}",
             f"'{system}' vs static: {a:.2f}x at cap {lo.max_output_len}, {b:.2f}x at cap {hi.max_output_len} (simulated); {trend}")


FIDELITY_MARGIN = 0.1      # a TTFT ratio within 10 % of 1 points neither way


def _ttft_ratio(results: list[ServingResult]) -> float:
    by = {r.label: r for r in results}
    return by["static"].ttft_p50_s / by["continuous"].ttft_p50_s if by["continuous"].ttft_p50_s else float("inf")


def _way(ratio: float) -> str:
    return "greater" if ratio > 1 + FIDELITY_MARGIN else "less" if ratio < 1 - FIDELITY_MARGIN else "same"


def fidelity_agreement(real: list[ServingResult], simulated: list[ServingResult], busy: bool = False) -> str:
    """"yes" when the real model and the calibrated simulation point the same way (static ÷ continuous TTFT
    P50 above, within or below 1 ± 10 %), "no" when they do not, "unsure" when the real runs (one each, on the
    wall clock) were measured on a busy machine."""
    if busy:
        return "unsure"
    return "yes" if _way(_ttft_ratio(real)) == _way(_ttft_ratio(simulated)) else "no"


def fidelity_sentence(real: list[ServingResult], simulated: list[ServingResult], busy: bool = False) -> str:
    """Static / continuous TTFT P50 on the real model and on the calibrated simulation, from the numbers;
    ``busy``: the real runs were timed on a busy machine (wall clock, one run each), so no verdict."""
    r, s = _ttft_ratio(real), _ttft_ratio(simulated)
    verdict = {"yes": t("两边的方向一致", "both point the same way"),
               "no": t("两边的方向不一致：这次模拟没有抓住真实模型的行为", "they disagree: the simulation missed the real behaviour this time"),
               "unsure": t("但真实模型这两次运行时机器正忙（墙钟时间、各跑一次），别的程序拉长了它的延迟，这次比较说明不了模拟准不准；"
                           "关掉别的程序后重跑这一格",
                           "but the machine was busy during the real runs (wall clock, one run each): other programs stretched its "
                           "latencies, so this comparison cannot say whether the simulation is right; close other programs and rerun this cell")}[
        fidelity_agreement(real, simulated, busy)]
    return t(f"静态 ÷ 连续 的 TTFT P50：真实模型 {r:.1f} 倍，模拟 {s:.1f} 倍；{verdict}。",
             f"Static / continuous TTFT P50: {r:.1f}x on the real model, {s:.1f}x simulated; {verdict}.")


# ------------------------------------------------------------------------------ synthesis

def synthesis_table(rows: list[AnyscaleRow], real: OfflineComparison) -> Table:
    """The chapter's two multipliers from this run, side by side: more requests fit (paged KV, same
    continuous scheduler) and slots refilled every step (continuous vs static, same memory)."""
    contiguous, paged = "continuous, max-length reservation", "continuous, paged KV"
    body = []
    for row in rows:
        fit = row.runs[paged].mean_batch / row.runs[contiguous].mean_batch
        memory = row.speedup(paged) / row.speedup(contiguous)
        body.append([t(f"模拟，输出上限 {row.max_output_len}", f"simulated, output cap {row.max_output_len}"),
                     f"{fit:.1f}×", f"{memory:.1f}×", f"{row.speedup(contiguous):.1f}×", f"{row.speedup(paged):.1f}×"])
    body.append([t("真实模型，第 2 节的轨迹", "real model, section 2's trace"), "—", "—", f"{real.time_ratio:.2f}×", "—"])
    c = cite("vLLM throughput vs FasterTransformer/Orca")
    return Table([t("运行", "run"), t("平均批大小 分页 ÷ 最大长度预留", "mean batch, paged / max-length"),
                  t("吞吐 分页 ÷ 最大长度预留（都是连续批处理）", "throughput, paged / max-length (both continuous)"),
                  t("吞吐 连续 ÷ 静态（同样的内存）", "throughput, continuous / static (same memory)"),
                  t("合计：连续 + 分页 ÷ 静态", "total: continuous + paged / static")], body,
                 caption=t("两个倍数连起来（本次运行）：放得下更多请求 × 每步补满空槽",
                           "The two multipliers together (this run): more requests fit × every step refills free slots"),
                 notes=[t(f"论文：{c.claim} = {c.value}（{c.source}）。Orca 本身就是迭代级（连续）调度，所以可比的是第三列。",
                          f"Paper: {c.claim} = {c.value} ({c.source}). Orca already schedules per iteration, so the "
                          "comparable column is the third.")])


def synthesis_sentence(rows: list[AnyscaleRow], low: float = 2.0, high: float = 4.0) -> str:
    """Where this run's paged-KV gain (continuous on both sides) falls against the paper's 2–4x."""
    contiguous, paged = "continuous, max-length reservation", "continuous, paged KV"
    gains = [row.speedup(paged) / row.speedup(contiguous) for row in rows]
    lo, hi = min(gains), max(gains)
    if hi < low:
        where = t(f"低于论文的 {low:g}–{high:g} 倍", f"below the paper's {low:g}-{high:g}x")
    elif lo > high:
        where = t(f"高于论文的 {low:g}–{high:g} 倍", f"above the paper's {low:g}-{high:g}x")
    elif lo >= low and hi <= high:
        where = t(f"落在论文的 {low:g}–{high:g} 倍之内", f"within the paper's {low:g}-{high:g}x")
    else:
        where = t(f"和论文的 {low:g}–{high:g} 倍部分重合", f"overlapping the paper's {low:g}-{high:g}x")
    return t(f"同样是连续批处理，分页 KV 让吞吐变成最大长度预留的 {lo:.1f}–{hi:.1f} 倍（模拟，随输出长度上限变化），{where}；"
             "这份增益来自同一块内存里放下了更多请求（第二列）。静态 → 连续是另一个倍数（第四列），论文的 2–4 倍不含它。",
             f"With continuous batching on both sides, paged KV gives {lo:.1f}-{hi:.1f}x the throughput of max-length "
             f"reservation (simulated, varying with the output cap), {where}; the gain comes from more requests fitting "
             "in the same memory (second column). Static -> continuous is a separate multiplier (fourth column), not "
             "part of the paper's 2-4x.")


# ------------------------------------------------------------------------------ sections 2, 4 and 5.1 from their records

def offline_narration(rec):
    """Sections 2 and 3.1 rendered from their record alone (``offline.record_offline``): the table (the
    ratio row marked by the verdict), the outputs check, the throughput sentence with the step ceiling and
    the table's title."""
    from labkit.labs.common.records import Narration

    c, v, name = offline_from_record(rec), rec.verdict("continuous_over_static"), rec.values["name"]
    title = t(f"离线吞吐：静态 vs 连续批处理（同一条轨迹、同一个引擎）：连续 ÷ 静态 = {c.time_ratio:.2f}×{v.mark(**OFFLINE_MARKS)}",
              f"Offline throughput: static vs continuous batching (same trace, same engine): continuous / static = "
              f"{c.time_ratio:.2f}×{v.mark(**OFFLINE_MARKS)}")
    table = offline_table([(name, c)], [v], caption=title)
    same = rec.values.get("same_outputs")
    lines = ([] if same is None else [t(f"两种策略的贪心输出逐请求相同：{'是' if same else '否'}",
                                        f"Greedy outputs identical request by request under both policies: {'yes' if same else 'no'}")])
    lines.append(ceiling_sentence(name, c, v))
    return Narration(tuple(lines), tuple(tuple(r) for r in table.rows), title,
                     {"continuous_beats_static": f"{v.direction}|{v.confidence}"})


def _capacity(results: list[ServingResult]) -> float:
    cap = slo_capacity(results)
    return 0.0 if cap is None else cap


def serving_lines(sweep: dict[str, list[ServingResult]]) -> list[str]:
    """Per policy: the highest rate at which ≥ 90 % met the SLO, the top completed throughput, and the
    rate from which goodput fell below it (counted from the sweep's runs)."""
    lines = []
    for name, results in sweep.items():
        cap, top = slo_capacity(results), saturated_throughput(results)
        cap_text = (t(f"{cap:g} 个/秒", f"{cap:g} req/s") if cap is not None else
                    t(f"扫描的最低请求率（{results[0].rate:g} 个/秒）都达不到", f"not even the lowest swept rate ({results[0].rate:g} req/s)"))
        lines.append(t(f"{policy_name(name)}：≥ 90% 请求达标的最高请求率 = {cap_text}；完成吞吐最高 {top.throughput:.2f} 个/秒（在 {top.rate:g} 个/秒时）",
                       f"{policy_name(name)}: highest rate with ≥ 90% of requests meeting the SLO = {cap_text}; top completed "
                       f"throughput {top.throughput:.2f} req/s (at {top.rate:g} req/s)"))
    for name, results in sweep.items():
        sat = saturation_rate(results)
        lines.append(policy_name(name) + t("：", ": ") + (
            t(f"从 {sat:g} 个/秒起 goodput 低于完成吞吐：开始有请求不达标（违反 SLO）",
              f"from {sat:g} req/s goodput is below completed throughput: some requests miss the SLO") if sat is not None else
            t(f"扫到 {results[-1].rate:g} 个/秒，goodput 仍等于完成吞吐：每个请求都达标",
              f"up to {results[-1].rate:g} req/s goodput equals completed throughput: every request met the SLO")))
    return lines


def serving_claims(sweep: dict[str, list[ServingResult]]) -> dict[str, str]:
    """What section 4 found, as the sentences and the title state it."""
    static, cont = sweep["static"], sweep["continuous"]
    cap_s, cap_c = _capacity(static), _capacity(cont)
    sat_s, sat_c = (saturation_rate(x) for x in (static, cont))
    first = "yes" if sat_s is not None and (sat_c is None or sat_s < sat_c) else "no"
    top_s, top_c = saturated_throughput(static).throughput, saturated_throughput(cont).throughput
    return {"continuous_serves_more": "greater" if cap_c > cap_s else "less" if cap_c < cap_s else "same",
            "static_misses_slo_first": first,
            "continuous_completes_more": "yes" if top_c > 1.05 * top_s else "no"}


def serving_narration(rec):
    """Section 4 rendered from its record alone (``online.record_serving``): the sweep's table, the
    capacity and SLO sentences, the bursty pair's line and the figure's title."""
    from labkit.labs.common.records import Narration

    sweep, bursty, _ = serving_from_record(rec)
    lines = serving_lines(sweep)
    if len(bursty) == 2:
        even, burst = bursty
        lines.append(t(f"同样 {even.rate:g} 个/秒，间隔更不均匀（burstiness {burst.label.rsplit(' ', 1)[-1]}）时："
                       f"TTFT P99 {even.ttft_p99_s:.2f} → {burst.ttft_p99_s:.2f} 秒，达标 {even.num_good}/{even.num_requests} → "
                       f"{burst.num_good}/{burst.num_requests}（模拟）。",
                       f"Same {even.rate:g} req/s, burstier arrivals (burstiness {burst.label.rsplit(' ', 1)[-1]}): TTFT P99 "
                       f"{even.ttft_p99_s:.2f} → {burst.ttft_p99_s:.2f} s, met SLO {even.num_good}/{even.num_requests} → "
                       f"{burst.num_good}/{burst.num_requests} (simulated)."))
    caps = {name: slo_capacity(results) for name, results in sweep.items()}
    found = "，".join(f"{policy_name(n)} {c:g}" if c is not None else f"{policy_name(n)} —" for n, c in caps.items())
    found_en = ", ".join(f"{policy_name(n)} {c:g}" if c is not None else f"{policy_name(n)} —" for n, c in caps.items())
    title = t(f"在线服务（模拟）：请求率扫描——≥ 90% 达标的最高请求率（个/秒）：{found}",
              f"Online serving (simulated): request-rate sweep; highest rate with ≥ 90% meeting the SLO (req/s): {found_en}")
    table = serving_table(sweep["static"] + sweep["continuous"], t("请求率扫描（模拟）", "Rate sweep (simulated)"))
    return Narration(tuple(lines), tuple(tuple(r) for r in table.rows), title, serving_claims(sweep))


def fidelity_narration(rec):
    """Section 5.1 rendered from its record alone (``online.record_fidelity``): the calibration, the
    real-vs-simulated sentence (hedged when the real runs met a busy machine) and the table with its title."""
    from labkit.labs.common.records import Narration

    real, sim = fidelity_from_record(rec)
    base = StepTiming(**{**rec.values["base_step"], "all_s": tuple(rec.values["base_step"].get("all_s") or ())})
    busy = rec.context.busy or base.busy
    agree = fidelity_agreement(real, sim, busy)
    rate, slo = rec.values["rate"], rec.values["slo"]
    lines = (calibration_note([base]),
             t(f"定标结果：带宽 {rec.values['bandwidth'] / 1e9:.1f} GB/s，算力 {rec.values['compute'] / 1e9:.0f} GFLOP/s（由本机测量拟合）",
               f"Calibrated: bandwidth {rec.values['bandwidth'] / 1e9:.1f} GB/s, compute {rec.values['compute'] / 1e9:.0f} GFLOP/s "
               "(fitted to this machine's measurements)"),
             fidelity_sentence(real, sim, busy))
    word = {"yes": t("方向一致", "same direction"), "no": t("方向不一致", "directions differ"),
            "unsure": t("机器正忙，无法比较", "machine busy, no comparison")}[agree]
    title = t(f"同一轨迹、{rate:g} 个/秒：真实模型（上两行）vs 定标后的模拟模型（下两行；SLO：TTFT ≤ {slo['ttft_s']:g} s，"
              f"TPOT ≤ {1000 * slo['tpot_s']:.0f} ms）——静态 ÷ 连续 TTFT P50 {_ttft_ratio(real):.1f} 倍 vs {_ttft_ratio(sim):.1f} 倍，{word}",
              f"Same trace, {rate:g} req/s: real model (top two rows) vs calibrated simulation (bottom two; SLO: TTFT ≤ "
              f"{slo['ttft_s']:g} s, TPOT ≤ {1000 * slo['tpot_s']:.0f} ms): static / continuous TTFT P50 {_ttft_ratio(real):.1f}x vs "
              f"{_ttft_ratio(sim):.1f}x, {word}")
    table = serving_table(real + sim, title)
    return Narration(lines, tuple(tuple(r) for r in table.rows), title, {"simulation_agrees": agree})
