"""Lab 05's tables, figures and the advisor widget. Views draw; they never measure."""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.labs.common.measure import Verdict
from labkit.labs.common.references import cite_line
from labkit.labs.lab05_engine_choice import advisor as adv
from labkit.labs.lab05_engine_choice.ablation import AblationRow, table_cells
from labkit.labs.lab05_engine_choice.chapter import REGIMES, Stage
from labkit.labs.lab05_engine_choice.compare import Gain, gains
from labkit.labs.lab05_engine_choice.diagnose import LoadPoint
from labkit.labs.lab05_engine_choice.facts import (
    CROSS_ENGINE,
    ENGINEERING,
    FEATURES,
    PHILOSOPHY,
    PUBLISHED,
    TRTLLM_MECHANISM,
    cost_table,
    find,
    lookup,
)
from labkit.labs.lab05_engine_choice.fixed_shapes import FixedShapeResult
from labkit.report.figures import style
from labkit.report.tables import Table, fmt


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


def cross_engine_table() -> Table:
    """Only comparisons one party made with one method: their rankings mean something (and still disagree)."""
    rows = [[p.measured_by, p.model, p.hardware, p.method, p.citation.value, p.citation.source] for p in CROSS_ENGINE]
    return Table([t("谁测的", "measured by"), t("模型", "model"), t("硬件", "hardware"), t("方法", "method"),
                  t("结果", "result"), t("出处", "source")], rows,
                 caption=t("同一方、同一方法测的跨引擎对比", "Cross-engine comparisons by one party with one method"),
                 notes=[t("上表 TensorRT-LLM 的 Llama-3.1-8B FP8 数字是它自己的 trtllm-bench，表里没有别的引擎测同一模型，"
                          "所以那一行给不出排名。", "The Llama-3.1-8B FP8 rows above are TensorRT-LLM's own trtllm-bench "
                          "figures; no other engine is cited on that model, so they give no ranking.")])


def trtllm_mechanism_table() -> Table:
    rows = []
    for m in TRTLLM_MECHANISM:
        engine_cite, torch_cite = m.citations
        rows.append([t(m.aspect_zh, m.aspect_en), t(m.engine_zh, m.engine_en), t(m.pytorch_zh, m.pytorch_en),
                     t(m.vllm_zh, m.vllm_en),
                     "; ".join(c.source for c in (engine_cite, torch_cite, *m.vllm_citations) if c is not None)])
    return Table([t("机制", "mechanism"), t("TensorRT 后端（引擎）", "TensorRT backend (engine)"),
                  t("PyTorch 后端", "PyTorch backend"), t("vLLM V1（对照）", "vLLM V1 (for comparison)"),
                  t("出处（文档版本）", "source (documentation version)")], rows,
                 caption=t("TensorRT-LLM 的做法：每一项注明文档版本；最后一列是 vLLM V1 对同一件事的做法",
                           "TensorRT-LLM in its own terms, each with its documentation version; the last column is what "
                           "vLLM V1 does about the same thing"),
                 notes=[t("提前构建、自动调优和插件是 TensorRT 后端独有的；CUDA 图补齐、torch.compile、连续（飞行中）批处理、"
                          "分页 KV 和 FP8 / NVFP4 两家都做。",
                          "The ahead-of-time build, auto-tuning and plugins are the TensorRT backend's own; CUDA-graph "
                          "padding, torch.compile, continuous (in-flight) batching, paged KV and FP8 / NVFP4 are done by both "
                          "engines.")])


def features_table() -> Table:
    """Serving features the chapter names, engine by engine, each with its reference row."""
    rows = [[t(f.feature_zh, f.feature_en), f.engine, t(f.fact.zh, f.fact.en), f.fact.citation.source] for f in FEATURES]
    return Table([t("功能", "feature"), t("引擎", "engine"), t("文档或测量怎么说", "what the docs or measurements say"),
                  t("出处", "source")], rows,
                 caption=t("服务框架、预填充/解码分离与投机解码：各引擎的做法（逐行引用）",
                           "Serving front end, disaggregated prefill/decode and speculative decoding, engine by engine (each cited)"),
                 notes=[t("投机解码各行的负载、模型和硬件都不同，倍数不能互相比较；没列出的组合不是“不支持”，只是这里没有核实的出处。",
                          "The speculative-decoding rows differ in workload, model and hardware, so their gains do not compare; "
                          "a combination not listed is not 'unsupported', only not cited here.")])


