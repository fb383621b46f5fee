"""Lab 05's tables, figures and the advisor widget. Views draw; they never measure."""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.labs.common.figures import style
from labkit.labs.common.tables import Table, fmt
from labkit.labs.lab05_engine_choice import advisor as adv
from labkit.labs.lab05_engine_choice.ablation import AblationRow
from labkit.labs.lab05_engine_choice.chapter import Stage
from labkit.labs.lab05_engine_choice.compare import gains, throughput_verdict
from labkit.labs.lab05_engine_choice.diagnose import LoadPoint
from labkit.labs.lab05_engine_choice.facts import ENGINEERING, PHILOSOPHY, PUBLISHED, cost_table, find, lookup


def philosophy_table() -> Table:
    rows = [[engine, t(f.zh, f.en), str(f.citation)] for engine, facts in PHILOSOPHY.items() for f in facts]
    return Table([t("引擎", "engine"), t("设计取向", "design choice"), t("出处", "source")], rows,
                 caption=t("两种哲学（及 SGLang、LMDeploy 作为背景）", "Two philosophies (SGLang and LMDeploy as context)"))


def published_table() -> Table:
    rows = [[p.engine, p.version, p.model, p.hardware, p.metric, p.shown, p.citation.source] for p in PUBLISHED]
    return Table([t("引擎", "engine"), t("版本", "version"), t("模型", "model"), t("硬件", "hardware"),
                  t("指标", "metric"), t("数值", "value"), t("出处", "source")], rows,
                 caption=t("公开测量（逐行引用）", "Published measurements (each row cited)"),
                 notes=[t("这些对比互相矛盾并不奇怪：默认参数、版本、负载（输入/输出长度、并发）各不相同。",
                          "These comparisons disagree for ordinary reasons: different defaults, versions and workloads "
                          "(input/output lengths, concurrency).")])


def cost_view(usd_per_gpu_hour: float) -> Table:
    rows = [[c.row.engine, c.row.version, c.row.model, c.row.hardware, c.row.shown,
             f"{c.usd_per_million:.3f}", t("输入+输出", "input + output") if not c.row.output_tokens_only else t("输出", "output")]
            for c in cost_table(usd_per_gpu_hour)]
    return Table([t("引擎", "engine"), t("版本", "version"), t("模型", "model"), t("硬件", "hardware"),
                  "tok/s", t("美元/百万 token", "$ / million tokens"), t("token 计数", "tokens counted")], rows,
                 caption=t(f"每百万 token 成本，GPU 价格 {usd_per_gpu_hour:g} 美元/小时（示例价格，不是事实）",
                           f"Cost per million tokens at {usd_per_gpu_hour:g} $/GPU-hour (example price, not a fact)"),
                 notes=[t("成本 = 每小时价格 ×GPU 数 /（tok/s × 3600）× 10^6；吞吐来自上表的引用。",
                          "cost = price per hour × GPUs / (tok/s × 3600) × 10^6; throughputs cited in the table above.")])


def engineering_table() -> Table:
    rows = [[e.engine, t(e.steps_zh, e.steps_en), find(e.hardware_claim).value, find(e.hardware_claim).source]
            for e in ENGINEERING]
    return Table([t("引擎", "engine"), t("工程步骤", "engineering steps"), t("硬件", "hardware"), t("出处", "source")],
                 rows, caption=t("工程成本", "Engineering cost"))


def ablation_table(rows: list[AblationRow], workload: str) -> Table:
    body = []
    for r in (r for r in rows if r.workload == workload):
        label = t(r.variant.zh, r.variant.en)
        if not r.available:
            body.append([label, "—", "—", "—", "—", "—", "—", t(r.variant.why_not_zh, r.variant.why_not_en)])
            continue
        m = r.metrics
        body.append([label, f"{m.output_throughput:.2f}", f"{r.tokens_per_cpu_s:.1f}", fmt(m.ttft.p99_ms, 0),
                     fmt(m.tpot.p99_ms, 0), "—" if m.goodput is None else f"{m.goodput:.2f}",
                     f"{r.memory_bytes / 2**20:.0f}", f"{m.completed}/{m.completed + m.failed}"])
    notes = [t("每 CPU 秒的 token 数不受邻居抢 CPU 的影响，比墙钟吞吐更稳。",
               "Tokens per CPU second are not skewed by neighbours competing for the CPU; steadier than wall throughput.")]
    notes += compile_notes(rows, workload)
    return Table([t("配置", "configuration"), t("输出 tok/s（墙钟）", "output tok/s (wall)"),
                  t("输出 tok / CPU 秒", "output tok / CPU s"), "TTFT P99 (ms)", "TPOT P99 (ms)",
                  "goodput (req/s)", t("内存：权重+KV 峰值 (MiB)", "memory: weights + peak KV (MiB)"),
                  t("完成", "done")], body, caption=t(f"负载 {workload}：一次只改一个开关", f"workload {workload}: one switch at a time"),
                 notes=notes)


