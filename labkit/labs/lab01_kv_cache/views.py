"""Lab 01 figures and tables. Each takes a measured result (typed, from ``kv_cache`` /
``fragmentation`` / ``preemption``) and returns a titled plotly figure with labelled axes and units,
or a ``Table``. Nothing here measures."""

from __future__ import annotations

import itertools

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.kv.breakdown import PARTS, PoolBreakdown
from labkit.labs.common.machine import MemoryBudget
from labkit.labs.lab01_kv_cache.fragmentation import FragmentationReport
from labkit.labs.lab01_kv_cache.measure import (
    CacheComparison,
    Conditions,
    KVBudgetRow,
    KVShape,
    KVTensorFacts,
    TokenCost,
    after_first,
    best_seconds,
)
from labkit.labs.lab01_kv_cache.preemption import PoolRun
from labkit.metrics import StepRow
from labkit.report.figures import COLORS, axis_titles, decade_ticks, style
from labkit.report.tables import Table, human_bytes

MODE_COLORS = {"cache": COLORS["decode"], "recompute": COLORS["prefill"]}


def _mode_name(mode: str) -> str:
    return t("有 KV 缓存（解码）", "with KV cache (decode)") if mode == "cache" else \
        t("无缓存（每步重算）", "no cache (recompute)")


def _points(comparisons: list[CacheComparison], mode: str) -> list[TokenCost]:
    costs = itertools.chain.from_iterable(after_first(getattr(c, mode)) for c in comparisons)
    return sorted(costs, key=lambda c: c.context_len)


def cache_vs_recompute_figure(comparisons: list[CacheComparison]) -> go.Figure:
    """Per new token: tokens the model processed (left) and seconds it took (right) vs context."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    xs, ys = [], {1: [], 2: []}
    for mode in ("cache", "recompute"):
        pts = _points(comparisons, mode)
        x = [p.context_len for p in pts]
        xs += x
        for col, y in ((1, [p.tokens_processed for p in pts]), (2, [1000 * p.seconds for p in pts])):
            ys[col] += y
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=_mode_name(mode),
                                     line=dict(color=MODE_COLORS[mode]), showlegend=col == 1), row=1, col=col)
    for col in (1, 2):      # decades only: no bare "2" or "5" between them
        decade_ticks(fig, "x", xs, row=1, col=col)
        decade_ticks(fig, "y", ys[col], row=1, col=col)
    style(fig, t("每生成一个 token 的代价：有缓存 vs 每步重算（本机实测）",
                 "Cost of one new token: KV cache vs recompute (measured here)"))
    return axis_titles(fig, [(t("上下文长度（token）", "context length (tokens)"),
                              t("处理的 token 数（个/新 token）", "tokens processed per new token")),
                             (t("上下文长度（token）", "context length (tokens)"),
                              t("CPU 时间（毫秒/新 token，单线程）", "CPU time per new token (ms, one thread)"))])


def cumulative_figure(comparison: CacheComparison) -> go.Figure:
    """Running totals while one answer grows: tokens processed (left) and seconds (right); the title
    states the totals' ratios, the time one marked by its verdict (the sentence's)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    for mode in ("cache", "recompute"):
        costs = getattr(comparison, mode)
        n = list(range(1, len(costs) + 1))
        tokens = list(itertools.accumulate(c.tokens_processed for c in costs))
        seconds = list(itertools.accumulate(c.seconds for c in costs))
        for col, y in ((1, tokens), (2, seconds)):
            fig.add_trace(go.Scatter(x=n, y=y, mode="lines+markers", name=_mode_name(mode),
                                     line=dict(color=MODE_COLORS[mode]), showlegend=col == 1), row=1, col=col)
    style(fig, cumulative_title(comparison))
    return axis_titles(fig, [(t("已生成的 token 数", "tokens generated"), t("累计处理的 token 数", "tokens processed so far")),
                             (t("已生成的 token 数", "tokens generated"), t("累计 CPU 时间（秒，单线程）", "CPU time so far (s, one thread)"))])