def cite_lines(claims: list[tuple[str, str]]) -> list[str]:
    """One line per cited row, Chinese first: ``zh（English claim）：value —— source``."""
    return [cite_line(claim, zh) for claim, zh in claims]


_ARMS = {"eager": ("不构建（eager，精确形状）", "no build (eager, exact shape)"),
         "dynamic": ("动态形状编译（dynamic=True）", "compiled for dynamic shapes (dynamic=True)"),
         "fixed": ("固定形状分桶编译（dynamic=False，补齐）", "compiled per fixed bucket (dynamic=False, padded)")}


def fixed_shape_table(r: FixedShapeResult) -> Table:
    c = r.comparison
    rows = []
    for arm, (zh, en) in _ARMS.items():
        v = c.arms[arm]
        rows.append([t(zh, en), f"{1e3 * v.best:.3f}", step_ratio_cell(r, arm), f"{v.spread:.2f}", f"{r.build_s[arm]:.2f}",
                     f"{r.rebuild_s[arm]:.2f}",
                     f"{100 * r.padding_waste:.1f}" if arm == "fixed" else "0"])
    return Table([t("做法", "arm"), t("每步 CPU 时间（ms，最好一轮）", "CPU ms per step (best round)"),
                  t("÷ eager（各轮配对之比的结论）", "over eager (verdict of the paired rounds)"),
                  t("轮间波动（最慢/最快）", "round spread (slowest / fastest)"), t("构建 CPU 秒", "build CPU s"),
                  t(f"形状集合变化：批 {r.new_batch} 首步 CPU 秒", f"shape set changes: first step at batch {r.new_batch}, CPU s"),
                  t("补齐浪费（%）", "padding waste (%)")], rows,
                 caption=t(f"为固定形状构建 vs 动态形状：{r.num_layers} 层的解码稠密部分，{len(r.trace)} 步的批大小轨迹，"
                           f"桶 {'/'.join(map(str, r.buckets))}", f"Fixed shapes vs dynamic shapes: the dense decode step of "
                           f"{r.num_layers} layers, a {len(r.trace)}-step batch trace, buckets {'/'.join(map(str, r.buckets))}"),
                 notes=[t(f"计时：{c.clock}，交替轮次；负载 {c.loads}，{c.cores} 核。固定形状一行的真实行与 eager "
                          f"最大相差 {r.max_abs_diff:.1e}（补齐的行算完就丢）。",
                          f"Clock: {c.clock}, interleaved rounds; load {c.loads}, {c.cores} cores. "
                          f"The fixed arm's real rows differ from eager's by at most {r.max_abs_diff:.1e} (padded rows "
                          "are computed and dropped).")])


STEP_MARKS = dict(greater=("（更慢）", " (slower)"), less=("（更快）", " (faster)"), same=("（持平）", " (level)"))


def step_ratio_cell(r: FixedShapeResult, arm: str) -> str:
    """An arm's CPU time per step over eager's as its verdict states it (the sentence reads the same verdict)."""
    if arm == r.comparison.baseline:
        return t("1（基准）", "1 (baseline)")
    v = r.comparison.verdicts[arm]
    return f"{v.ratio:.2f}×" + v.mark(**STEP_MARKS)


def fixed_shape_title(r: FixedShapeResult) -> str:
    return t(f"为固定形状构建：每步 CPU 时间是 eager 的 {step_ratio_cell(r, 'fixed')}，构建与重建的 CPU 秒（本机实测）",
             f"Building for fixed shapes: CPU time per step {step_ratio_cell(r, 'fixed')} eager's; build and rebuild CPU s "
             "(measured here)")