def compile_notes(rows: list[AblationRow], workload: str) -> list[str]:
    """What compiling cost up front and bought per CPU second, from the measured rows (empty if the
    compile row was not measured)."""
    mine = {r.variant.name: r for r in rows if r.workload == workload and r.available}
    if "compile" not in mine or "baseline" not in mine:
        return []
    c, b = mine["compile"], mine["baseline"]
    v = throughput_verdict(c, b)
    verdict = v.sentence(greater=("编译在这台机器上换来了更快的步", "compiling bought faster steps on this machine"),
                         less=("编译在这台机器上反而更慢", "compiling made steps slower on this machine"),
                         same=("编译没有换来看得出的提速", "compiling bought no visible speed-up"))
    return [t(f"torch.compile：准备（建引擎、编译、预热）用了 {c.setup_s:.0f} s，基线 {b.setup_s:.0f} s；"
              f"每 CPU 秒输出的 token 是基线的 {v.ratio:.2f} 倍。",
              f"torch.compile: setup (engine, compilation, warm-up) took {c.setup_s:.0f} s against the baseline's "
              f"{b.setup_s:.0f} s; output tokens per CPU second are {v.ratio:.2f}x the baseline's.") + " " + verdict]


def ablation_figure(rows: list[AblationRow], workloads: list[str]) -> go.Figure:
    """Three panels, each against the baseline (= 1): throughput, TPOT P99 and memory."""
    titles = [t("输出 token / CPU 秒（越高越好）", "output tokens per CPU s (higher is better)"),
              t("TPOT P99（越低越好）", "TPOT P99 (lower is better)"), t("内存（越低越好）", "memory (lower is better)")]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles)
    colors = ["#3182bd", "#e6550d", "#31a354", "#756bb1"]
    for i, w in enumerate(workloads):
        g = gains(rows, w)
        x = [v.variant for v in g]
        base = next(r for r in rows if r.workload == w and r.variant.name == "baseline").metrics.tpot.p99_ms
        tpot = [None if r.metrics.tpot.p99_ms is None or not base else r.metrics.tpot.p99_ms / base
                for r in rows if r.workload == w and r.available and r.variant.name != "baseline"]
        for col, y in enumerate(([v.throughput_x for v in g], tpot, [v.memory_x for v in g]), start=1):
            fig.add_trace(go.Bar(name=w, x=x, y=y, marker_color=colors[i % len(colors)], legendgroup=w,
                                 showlegend=col == 1), row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dot")
    style(fig, t("每个开关的代价与收益（相对基线 = 1，同一负载）", "What each switch costs and buys (baseline = 1, same workload)"),
          height=420)
    fig.update_yaxes(title_text=t("相对基线（倍）", "relative to the baseline (×)"), row=1, col=1)
    return fig


def diagnosis_table(points: list[LoadPoint]) -> Table:
    rows = [[p.concurrency, fmt(None if p.peak_kv_usage is None else 100 * p.peak_kv_usage, 0), fmt(p.preemptions, 0),
             fmt(p.peak_waiting, 0), f"{100 * p.host_share:.1f}", f"{p.output_tok_s:.2f}"] for p in points]
    return Table([t("并发", "concurrency"), t("KV 使用峰值 (%)", "peak KV usage (%)"), t("抢占", "preemptions"),
                  t("排队峰值", "peak waiting"), t("主机时间占比 (%)", "host time share (%)"), "output tok/s"], rows,
                 caption=t("从 /metrics 与每步事件诊断服务", "Diagnosing the service from /metrics and step events"))


def diagnosis_figure(points: list[LoadPoint]) -> go.Figure:
    fig = go.Figure()
    for p in points:
        fig.add_trace(go.Scatter(x=[s.t_s for s in p.samples], y=[100 * (s.kv_usage or 0) for s in p.samples],
                                 mode="lines", name=t(f"并发 {p.concurrency}", f"concurrency {p.concurrency}")))
    return style(fig, t("运行中的 KV 使用率（labkit:kv_cache_usage_perc）", "KV usage during the run (labkit:kv_cache_usage_perc)"),
                 t("时间 (s)", "time (s)"), t("KV 使用率 (%)", "KV usage (%)"))


def chapter_figure(stages: list[Stage]) -> go.Figure:
    colors = {"simulated": "#9ecae1", "measured": "#31a354", "recorded": "#006d2c", "cited": "#fd8d3c"}
    kinds = {"simulated": t("模拟", "simulated"), "measured": t("本次实测", "measured here"),
             "recorded": t("你前面实验的实测（results/）", "measured in your earlier labs (results/)"), "cited": t("引用", "cited")}
    fig = go.Figure()
    for kind in colors:
        st = [s for s in stages if s.kind == kind and s.gain is not None]
        fig.add_trace(go.Bar(x=[t(s.zh, s.en) for s in st], y=[s.gain for s in st], name=kinds[kind],
                             marker_color=colors[kind], text=[f"{s.gain:.2f}×" for s in st],
                             hovertext=[s.source for s in st]))
    fig.update_xaxes(categoryorder="array", categoryarray=[t(s.zh, s.en) for s in stages])
    fig.add_hline(y=1.0, line_dash="dot")
    return style(fig, t("本章一图：每一步相对上一步的吞吐倍数", "The chapter in one figure: each stage over the previous one"),
                 t("阶段", "stage"), t("吞吐倍数（相对上一阶段，倍）", "throughput over the previous stage (×)"), height=420)


# ------------------------------------------------------------------------------ advisor

def recommendation_html(rec: adv.Recommendation) -> str:
    items = []
    for r in rec.reasons:
        src = r.source if r.source.startswith("measured") else str(lookup(r.source))
        sign = "+" if r.weight > 0 else ("−" if r.weight < 0 else "·")
        who = f"[{html.escape(r.engine)}] " if r.engine else ""
        items.append(f"<li>{sign} {who}{html.escape(t(r.text_zh, r.text_en))}"
                     f"<br><span style='color:#666;font-size:85%'>{html.escape(src)}</span></li>")
    scores = ", ".join(f"{e} {s}" for e, s in sorted(rec.scores.items(), key=lambda kv: -kv[1]))
    return (f"<div><b>{t('推荐', 'Recommendation')}：{html.escape(rec.engine)}</b>"
            f"<span style='color:#666'>（{t('得分', 'scores')}：{html.escape(scores)}）</span><ul>{''.join(items)}</ul></div>")


def advisor_widget(initial: adv.Scenario | None = None) -> W.VBox:
    s = initial or adv.Scenario()
    controls = {
        "hardware": W.Dropdown(options=adv.HARDWARE, value=s.hardware, description=t("硬件", "hardware")),
        "latency_slo": W.Dropdown(options=adv.LEVELS, value=s.latency_slo, description=t("延迟要求", "latency SLO")),
        "throughput": W.Dropdown(options=adv.LEVELS, value=s.throughput, description=t("吞吐需求", "throughput")),
        "model_churn": W.Dropdown(options=adv.CHURN, value=s.model_churn, description=t("换模型", "model churn")),
        "quantization": W.Dropdown(options=adv.QUANT, value=s.quantization, description=t("量化", "quantization")),
        "team": W.Dropdown(options=adv.TEAMS, value=s.team, description=t("团队", "team")),
        "operations": W.Dropdown(options=adv.OPERATIONS, value=s.operations, description=t("运维", "operations")),
        "structured_output": W.Checkbox(value=s.structured_output, description=t("结构化输出", "structured output")),
        "multi_lora": W.Checkbox(value=s.multi_lora, description="multi-LoRA"),
    }
    out = W.HTML()

    def update(_change=None) -> None:
        out.value = recommendation_html(adv.recommend(adv.Scenario(**{k: c.value for k, c in controls.items()})))

    for c in controls.values():
        c.observe(update, names="value")
    update()
    return W.VBox([W.HBox(list(controls.values())[:4], layout=W.Layout(flex_flow="row wrap")),
                   W.HBox(list(controls.values())[4:], layout=W.Layout(flex_flow="row wrap")), out])


def scenarios_table() -> Table:
    rows = []
    for name, s in adv.SCENARIOS.items():
        rec = adv.recommend(s)
        top = [r for r in rec.reasons if r.engine == rec.engine and r.weight > 0][:2]
        rows.append([name, rec.engine, rec.runner_up or "—", " / ".join(t(r.text_zh, r.text_en)[:60] for r in top)])
    return Table([t("场景", "scenario"), t("推荐", "recommendation"), t("次选", "runner-up"), t("主要理由", "key reasons")],
                 rows, caption=t("命名场景与建议", "Named scenarios and their recommendation"))


def summary_table(rows: list[AblationRow], workloads: list[str], points: list[LoadPoint]) -> Table:
    body = []
    for w in workloads:
        best = max(gains(rows, w), key=lambda g: g.throughput_x)
        body.append([t(f"负载 {w} 上收益最大的开关", f"biggest gain on workload {w}"), f"{best.variant}: {best.throughput_x:.2f}×",
                     t("本次实测（每 CPU 秒输出 token）", "measured here (output tokens per CPU s)")])
    hi = points[-1]
    body.append([t(f"并发 {hi.concurrency} 时 KV 使用峰值 / 主机时间占比", f"peak KV usage / host share at concurrency {hi.concurrency}"),
                 f"{fmt(None if hi.peak_kv_usage is None else 100 * hi.peak_kv_usage, 0)}% / {100 * hi.host_share:.1f}%",
                 t("本次实测（/metrics 与每步事件）", "measured here (/metrics and step events)")])
    return Table([t("要记住的数", "number to remember"), t("数值", "value"), t("来源", "source")], body,
                 caption=t("小结", "Summary"))