TIMELINE_MARKS = dict(greater=("", ""), less=("（反了：被干扰）", " (reversed: disturbed)"), same=("（持平）", " (level)"))


def timeline_title(verdict=None) -> str:
    """Section 2's figure title; with the section's verdict, the prefill ÷ decode step it measured."""
    base = t("预填充与解码：每一步处理多少 token、花多少时间（本机实测）",
             "Prefill and decode: tokens and time per engine step (measured here)")
    if verdict is None:
        return base
    mark = t(*TIMELINE_MARKS["less"]) if verdict.direction == "less" else verdict.mark(**TIMELINE_MARKS)
    return base + t(f"：第一个预填充步是单请求解码步的 {verdict.ratio:.1f} 倍{mark}",
                    f": the first prefill step is {verdict.ratio:.1f}× a one-request decode step{mark}")


def timeline_narration(rec):
    """Section 2 rendered from its record alone (``measure.record_timeline``)."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab01_kv_cache.measure import timeline_from_record

    rows = timeline_from_record(rec)
    v = rec.verdict("prefill_vs_decode")
    sentence = v.sentence(greater=("第一个预填充步的墙钟时间是单请求解码步的 {ratio}", "the first prefill step took {ratio} a one-request decode step"),
                          less=("这次第一个预填充步反而比单请求解码步短（{ratio}）：测量被干扰了，重跑这一格",
                                "this time the first prefill step came out shorter ({ratio}): the measurement was disturbed, rerun the cell"),
                          same=("第一个预填充步和单请求解码步一样长（{ratio}）", "the first prefill step took as long as a decode step ({ratio})"),
                          digits=1)
    return Narration((sentence,), tuple((r.step, r.prefill_tokens, r.decode_tokens, r.step_s) for r in rows),
                     timeline_title(v), {"prefill_longer": f"{v.direction}|{v.confidence}"})


def prefill_decode_figure(rows: list[StepRow], verdict=None) -> go.Figure:
    """Top: tokens per step split into prefill and decode. Bottom: each step's time. The title states
    ``verdict`` (the section record's) when given."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.55, 0.45])
    steps = list(range(1, len(rows) + 1))
    for kind, values in (("prefill", [r.prefill_tokens for r in rows]), ("decode", [r.decode_tokens for r in rows])):
        name = t("预填充 token", "prefill tokens") if kind == "prefill" else t("解码 token", "decode tokens")
        fig.add_trace(go.Bar(x=steps, y=values, name=name, marker_color=COLORS[kind]), row=1, col=1)
    totals = [r.prefill_tokens + r.decode_tokens for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=totals, text=totals, mode="text", textposition="top center",
                             showlegend=False, hoverinfo="skip"), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=[1000 * r.step_s for r in rows], name=t("步耗时", "step time"),
                             mode="lines+markers", line=dict(color=COLORS["ink"])), row=2, col=1)
    fig.update_layout(barmode="stack")
    style(fig, timeline_title(verdict), height=480)
    fig.update_xaxes(title_text=t("引擎步（本实验内的序号）", "engine step (within this run)"), row=2, col=1)
    fig.update_yaxes(title_text=t("处理的 token 数", "tokens processed"), range=[0, 1.2 * max(totals, default=1)],
                     row=1, col=1)
    fig.update_yaxes(title_text=t("步耗时（毫秒）", "step time (ms)"), rangemode="tozero", row=2, col=1)
    return fig


PART_NAMES = {
    "used": ("存有 K/V", "holds K/V"),
    "reserved_later": ("预留待用", "reserved, filled later"),
    "internal": ("内部碎片", "internal fragmentation"),
    "external": ("外部碎片", "external fragmentation"),
    "free": ("空闲", "free"),
}
PART_COLORS = {"used": COLORS["used"], "reserved_later": COLORS["reserved_unused"],
               "internal": COLORS["internal_frag"], "external": COLORS["external_frag"], "free": "#CCCCCC"}