def fixed_shape_figure(r: FixedShapeResult) -> go.Figure:
    names = [t(*_ARMS[a]) for a in _ARMS]
    fig = make_subplots(rows=1, cols=2, subplot_titles=[t("每步 CPU 时间（ms）", "CPU time per step (ms)"),
                                                        t("构建与重建（CPU 秒）", "build and rebuild (CPU s)")])
    fig.add_trace(go.Bar(x=names, y=[r.step_ms(a) for a in _ARMS], marker_color="#3182bd",
                         name=t("每步", "per step")), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[r.build_s[a] for a in _ARMS], marker_color="#fd8d3c",
                         name=t("首次构建", "first build")), row=1, col=2)
    fig.add_trace(go.Bar(x=names, y=[r.rebuild_s[a] for a in _ARMS], marker_color="#e6550d",
                         name=t(f"批 {r.new_batch} 到来（形状集合变化）", f"batch {r.new_batch} arrives (shape set changes)")),
                  row=1, col=2)
    style(fig, fixed_shape_title(r), height=460)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.35, xanchor="center", x=0.5), margin=dict(b=150))
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text=t("CPU 秒", "CPU s"), row=1, col=2)
    return fig


def fixed_shape_sentences(r: FixedShapeResult) -> list[str]:
    """The conclusions, each rendered from a verdict (timed) or from counted numbers."""
    verdicts: dict[str, Verdict] = r.comparison.verdicts
    out = [verdicts["fixed"].sentence(
        greater=("按固定桶编译、补齐之后，每步比不构建的 eager 慢：CPU 时间是它的 {ratio}",
                 "compiled per bucket and padded, a step is slower than eager: {ratio} its CPU time"),
        less=("按固定桶编译、补齐之后，每步比不构建的 eager 快：CPU 时间是它的 {ratio}",
              "compiled per bucket and padded, a step is faster than eager: {ratio} its CPU time"),
        same=("按固定桶编译、补齐之后，每步与 eager 一样快：CPU 时间是它的 {ratio}",
              "compiled per bucket and padded, a step is as fast as eager: {ratio} its CPU time"),
        unit="×")]
    out.append(verdicts["dynamic"].sentence(
        greater=("动态形状编译的每步比 eager 慢：CPU 时间是它的 {ratio}", "a dynamically compiled step is slower than eager: {ratio} its CPU time"),
        less=("动态形状编译的每步比 eager 快：CPU 时间是它的 {ratio}", "a dynamically compiled step is faster than eager: {ratio} its CPU time"),
        same=("动态形状编译的每步与 eager 一样快：CPU 时间是它的 {ratio}", "a dynamically compiled step is as fast as eager: {ratio} its CPU time"),
        unit="×"))
    out.append(t(f"代价（计数与计时）：这条轨迹上固定形状多算了 {100 * r.padding_waste:.1f}% 的补齐行；构建 {len(r.buckets)} 个桶花了 "
                 f"{r.build_s['fixed']:.1f} CPU 秒；批 {r.new_batch} 超出最大的桶，要再编译一个桶，花了 {r.rebuild_s['fixed']:.1f} CPU 秒"
                 f"（动态形状：{r.rebuild_s['dynamic']:.1f} 秒，eager：{r.rebuild_s['eager']:.2f} 秒）。",
                 f"Costs (counted and timed): on this trace the fixed arm computed {100 * r.padding_waste:.1f}% padding rows; "
                 f"building {len(r.buckets)} buckets took {r.build_s['fixed']:.1f} CPU s; batch {r.new_batch} exceeds the "
                 f"largest bucket and compiled one more, {r.rebuild_s['fixed']:.1f} CPU s (dynamic: "
                 f"{r.rebuild_s['dynamic']:.1f} s, eager: {r.rebuild_s['eager']:.2f} s)."))
    return out


def cost_view(usd_per_gpu_hour: float) -> Table:
    rows = [[c.row.engine, c.row.version, c.row.model, c.row.hardware, c.row.shown,
             f"{c.usd_per_million:.3f}", t("输入+输出", "input + output") if not c.row.output_tokens_only else t("输出", "output")]
            for c in cost_table(usd_per_gpu_hour)]
    return Table([t("引擎", "engine"), t("版本", "version"), t("模型", "model"), t("硬件", "hardware"),
                  "tok/s", t("美元/百万 token", "$ / million tokens"), t("token 计数", "tokens counted")], rows,
                 caption=t(f"每百万 token 成本，GPU 价格 {usd_per_gpu_hour:g} 美元/小时（示例价格，不是事实）",
                           f"Cost per million tokens at {usd_per_gpu_hour:g} $/GPU-hour (example price, not a fact)"),
                 notes=[t("成本 = 每小时价格 ×GPU 数 /（tok/s × 3600）× 10^6；吞吐来自上表的引用。",
                          "cost = price per hour × GPUs / (tok/s × 3600) × 10^6; throughputs cited in the table above."),
                        t("各行的模型（8B 与 120B）、负载、测量方与 token 口径（只数输出，或输入 + 输出）都不同："
                          "行与行之间的成本差不是“哪个引擎便宜几倍”。只有同一方、同一方法、同一模型的几行（如 gpt-oss-120b 的三行）可以互相比较。",
                          "The rows differ in model (8B vs 120B), workload, who measured and which tokens are counted (output "
                          "only, or input + output): a cost gap between rows is not 'engine X is N times cheaper'. Only rows "
                          "measured by one party, one method, one model (e.g. the three gpt-oss-120b rows) compare.")])


