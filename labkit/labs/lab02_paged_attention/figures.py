"""Lab 02 figures: titled plotly figures with labelled axes and units, from measured results only."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.kv.breakdown import PARTS, PoolBreakdown
from labkit.kv.snapshot import KVLayout
from labkit.labs.common.references import cite, percentages
from labkit.labs.lab02_paged_attention.attention_cost import IndirectionCost
from labkit.labs.lab02_paged_attention.block_map import BlockMapRun
from labkit.labs.lab02_paged_attention.block_size import BlockSizePoint
from labkit.labs.lab02_paged_attention.layouts import LayoutRun
from labkit.labs.lab02_paged_attention.sharing import ForkRun, PrefixRun
from labkit.report.figures import COLORS, axis_titles, style
from labkit.widgets.palette import request_color

PART_NAMES = {"used": ("存有 K/V", "holds K/V"), "reserved_later": ("预留待用", "reserved, filled later"),
              "internal": ("内部碎片", "internal fragmentation"), "external": ("外部碎片", "external fragmentation"),
              "free": ("空闲", "free")}
PART_COLORS = {"used": COLORS["used"], "reserved_later": COLORS["reserved_unused"], "internal": COLORS["internal_frag"],
               "external": COLORS["external_frag"], "free": "#CCCCCC"}


def block_ownership_figure(run: BlockMapRun) -> go.Figure:
    """Each physical block (y) at each step (x), coloured by the request holding it: blocks appear
    on demand, scattered over the pool, and return (blank) when their request finishes."""
    fig = go.Figure()
    for rid in run.request_ids:
        xs, ys = [], []
        for event in run.steps:
            for block, owner in enumerate(event.block_map.owner):
                if owner == rid:
                    xs.append(event.step)
                    ys.append(block)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=t(f"请求 {rid}", f"request {rid}"),
                                 marker=dict(symbol="square", size=9, color=request_color(rid))))
    style(fig, t("每个物理块在每一步属于哪个请求（真实模型，本次运行）",
                 "Which request holds each physical block at each step (real model, this run)"),
          t("引擎步", "engine step"), t("物理块号", "physical block id"), height=420)
    return fig


def breakdown_figure(rows: list[tuple[str, PoolBreakdown]], title: str | None = None) -> go.Figure:
    """One horizontal 100 % bar per setting: where the pool's slots went (step average); ``title``: the
    section's title rendered from its record (``views.layouts_narration(rec).title``)."""
    labels = [label for label, _ in rows][::-1]
    fig = go.Figure()
    for part in PARTS:
        values = [getattr(b, part) for _, b in rows][::-1]
        fig.add_trace(go.Bar(y=labels, x=values, orientation="h", name=t(*PART_NAMES[part]), marker_color=PART_COLORS[part],
                             text=[f"{v:.0f}" if v >= 4 else "" for v in values], textposition="inside"))
    fig.update_layout(barmode="stack")
    style(fig, title or t("KV 池里的槽位都去哪了（各步平均）", "Where the KV pool's slots went (mean over steps)"),
          t("占 KV 池的比例（%）", "share of the KV pool (%)"), height=140 + 55 * len(rows))
    fig.update_xaxes(range=[0, 100])
    return fig


def effective_use_figure(runs: list[LayoutRun]) -> go.Figure:
    """Effective KV use (K/V share of the whole pool, ``LayoutRun.effective_use``) of our runs beside
    the paper's Fig. 2 values, our free share written beside it (free slots are in Fig. 2's base too)."""
    labels = [r.label for r in runs]
    values = [r.effective_use for r in runs]
    colors = [COLORS["used"] if r.layout is KVLayout.PAGED else COLORS["internal_frag"] for r in runs]
    for system in ("Orca(Max)", "Orca(Oracle)"):
        labels.append(t(f"论文：{system}", f"paper: {system}"))
        values.append(percentages(cite(f"{system} KV breakdown"))[0])
        colors.append("#F4A7A6")
    labels.append(t("论文：vLLM", "paper: vLLM"))
    values.append(float(cite("vLLM KV memory holding token states").value.rstrip("%")))
    colors.append("#A6D49F")
    free = [r.breakdown.free for r in runs] + [None] * (len(values) - len(runs))
    text = [f"{v:.1f}%" + (t(f"（空闲 {f:.0f}%）", f" ({f:.0f}% free)") if f is not None and f >= 5 else "")
            for v, f in zip(values, free)]
    fig = go.Figure(go.Bar(x=values, y=labels, orientation="h", marker_color=colors, text=text, textposition="outside"))
    style(fig, t("有效 KV 利用：存有 K/V 的槽位占整个 KV 池的比例（论文图 2 的口径）",
                 "Effective KV use: share of the whole KV pool holding K/V (the paper's Fig. 2 measure)"),
          t("有效利用（%）", "effective use (%)"), height=140 + 40 * len(labels))
    fig.update_xaxes(range=[0, 110])
    fig.update_yaxes(autorange="reversed")
    return fig