def breakdown_figure(breakdowns: list[tuple[str, PoolBreakdown]]) -> go.Figure:
    """One horizontal 100% bar per setting: where the KV pool's slots went (step average)."""
    labels = [label for label, _ in breakdowns][::-1]
    fig = go.Figure()
    for part in PARTS:
        values = [getattr(b, part) for _, b in breakdowns][::-1]
        fig.add_trace(go.Bar(y=labels, x=values, orientation="h", name=t(*PART_NAMES[part]),
                             marker_color=PART_COLORS[part], text=[f"{v:.0f}" if v >= 4 else "" for v in values],
                             textposition="inside"))
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    style(fig, t("KV 池里的槽位都去哪了（各步平均）", "Where the KV pool's slots went (mean over steps)"),
          t("占 KV 池的比例（%）", "share of the KV pool (%)"), height=120 + 60 * len(breakdowns))
    fig.update_xaxes(range=[0, 100])
    return fig


def pool_run_name(run: PoolRun, index: int) -> str:
    """The three runs of section 5: the pool that holds everything, the small one, the small one frugally."""
    if index == 0:
        return t(f"池够大（{run.num_blocks} 块）", f"pool fits all ({run.num_blocks} blocks)")
    if index == 1:
        return t(f"池太小（{run.num_blocks} 块）", f"pool too small ({run.num_blocks} blocks)")
    return t(f"同一个小池，最多同时 {run.max_num_seqs} 个请求", f"same small pool, at most {run.max_num_seqs} at once")