def engineering_table() -> Table:
    rows = [[e.engine, t(e.steps_zh, e.steps_en), find(e.hardware_claim).value, find(e.hardware_claim).source]
            for e in ENGINEERING]
    return Table([t("引擎", "engine"), t("工程步骤", "engineering steps"), t("硬件", "hardware"), t("出处", "source")],
                 rows, caption=t("工程成本", "Engineering cost"))


GAIN_MARKS = dict(greater=("（更多）", " (more)"), less=("（更少）", " (fewer)"), same=("（持平）", " (level)"))


def gain_cell(g: Gain) -> str:
    """A gain as the table prints it: the ratio and its verdict's mark (the sentences read the same verdict)."""
    return f"{g.throughput_x:.2f}×" + (g.verdict.mark(**GAIN_MARKS) if g.verdict is not None else "")


def cells_table(cells: list[dict], gains_: list[Gain], workload: str) -> Table:
    """§2's table of one workload from its cells (``ablation.table_cells``) and gains: what the record holds."""
    by_variant = {g.variant: g for g in gains_}
    body = []
    for c in cells:
        label = t(c["zh"], c["en"])
        if not c["available"]:
            body.append([label, "—", "—", "—", "—", "—", "—", "—", t(c["why_not_zh"], c["why_not_en"])])
            continue
        gain = (t("1（基准）", "1 (baseline)") if c["variant"] == "baseline" else
                gain_cell(by_variant[c["variant"]]) if c["variant"] in by_variant else "—")
        body.append([label, f"{c['output_throughput']:.2f}", f"{c['tokens_per_cpu_s']:.1f}", gain, fmt(c["ttft_p99_ms"], 0),
                     fmt(c["tpot_p99_ms"], 0), "—" if c["goodput"] is None else f"{c['goodput']:.2f}",
                     f"{c['memory_bytes'] / 2**20:.0f}", f"{c['completed']}/{c['completed'] + c['failed']}"])
    notes = [t("每 CPU 秒的 token 数不受邻居抢 CPU 的影响，比墙钟吞吐更稳；“÷ 基线”一列是各轮配对之比的结论，标着“噪声之内”或“机器正忙”的不要当真。",
               "Tokens per CPU second are not skewed by neighbours competing for the CPU; steadier than wall throughput. "
               "The 'over the baseline' column is the verdict of the paired rounds; do not trust one marked 'within noise' "
               "or 'machine busy'.")]
    notes += _compile_note(cells, by_variant.get("compile"))
    return Table([t("配置", "configuration"), t("输出 tok/s（墙钟）", "output tok/s (wall)"),
                  t("输出 tok / CPU 秒", "output tok / CPU s"), t("每 CPU 秒 token ÷ 基线", "tok / CPU s over the baseline"),
                  "TTFT P99 (ms)", "TPOT P99 (ms)",
                  "goodput (req/s)", t("内存：权重+KV 峰值 (MiB)", "memory: weights + peak KV (MiB)"),
                  t("完成", "done")], body, caption=t(f"负载 {workload}：一次只改一个开关", f"workload {workload}: one switch at a time"),
                 notes=notes)


def ablation_table(rows: list[AblationRow], workload: str) -> Table:
    return cells_table(table_cells(rows, workload), gains(rows, workload), workload)