def prefix_ttft_figure(off: PrefixRun, on: PrefixRun, title: str | None = None) -> go.Figure:
    """Every request's TTFT, caching off and on; ``title``: the section's title rendered from its record
    (``views.prefix_narration(rec).title``), which states the verdict the sentences state."""
    n = list(range(1, len(off.ttft_s) + 1))
    fig = go.Figure([go.Bar(x=n, y=[1000 * s for s in off.ttft_s], name=t("前缀缓存关", "prefix caching off"),
                            marker_color=COLORS["prefill"]),
                     go.Bar(x=n, y=[1000 * s for s in on.ttft_s], name=t("前缀缓存开", "prefix caching on"),
                            marker_color=COLORS["cached"])])
    style(fig, title or t(f"每个请求的首 token 延迟（共享前缀 {off.prefix_len} 个 token，真实模型）",
                          f"Time to first token per request (shared prefix of {off.prefix_len} tokens, real model)"),
          t("第几个请求", "request number"), t("TTFT（毫秒）", "TTFT (ms)"))
    return fig


def fork_figure(run: ForkRun) -> go.Figure:
    steps = [s for s in run.steps if s.table_blocks]
    x = [s.step for s in steps]
    fig = go.Figure([
        go.Scatter(x=x, y=[s.table_blocks for s in steps], name=t("不共享时需要的块", "blocks without sharing"),
                   mode="lines+markers", line=dict(color=COLORS["internal_frag"], dash="dash")),
        go.Scatter(x=x, y=[s.distinct_blocks for s in steps], name=t("实际占用的物理块", "physical blocks held"),
                   mode="lines+markers", line=dict(color=COLORS["used"])),
        go.Bar(x=x, y=[s.shared_blocks for s in steps], name=t("共享块（引用数>1）", "shared blocks (ref>1)"),
               marker_color=COLORS["cached"], opacity=0.5),
        go.Scatter(x=[s.step for s in steps if s.copies], y=[s.distinct_blocks for s in steps if s.copies],
                   text=[t(f"写时复制 ×{s.copies}", f"copy-on-write ×{s.copies}") for s in steps if s.copies],
                   mode="markers+text", textposition="top center", name=t("写时复制", "copy-on-write"),
                   marker=dict(symbol="star", size=14, color=COLORS["verify"]))])
    style(fig, t(f"并行采样 n={run.n}：共享的提示块与写时复制（真实模型，本次运行）",
                 f"Parallel sampling n={run.n}: shared prompt blocks and copy-on-write (real model, this run)"),
          t("引擎步", "engine step"), t("KV 块数", "KV blocks"))
    return fig


def block_size_figure(points: list[BlockSizePoint], title: str | None = None) -> go.Figure:
    """The three measurements per block size; ``title``: rendered from the section's record
    (``views.block_size_narration(rec).title``), stating the attention verdict the sentences state."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09)
    x = [p.block_size for p in points]
    series = [([p.waste for p in points], COLORS["internal_frag"], t("KV 浪费（模拟）", "KV waste (simulated)")),
              ([p.attention_ms for p in points], COLORS["ink"], t("注意力时间（本机）", "attention time (here)")),
              ([p.prefix_hit_rate for p in points], COLORS["cached"], t("前缀命中率（模拟）", "prefix hit rate (simulated)"))]
    for col, (y, color, name) in enumerate(series, start=1):
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, line=dict(color=color)), row=1, col=col)
        fig.add_vline(x=16, line=dict(color="#999", dash="dot"), row=1, col=col)
    fig.update_xaxes(type="log", tickvals=x)
    style(fig, title or t("块大小的权衡（虚线：vLLM 的默认 16）", "The block-size trade-off (dotted: vLLM's default 16)"))
    return axis_titles(fig, [(t("块大小（token）", "block size (tokens)"), t("浪费（%）", "waste (%)")),
                             (t("块大小（token）", "block size (tokens)"), t("毫秒/解码步", "ms per decode step")),
                             (t("块大小（token）", "block size (tokens)"), t("命中率（%）", "hit rate (%)"))])


def indirection_figure(costs: list[IndirectionCost]) -> go.Figure:
    x = [str(c.context_len) for c in costs]
    kernel = costs[0].kernel
    fig = go.Figure([go.Bar(x=x, y=[1000 * c.dense_s for c in costs], name=t(f"连续 K/V：{kernel}", f"contiguous K/V: {kernel}"),
                            marker_color=COLORS["decode"]),
                     go.Bar(x=x, y=[1000 * c.paged_s for c in costs],
                            name=t(f"分页 K/V：引擎的注意力（{kernel}）", f"paged K/V: the engine's attention ({kernel})"),
                            marker_color=COLORS["prefill"], text=[f"{c.overhead:+.0f}%" for c in costs],
                            textposition="outside")])
    from labkit.labs.lab02_paged_attention.views import indirection_title

    style(fig, indirection_title(costs),
          t("上下文长度（token）", "context length (tokens)"), t("毫秒/解码步", "ms per decode step"))
    return fig