def preemption_figure(*runs: PoolRun) -> go.Figure:
    """Work (tokens computed, the recomputed part on top) and engine steps for the same requests: exact
    counts (a time bar would mix recomputation, smaller batches and the machine's other programs)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.15)
    names = [pool_run_name(r, i) for i, r in enumerate(runs)]
    fig.add_trace(go.Bar(x=names, y=[r.tokens_needed for r in runs], name=t("必需的计算", "work needed"),
                         marker_color=COLORS["used"]), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[r.tokens_recomputed for r in runs], name=t("抢占后重算", "recomputed after preemption"),
                         marker_color=COLORS["internal_frag"]), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[r.num_steps for r in runs], name=t("引擎步数", "engine steps"),
                         marker_color=COLORS["ink"], showlegend=False), row=1, col=2)
    fig.update_layout(barmode="stack")
    style(fig, preemption_title(runs))
    return axis_titles(fig, [("", t("模型处理的 token 数", "tokens the model processed")),
                             ("", t("引擎步数（计数）", "engine steps (counted)"))])


def preemption_title(runs) -> str:
    dropped = runs[1]
    return t(f"池太小时多算了 {dropped.tokens_recomputed:,} 个 token（{dropped.num_preemptions} 次抢占）：同样的请求、同样的输出（计数）",
             f"The small pool recomputed {dropped.tokens_recomputed:,} tokens ({dropped.num_preemptions} preemptions): "
             "same requests, same output (counted)")


# ----------------------------------------------------------------------------------- sentences
# A printed conclusion is computed from the numbers, so it stays true whichever way a noisy
# measurement falls; a reversed result says what it means and what to do.

SAME_BAND = 0.1     # within ±10 %: "about the same"


def conditions_note(c: Conditions | None) -> str:
    """How the times were taken and how busy the machine was meanwhile."""
    if c is None:
        return ""
    if c.load is None:
        load = t("读不到系统负载", "no load average on this OS")
    else:
        load = t(f"测量期间 1 分钟平均负载 {c.load_before:.1f} → {c.load_after:.1f}（本机 {c.num_cpus} 个核）",
                 f"1-minute load average {c.load_before:.1f} → {c.load_after:.1f} while measuring ({c.num_cpus} cores)")
    busy = t("；机器较忙，时间可能被干扰", "; the machine was busy, times may be disturbed") if c.busy else ""
    return t(f"计时：单线程、CPU 时间；{load}{busy}。", f"Timing: one thread, CPU time; {load}{busy}.")


def time_comparison(measured, conditions: Conditions | None = None, subject: str = "") -> str:
    """``recompute ÷ cache`` as a sentence rendered from its verdict (``CacheComparison.time_verdict``;
    a bare ratio counts as one round, so it is hedged): true for any measured value, and a reversed
    result says what it means and what to do."""
    from labkit.labs.common.measure import Verdict, verdict_from_ratios

    subject = subject or t("无缓存用的 CPU 时间", "CPU time without the cache")
    v = measured if isinstance(measured, Verdict) else verdict_from_ratios(
        [measured], margin=SAME_BAND, load=conditions.load if conditions else None,
        cores=conditions.num_cpus if conditions else 1)
    load = f"{conditions.load:.1f}" if conditions and conditions.load is not None else "?"
    return v.sentence(
        greater=(f"{subject}是有缓存的 {{ratio}}", f"{subject} is {{ratio}} that with the cache"),
        same=(f"{subject}和有缓存几乎一样（是有缓存的 {{ratio}}）：上下文这么短时，每次前向的时间主要花在"
              "读一遍全部权重上，多处理几个 token 几乎不多花时间",
              f"{subject} is about the same as with the cache ({{ratio}}): at such short contexts a "
              "forward pass mostly reads all the weights once, and a few more tokens cost little extra"),
        less=(f"这次{subject}反而更少（只是有缓存的 {{ratio}}）。无缓存做的计算更多，所以这不是真实的代价："
              f"测量被干扰了，多半是机器同时在忙别的事（负载 {load}）。关掉其他程序，重新运行做测量的那一格再看",
              f"This time {subject} came out lower ({{ratio}} that with the cache). Without the cache the model "
              f"does more work, so this is not the real cost: the measurement was disturbed, most likely by other "
              f"programs on this machine (load {load}). Close them and rerun the measuring cell"))


def comparison_lines(c: CacheComparison, verdict=None) -> list[str]:
    """What cell 1.1 prints: both totals, the token count ratio of the totals (exact) and the CPU time
    ratio of the same totals (measured; ``verdict``: ``c.time_verdict(total=True)`` or the record's).
    One statistic for both ratios: the whole answer, never a per-token minimum beside a total."""
    verdict = verdict or c.time_verdict(total=True)
    lines = [t(f"有缓存：共处理 {c.total_tokens('cache'):,} 个 token，CPU 时间 {c.total_seconds('cache'):.2f} 秒",
               f"with the cache: {c.total_tokens('cache'):,} tokens processed, {c.total_seconds('cache'):.2f} s of CPU time"),
             t(f"无缓存：共处理 {c.total_tokens('recompute'):,} 个 token，CPU 时间 {c.total_seconds('recompute'):.2f} 秒",
               f"without: {c.total_tokens('recompute'):,} tokens processed, {c.total_seconds('recompute'):.2f} s of CPU time"),
             t(f"两种方式生成的 token 完全相同：{c.same_output}", f"both produced the same tokens: {c.same_output}"),
             t(f"无缓存处理的 token 数是有缓存的 {c.token_ratio():.1f} 倍（计数，不受机器忙闲影响）。",
               f"Without the cache the model processed {c.token_ratio():.1f} × as many tokens (a count: load cannot change it)."),
             time_comparison(verdict, c.conditions,
                             t("不用缓存时，整个回答的 CPU 时间", "the whole answer's CPU time without the cache"))]
    return lines + [conditions_note(c.conditions)]


# ----------------------------------------------------------------------------------- tables

CACHE_MARKS = dict(greater=("", ""), same=("（持平）", " (level)"), less=("（反了：被干扰）", " (reversed: disturbed)"))


def _cache_mark(v) -> str:
    """The table's and title's mark for a recompute ÷ cache verdict; a reversed one is flagged whatever its confidence."""
    if v.direction == "less":
        return t(*CACHE_MARKS["less"])
    return v.mark(**CACHE_MARKS)


def cumulative_title(c: CacheComparison, verdict=None) -> str:
    """Section 1.1's figure title: both totals' ratios, the time one with its verdict's mark."""
    v = verdict or c.time_verdict(total=True)
    return t(f"生成一个回答的累计代价（提示 {c.prompt_len} 个 token）：token 数 {c.token_ratio():.1f}×，"
             f"CPU 时间 {c.total_time_ratio():.2f}×{_cache_mark(v)}（无缓存 ÷ 有缓存，本机实测）",
             f"Running cost of one answer (prompt of {c.prompt_len} tokens): tokens {c.token_ratio():.1f}×, CPU time "
             f"{c.total_time_ratio():.2f}×{_cache_mark(v)} (no cache ÷ cache, measured here)")


def growing_narration(rec):
    """Section 1.1 rendered from its record alone (``measure.record_comparisons``)."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab01_kv_cache.measure import comparisons_from_record

    (c,) = comparisons_from_record(rec)
    v = rec.verdict(f"context_{c.prompt_len}")
    rows = ((t("有缓存", "with cache"), c.total_tokens("cache"), c.total_seconds("cache")),
            (t("无缓存", "no cache"), c.total_tokens("recompute"), c.total_seconds("recompute")))
    return Narration(tuple(comparison_lines(c, v)), rows, cumulative_title(c, v),
                     {"recompute_costs_more_time": f"{v.direction}|{v.confidence}"})


def contexts_narration(rec):
    """Section 1.2 rendered from its record alone."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab01_kv_cache.measure import comparisons_from_record

    comparisons = comparisons_from_record(rec)
    verdicts = [rec.verdict(f"context_{c.prompt_len}") for c in comparisons]
    table = context_table(comparisons, verdicts)
    return Narration(tuple(table.notes), tuple(tuple(r) for r in table.rows), table.caption,
                     {f"recompute_costs_more_time/context_{c.prompt_len}": f"{v.direction}|{v.confidence}"
                      for c, v in zip(comparisons, verdicts)})


def context_table(comparisons: list[CacheComparison], verdicts=None) -> Table:
    """Per context length: tokens and the fastest CPU milliseconds per new token (tokens 2..N), both ways;
    ``verdicts`` (default: each comparison's ``time_verdict()``) mark the ratio column."""
    rows = []
    verdicts = verdicts or [c.time_verdict() for c in comparisons]
    for c, v in zip(comparisons, verdicts):
        cache, recompute = after_first(c.cache), after_first(c.recompute)
        ratio = c.time_ratio()
        flag = _cache_mark(v)
        rows.append([c.prompt_len, cache[0].tokens_processed, recompute[0].tokens_processed,
                     1000 * best_seconds(cache), 1000 * best_seconds(recompute), f"{ratio:.2f}{flag}",
                     t("是", "yes") if c.same_output else t("否", "no")])
    notes = [conditions_note(comparisons[0].conditions)] if comparisons and comparisons[0].conditions else []
    if any(v.direction == "less" for v in verdicts):
        notes.append(t("有一行重算用的 CPU 时间少于缓存：重算做的计算更多，这说明那次测量被机器上的其他程序干扰了；关掉它们后重新运行测量格。",
                       "A row where recomputing beat the cache: it does more work, so that measurement was disturbed "
                       "by other programs; close them and rerun the measuring cell."))
    return Table([t("提示长度", "prompt tokens"), t("有缓存：处理 token", "cache: tokens"),
                  t("重算：处理 token", "recompute: tokens"), t("有缓存：CPU 毫秒/token", "cache: CPU ms/token"),
                  t("重算：CPU 毫秒/token", "recompute: CPU ms/token"), t("重算 ÷ 缓存（CPU 时间）", "recompute ÷ cache (CPU time)"),
                  t("输出相同", "same output")], rows,
                 caption=t("每个新 token 的代价（第 2 个 token 起取最快的一次，单线程 CPU 时间，本机实测）",
                           "Cost per new token (fastest from the 2nd token on, one-thread CPU time, measured here)"),
                 notes=notes)


def shapes_table(shapes: list[KVShape]) -> Table:
    rows = [[s.name, s.num_layers, s.num_kv_heads, s.head_dim, s.dtype_bytes, s.formula(),
             human_bytes(s.bytes_per_token)] for s in shapes]
    return Table([t("模型", "model"), t("层数", "layers"), t("KV 头", "KV heads"), "head_dim", t("字节/数", "bytes/number"),
                  t("公式", "formula"), t("每 token", "per token")], rows)


def budget_table(budget: MemoryBudget, rows: list[KVBudgetRow]) -> Table:
    room = budget.available_bytes or budget.total_bytes
    body = [[r.model, human_bytes(r.bytes_per_token), human_bytes(r.weight_bytes) if r.weight_bytes else "—",
             r.tokens_that_fit if r.tokens_that_fit else t("权重都放不下", "weights do not fit")] for r in rows]
    which = t("可用", "available") if budget.available_bytes else t("总", "total")
    device = budget.device if budget.name == budget.device else f"{budget.device} ({budget.name})"
    return Table([t("模型", "model"), t("KV/token", "KV/token"), t("权重（约）", "weights (approx.)"),
                  t("放得下的 token 数", "tokens that fit")], body,
                 caption=t(f"你的 {device}：{which} {human_bytes(room)}，读自 {budget.source}",
                           f"Your {device}: {human_bytes(room)} {which}, read from {budget.source}"),
                 notes=[t("放得下的 token 数 = (内存 − 权重) ÷ 每 token 的 KV 字节；未计激活值和框架开销，是上限。",
                          "tokens that fit = (memory − weights) ÷ KV bytes per token; activations and framework "
                          "overhead are ignored, so this is an upper bound.")])


def fragmentation_table(reports: list[FragmentationReport]) -> Table:
    rows = [[r.label, r.num_requests, r.num_steps, r.mean_running, r.breakdown.used, r.breakdown.reserved_later,
             r.breakdown.internal, r.breakdown.external, r.breakdown.free, r.breakdown.waste_of_reserved,
             t("模拟", "simulated") if r.simulated else t("真实模型", "real model")] for r in reports]
    return Table([t("设置", "setting"), t("请求数", "requests"), t("步数", "steps"), t("平均并发", "mean running"),
                  t("存有 K/V %", "holds K/V %"), t("预留待用 %", "reserved later %"), t("内部碎片 %", "internal %"),
                  t("外部碎片 %", "external %"), t("空闲 %", "free %"), t("预留中的浪费 %", "waste of reserved %"),
                  t("模型", "model")], rows,
                 caption=t("KV 池各部分占比（各步平均，本次运行实测）", "KV pool split (mean over steps, measured in this run)"))


def preemption_table(*runs: PoolRun) -> Table:
    rows = [[pool_run_name(r, i), r.num_blocks, r.max_num_seqs, r.num_preemptions, r.tokens_lost, r.tokens_needed,
             r.tokens_processed, r.tokens_recomputed, r.num_steps] for i, r in enumerate(runs)]
    return Table([t("设置", "setting"), t("KV 块数", "KV blocks"), t("最多同时运行", "max running"),
                  t("抢占次数", "preemptions"), t("丢弃的 K/V 条目", "K/V entries dropped"),
                  t("必需的 token", "tokens needed"), t("实际处理的 token", "tokens processed"),
                  t("重算的 token", "tokens recomputed"), t("引擎步数", "engine steps")], rows,
                 caption=t("同样的请求：池够大、池太小、同一个小池少接纳几个（引擎计数，每台机器都一样）",
                           "Same requests: a pool that fits all, a small pool, the same small pool admitting fewer "
                           "(engine counts, the same on every machine)"))


def preemption_lines(runs) -> list[str]:
    """Section 5's sentences, from the counts alone."""
    kept, dropped, *rest = runs
    lines = [t(f"池太小：抢占 {dropped.num_preemptions} 次，丢掉 {dropped.tokens_lost:,} 个 K/V 条目，模型多算了 "
               f"{dropped.tokens_recomputed:,} 个 token（必需的 {dropped.tokens_needed:,} 个之外，多了 "
               f"{100 * dropped.tokens_recomputed / dropped.tokens_needed:.0f}%）。",
               f"Small pool: {dropped.num_preemptions} preemption(s), {dropped.tokens_lost:,} K/V entries dropped, "
               f"{dropped.tokens_recomputed:,} tokens recomputed ({100 * dropped.tokens_recomputed / dropped.tokens_needed:.0f}% "
               f"on top of the {dropped.tokens_needed:,} needed).")]
    for frugal in rest:
        lines.append(t(f"同一个小池、最多同时 {frugal.max_num_seqs} 个请求：抢占 {frugal.num_preemptions} 次，重算 "
                       f"{frugal.tokens_recomputed:,} 个 token；代价是每步批里的请求更少，用了 {frugal.num_steps} 步"
                       f"（池够大时 {kept.num_steps} 步，池太小时 {dropped.num_steps} 步）。",
                       f"Same small pool, at most {frugal.max_num_seqs} at once: {frugal.num_preemptions} preemption(s), "
                       f"{frugal.tokens_recomputed:,} tokens recomputed; the price is fewer requests per step: "
                       f"{frugal.num_steps} steps (pool that fits all: {kept.num_steps}, small pool: {dropped.num_steps})."))
    return lines


def preemption_narration(rec):
    """Section 5 rendered from its record alone (``preemption.record_pools``)."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab01_kv_cache.preemption import pools_from_record

    runs = pools_from_record(rec)
    return Narration(tuple(preemption_lines(runs)), tuple(tuple(r) for r in preemption_table(*runs).rows),
                     preemption_title(runs),
                     {"preemption_recomputes": "yes" if runs[1].tokens_recomputed > 0 else "no",
                      **({"frugal_recomputes": "yes" if runs[2].tokens_recomputed > 0 else "no"} if len(runs) > 2 else {})})


def summary_table(comparison: CacheComparison, facts: KVTensorFacts, report: FragmentationReport) -> Table:
    """The three numbers to remember, each from this run."""
    rows = [
        [t("上下文 {n} 时，不用 KV 缓存每个新 token 的 CPU 时间是用缓存的几倍",
           "CPU time per new token without the KV cache ÷ with it, at context {n}")
         .format(n=comparison.prompt_len), f"{comparison.time_ratio():.1f} ×" + (
             t("（反了：测量被干扰，见第 1 节）", " (reversed: disturbed, see section 1)")
             if comparison.time_verdict().direction == "less" else ""),
         t("第 1 节，真实模型", "section 1, real model")],
        [t("SmolLM2-135M 每个 token 的 KV 字节（{d}）", "SmolLM2-135M KV bytes per token ({d})").format(d=facts.dtype),
         f"{facts.bytes_per_token:,.0f} B", t("第 3 节，引擎的 K/V 张量", "section 3, the engine's K/V tensor")],
        [t("最大长度连续预留时，KV 池中真正存有 K/V 的比例", "share of the KV pool holding K/V under max-length reservation"),
         f"{report.breakdown.used:.0f} %", report.label],
    ]
    return Table([t("要记住的数", "number to remember"), t("本次测得", "measured here"), t("来自", "from")], rows)