def _compile_note(cells: list[dict], gain: Gain | None) -> list[str]:
    mine = {c["variant"]: c for c in cells if c["available"]}
    if gain is None or gain.verdict is None or "compile" not in mine or "baseline" not in mine:
        return []
    c, b, v = mine["compile"], mine["baseline"], gain.verdict
    verdict = v.sentence(greater=("编译在这台机器上换来了更快的步", "compiling bought faster steps on this machine"),
                         less=("编译在这台机器上反而更慢", "compiling made steps slower on this machine"),
                         same=("编译没有换来看得出的提速", "compiling bought no visible speed-up"))
    return [t(f"torch.compile：准备（建引擎、编译、预热）用了 {c['setup_s']:.0f} s，基线 {b['setup_s']:.0f} s；"
              f"每 CPU 秒输出的 token 是基线的 {v.ratio:.2f} 倍。",
              f"torch.compile: setup (engine, compilation, warm-up) took {c['setup_s']:.0f} s against the baseline's "
              f"{b['setup_s']:.0f} s; output tokens per CPU second are {v.ratio:.2f}x the baseline's.") + " " + verdict]


def compile_notes(rows: list[AblationRow], workload: str) -> list[str]:
    """What compiling cost up front and bought per CPU second, from the measured rows (empty if the
    compile row was not measured)."""
    if not any(r.workload == workload and r.variant.name == "baseline" and r.available for r in rows):
        return []
    return _compile_note(table_cells(rows, workload), next((g for g in gains(rows, workload) if g.variant == "compile"), None))


def gains_title(by_workload: dict[str, list[Gain]]) -> str:
    """The figure's title: what it compares, and how many of its throughput bars carry a hedge."""
    verdicts = [g.verdict for gs in by_workload.values() for g in gs if g.verdict is not None]
    busy = sum(v.busy for v in verdicts)
    noise = sum(v.confidence == "within noise" for v in verdicts)
    hedge = []
    if busy:
        hedge.append(t(f"{busy} 个吞吐比测量时机器正忙", f"{busy} throughput ratio(s) measured while the machine was busy"))
    if noise:
        hedge.append(t(f"{noise} 个在噪声之内", f"{noise} within noise"))
    tail = t(f"；{'，'.join(hedge)}", f"; {', '.join(hedge)}") if hedge else t("；吞吐比的结论都清楚", "; every throughput verdict clear")
    return t(f"每个开关的代价与收益（相对基线 = 1，同一负载，本机实测{tail}）",
             f"What each switch costs and buys (baseline = 1, same workload, measured here{tail})")


def gains_figure(cells: dict[str, list[dict]], by_workload: dict[str, list[Gain]]) -> go.Figure:
    """Three panels, each against the baseline (= 1): throughput, TPOT P99 and memory. The legend sits
    under the panels (not over the third title); ticks are the variants' names in the lab's language."""
    titles = [t("输出 token / CPU 秒（越高越好）", "output tokens per CPU s (higher is better)"),
              t("TPOT P99（越低越好）", "TPOT P99 (lower is better)"), t("内存（越低越好）", "memory (lower is better)")]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles)
    colors = ["#3182bd", "#e6550d", "#31a354", "#756bb1"]
    for i, (w, g) in enumerate(by_workload.items()):
        x = [t(v.zh, v.en) for v in g]
        by_name = {c["variant"]: c for c in cells[w] if c["available"]}
        base = by_name["baseline"]["tpot_p99_ms"]
        tpot = [None if by_name[v.variant]["tpot_p99_ms"] is None or not base
                else by_name[v.variant]["tpot_p99_ms"] / base for v in g]
        for col, y in enumerate(([v.throughput_x for v in g], tpot, [v.memory_x for v in g]), start=1):
            fig.add_trace(go.Bar(name=t(f"负载 {w}", f"workload {w}"), x=x, y=y, marker_color=colors[i % len(colors)],
                                 legendgroup=w, showlegend=col == 1), row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dot")
    style(fig, gains_title(by_workload), height=600)
    # The legend sits under the panels (over them it hid the third title), and well below the
    # rotated variant names: at y = -0.32 it collided with them.
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.6, xanchor="center", x=0.5),
                      margin=dict(b=240))
    fig.update_xaxes(tickangle=-40)
    fig.update_yaxes(title_text=t("相对基线（倍）", "relative to the baseline (×)"), row=1, col=1)
    return fig


def ablation_figure(rows: list[AblationRow], workloads: list[str]) -> go.Figure:
    return gains_figure({w: table_cells(rows, w) for w in workloads}, {w: gains(rows, w) for w in workloads})


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
    return style(fig, diagnosis_title(points), t("时间 (s)", "time (s)"), t("KV 使用率 (%)", "KV usage (%)"))


def diagnosis_title(points: list[LoadPoint]) -> str:
    hi = points[-1]
    kv = "—" if hi.peak_kv_usage is None else f"{100 * hi.peak_kv_usage:.0f}%"
    pre = 0 if hi.preemptions is None else int(hi.preemptions)
    return t(f"运行中的 KV 使用率（labkit:kv_cache_usage_perc）：并发 {hi.concurrency} 时峰值 {kv}，抢占 {pre} 次",
             f"KV usage during the run (labkit:kv_cache_usage_perc): peak {kv} at concurrency {hi.concurrency}, "
             f"{pre} preemptions")


def chapter_figure(stages: list[Stage]) -> go.Figure:
    """Two panels that are never multiplied together: throughput stages (many requests under load) and
    the latency stage (one request at a time)."""
    colors = {"simulated": "#9ecae1", "measured": "#31a354", "recorded": "#006d2c", "cited": "#fd8d3c"}
    kinds = {"simulated": t("模拟", "simulated"), "measured": t("本次实测", "measured here"),
             "recorded": t("你前面实验的实测（results/）", "measured in your earlier labs (results/)"), "cited": t("引用", "cited")}
    titles = [t("吞吐：负载下、许多请求（每一步相对上一步）", "throughput: many requests under load (each over the previous)"),
              t("延迟：一次一个请求（相对基线）", "latency: one request at a time (over the baseline)")]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], subplot_titles=titles)
    shown: set[str] = set()
    for col, regime in enumerate(REGIMES, start=1):
        mine = [s for s in stages if s.regime == regime]
        for kind in colors:
            st = [s for s in mine if s.kind == kind and s.gain is not None]
            if not st:
                continue
            fig.add_trace(go.Bar(x=[t(s.zh, s.en) for s in st], y=[s.gain for s in st], name=kinds[kind],
                                 marker_color=colors[kind], text=[f"{s.gain:.2f}×" for s in st],
                                 hovertext=[s.source for s in st], legendgroup=kind, showlegend=kind not in shown),
                          row=1, col=col)
            shown.add(kind)
        fig.update_xaxes(categoryorder="array", categoryarray=[t(s.zh, s.en) for s in mine], tickangle=-30, row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dot")
    style(fig, t("本章一图：吞吐的阶段与延迟的阶段分开看", "The chapter in one figure: throughput stages apart from the latency stage"),
          height=480)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.35, xanchor="center", x=0.5), margin=dict(b=150))
    fig.update_yaxes(title_text=t("倍数（倍）", "gain (×)"), row=1, col=1)
    return fig


# ------------------------------------------------------------------------------ advisor

def reason_source(r: adv.Reason) -> str:
    """What backs a reason, as the learner reads it: the citation, or which measurement / note."""
    if r.kind == "measured":
        return t("本次实测：", "measured in this run: ") + r.source.split(":", 1)[1].strip()
    if r.kind == "note":
        return t("说明：", "note: ") + r.source.split(":", 1)[1].strip()
    return str(lookup(r.source))


def recommendation_html(rec: adv.Recommendation) -> str:
    items = []
    for r in rec.reasons:
        sign = "+" if r.weight > 0 else ("−" if r.weight < 0 else "·")
        who = f"[{html.escape(r.engine)}] " if r.engine else ""
        items.append(f"<li>{sign} {who}{html.escape(t(r.text_zh, r.text_en))}"
                     f"<br><span style='color:#666;font-size:85%'>{html.escape(reason_source(r))}</span></li>")
    scores = ", ".join(f"{e} {rec.scores[e]}" for e in rec.ranked)
    tie = rec.tie_note()
    tie_html = f"<div style='color:#666'>{html.escape(t(*tie))}</div>" if tie else ""
    return (f"<div><b>{t('推荐', 'Recommendation')}：{html.escape(rec.engine)}</b>"
            f"<span style='color:#666'>（{t('得分', 'scores')}：{html.escape(scores)}）</span>{tie_html}"
            f"<ul>{''.join(items)}</ul></div>")


def advisor_widget(initial: adv.Scenario | None = None, measured: adv.Measured | None = None) -> W.VBox:
    """Dropdowns for a scenario and the advisor's answer; ``measured`` (this run's section-2 gains)
    lets the CPU scenarios quote this machine's numbers."""
    s = initial or adv.Scenario()
    controls = {
        "hardware": W.Dropdown(options=adv.HARDWARE, value=s.hardware, description=t("硬件", "hardware")),
        "latency_slo": W.Dropdown(options=adv.LEVELS, value=s.latency_slo, description=t("延迟要求", "latency SLO")),
        "throughput": W.Dropdown(options=adv.LEVELS, value=s.throughput, description=t("吞吐需求", "throughput")),
        "model_churn": W.Dropdown(options=adv.CHURN, value=s.model_churn, description=t("换模型", "model churn")),
        "quantization": W.Dropdown(options=adv.QUANT, value=s.quantization, description=t("量化", "quantization")),
        "team": W.Dropdown(options=adv.TEAMS, value=s.team, description=t("团队", "team")),
        "operations": W.Dropdown(options=adv.OPERATIONS, value=s.operations, description=t("运维", "operations")),
        "concurrency": W.Dropdown(options=adv.CONCURRENCY, value=s.concurrency, description=t("并发", "concurrency")),
        "structured_output": W.Checkbox(value=s.structured_output, description=t("结构化输出", "structured output")),
        "multi_lora": W.Checkbox(value=s.multi_lora, description="multi-LoRA"),
    }
    out = W.HTML()

    def update(_change=None) -> None:
        scenario = adv.Scenario(**{k: c.value for k, c in controls.items()})
        out.value = recommendation_html(adv.recommend(scenario, measured))

    for c in controls.values():
        c.observe(update, names="value")
    update()
    return W.VBox([W.HBox(list(controls.values())[:4], layout=W.Layout(flex_flow="row wrap")),
                   W.HBox(list(controls.values())[4:], layout=W.Layout(flex_flow="row wrap")), out])


def scenarios_table(measured: adv.Measured | None = None) -> Table:
    rows = []
    for name, s in adv.SCENARIOS.items():
        rec = adv.recommend(s, measured)
        top = [r for r in rec.reasons if r.engine == rec.engine and r.weight > 0][:2]
        tie = rec.tie_note()
        rows.append([t(f"{adv.SCENARIO_NAMES_ZH[name]}（{name}）", name), rec.engine, rec.runner_up or "—",
                     " / ".join(t(r.text_zh, r.text_en) for r in top) + (" " + t(*tie) if tie else "") or "—"])
    return Table([t("场景", "scenario"), t("推荐", "recommendation"), t("次选", "runner-up"), t("主要理由", "key reasons")],
                 rows, caption=t("命名场景与建议", "Named scenarios and their recommendation"),
                 notes=[t(f"同分时按固定顺序 {' → '.join(adv.TIE_ORDER)} 选（硬件覆盖最广者优先）。",
                          f"Equal scores are broken by the fixed order {' → '.join(adv.TIE_ORDER)} (broadest hardware first).")])


def summary_table(rows: list[AblationRow], workloads: list[str], points: list[LoadPoint]) -> Table:
    body = []
    from labkit.labs.lab05_engine_choice.compare import clear_order

    for w in workloads:
        top = (clear_order(gains(rows, w)) or [[]])[0]
        top = [g for g in top if g.verdict.direction == "greater"]
        value = ("；".join(f"{t(g.zh, g.en)}: {g.throughput_x:.2f}×" for g in top) if top else
                 t("本次没有结论清楚的收益（在噪声之内或机器正忙）", "no clear gain this time (within noise or machine busy)"))
        body.append([t(f"负载 {w} 上收益最大的开关（只看结论清楚的；分不出高下的并列）",
                       f"biggest gain on workload {w} (clear verdicts only; ties listed together)"), value,
                     t("本次实测（每 CPU 秒输出 token）", "measured here (output tokens per CPU s)")])
    hi = points[-1]
    body.append([t(f"并发 {hi.concurrency} 时 KV 使用峰值 / 主机时间占比", f"peak KV usage / host share at concurrency {hi.concurrency}"),
                 f"{fmt(None if hi.peak_kv_usage is None else 100 * hi.peak_kv_usage, 0)}% / {100 * hi.host_share:.1f}%",
                 t("本次实测（/metrics 与每步事件）", "measured here (/metrics and step events)")])
    return Table([t("要记住的数", "number to remember"), t("数值", "value"), t("来源", "source")], body,
                 caption=t("小结", "Summary"))
