"""Lab 04 tables, figures and the sentences that read them. Nothing here measures.

Every comparison sentence is rendered from a ``Verdict`` (``labkit.labs.common.measure``) carried by
the rows: clear when every round agrees, hedged when the rounds straddle "no effect" or the machine
was busy. Nothing here decides "faster" or "slower" from a bare number.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.i18n import t
from labkit.labs.common.measure import Verdict, busy_warning, verdict_from_ratios
from labkit.labs.lab04_speculative.latency import StreamTimes
from labkit.labs.lab04_speculative.lossless import OTHER, SampleTest
from labkit.labs.lab04_speculative.speedup import Row
from labkit.labs.lab04_speculative.sweeps import METHOD_LABELS, BatchRow, OptimalK, batch_verdicts
from labkit.report.figures import COLORS, axis_titles, style
from labkit.report.tables import Table

WORKLOAD_LABELS = {"copy": ("抄写式编辑", "copy-heavy editing"), "chat": ("开放对话", "open chat"),
                   "code": ("代码", "code"), "json": ("固定键 JSON", "JSON with fixed keys")}
# Where each proposer is expected to pay: n-gram copies the prompt, the 2-layer draft was distilled
# from the target's chat answers; the 4-bit copy is the target itself, so it has no home domain.
HOME_WORKLOADS = {"ngram": "copy", "draft": "chat"}
NOISE = 0.05   # two k whose per-round speed-ups stay within 5 % of each other are "as good"
LINE_COLORS = {"measured": COLORS["accepted"], "textbook": COLORS["predicted"], "adjusted": "#4C78A8"}
LINE_DASH = {"measured": "solid", "textbook": "dot", "adjusted": "dash"}
MARKERS = {"measured": dict(size=10, symbol="circle"), "textbook": dict(size=9, symbol="diamond-open"),
           "adjusted": dict(size=11, symbol="square-open")}
BAR_COLOR = "#9D755D"          # the verify-cost bars: a colour no line of the sweep figure uses


def method_label(method: str) -> str:
    return t(*METHOD_LABELS[method])


def workload_label(workload: str) -> str:
    return t(*WORKLOAD_LABELS[workload]) if workload in WORKLOAD_LABELS else workload


def _x(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}×"


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


# ----------------------------------------------------------------------------- speed-up vs k

def sweep_table(rows: list[Row]) -> Table:
    headers = ["k", t("α（逐 token 接受概率）", "α (per-token)"), t("接受/草稿", "accepted/drafted"),
               t("提议率", "proposal rate"), "c", t("验证代价（普通步）", "verify cost (plain steps)"),
               t("token/步 实测", "tokens/step measured"), t("实测加速比", "measured speed-up"),
               t("Leviathan 预测", "Leviathan prediction"), t("预测（实测验证代价+提议率）", "prediction (measured verify cost + proposal rate)"),
               t("输出与普通贪心相同", "output = plain greedy")]
    body = [[r.k, _f(r.alpha), _f(r.accepted_over_drafted), f"{100 * r.proposal_rate:.0f}%", _f(r.c, 3),
             _f(r.verify_cost), _f(r.tokens_per_step), _x(r.speedup), _x(r.prediction), _x(r.adjusted_prediction),
             r.identical] for r in rows]
    r0 = rows[0]
    return Table(headers, body, caption=t(f"{method_label(r0.method)}，{workload_label(r0.workload)}：加速比 vs k（本机实测）",
                                          f"{method_label(r0.method)}, {workload_label(r0.workload)}: speed-up vs k (measured here)"))


def sweep_figure(rows: list[Row]) -> go.Figure:
    ks = [r.k for r in rows]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    # Drawn so that coinciding lines stay visible: the predictions first, dashed and dotted with open
    # markers; the measurement last (on top), solid with large filled markers.
    for key, name, ys in (("textbook", t("Leviathan 公式（α、c 实测）", "Leviathan formula (measured α, c)"),
                           [r.prediction for r in rows]),
                          ("adjusted", t("公式 + 实测验证代价与提议率", "formula + measured verify cost, proposal rate"),
                           [r.adjusted_prediction for r in rows]),
                          ("measured", t("实测", "measured"), [r.speedup for r in rows])):
        fig.add_trace(go.Scatter(x=ks, y=ys, name=name, mode="lines+markers", line=dict(color=LINE_COLORS[key],
                                 dash=LINE_DASH[key], width=3 if key == "measured" else 2),
                                 marker=MARKERS[key]), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color=COLORS["ink"], dash="dot"), row=1, col=1)
    fig.add_trace(go.Bar(x=ks, y=[r.verify_cost for r in rows], name=t("验证一步的代价", "cost of a verify step"),
                         marker_color=BAR_COLOR), row=1, col=2)
    fig.add_hline(y=1.0, line=dict(color=COLORS["ink"], dash="dot"), row=1, col=2)
    fig.update_xaxes(dtick=1)
    r0 = rows[0]
    style(fig, t(f"加速比与验证代价 vs k：{method_label(r0.method)}，{workload_label(r0.workload)}（本机实测）",
                 f"Speed-up and verify cost vs k: {method_label(r0.method)}, {workload_label(r0.workload)} (measured)"))
    return axis_titles(fig, [(t("k（每步草稿 token 数）", "k (draft tokens per step)"),
                              t("加速比（×，普通解码 = 1）", "speed-up (×, plain decoding = 1)")),
                             (t("k（每步草稿 token 数）", "k (draft tokens per step)"),
                              t("验证步耗时 / 普通解码步耗时（×）", "verify step / plain step time (×)"))])


def gap_factors(rows: list[Row]) -> list[tuple[Row, float, float]]:
    """Per row with both predictions: (row, proposal-rate factor, verify-cost factor), the two numbers
    that take the textbook prediction to the adjusted one (their product)."""
    out = []
    for r in rows:
        if r.prediction is None or r.adjusted_tokens_per_step is None or not r.predicted_tokens_per_step:
            continue
        out.append((r, r.adjusted_tokens_per_step / r.predicted_tokens_per_step,
                    (1 + r.k * r.c) / (r.verify_cost + r.k * r.c)))
    return out


def gap_table(rows: list[Row]) -> Table:
    """From the textbook prediction to the measurement, one assumption at a time."""
    headers = ["k", t("Leviathan 预测", "Leviathan"), t("× 提议率修正", "× proposal-rate factor"),
               t("× 验证代价修正", "× verify-cost factor"), t("= 修正后预测", "= adjusted"), t("实测", "measured")]
    body = [[r.k, _x(r.prediction), _f(proposal), _f(verify), _x(r.adjusted_prediction), _x(r.speedup)]
            for r, proposal, verify in gap_factors(rows)]
    return Table(headers, body, caption=t("教科书预测与实测之间差在哪里（各因子都由本次测量算出）",
                                          "Where the textbook prediction and the measurement part (every factor measured in this run)"))


def _span(xs: list[float]) -> str:
    return f"{min(xs):.2f}" if min(xs) == max(xs) else f"{min(xs):.2f}–{max(xs):.2f}"


def gap_sentence(rows: list[Row]) -> str:
    """Which factor of ``gap_table`` takes the textbook prediction further from the measurement, from
    the printed factors: the one further from 1 (the larger |log factor|) in more of the rows."""
    factors = gap_factors(rows)
    if not factors:
        return t("没有可以分解的行（缺少 α 或提议率）。", "No row to decompose (α or the proposal rate is missing).")
    proposal = [p for _, p, _ in factors]
    verify = [v for _, _, v in factors]
    proposal_wins = sum(abs(math.log(p)) > abs(math.log(v)) for _, p, v in factors)
    head = t(f"提议率因子 {_span(proposal)}，验证代价因子 {_span(verify)}（都是上表的数）：",
             f"Proposal-rate factor {_span(proposal)}, verify-cost factor {_span(verify)} (the table's numbers): ")
    n = len(factors)
    if proposal_wins * 2 > n:
        return head + t(f"{n} 行里有 {proposal_wins} 行提议率因子离 1 更远——教科书公式偏高，主要因为不是每步都有草稿"
                        "（n-gram 找不到匹配就不起草），其次才是验证比普通步贵。",
                        f"in {proposal_wins} of {n} rows the proposal rate is further from 1: the textbook formula is "
                        "high mainly because not every step has drafts (n-gram drafts nothing without a match), and only "
                        "then because a verify step costs more than a plain one.")
    if proposal_wins * 2 < n:
        return head + t(f"{n} 行里有 {n - proposal_wins} 行验证代价因子离 1 更远——教科书公式偏高，主要因为验证 k+1 个 token "
                        "比一个普通步贵，其次才是不是每步都有草稿。",
                        f"in {n - proposal_wins} of {n} rows the verify cost is further from 1: the textbook formula is "
                        "high mainly because verifying k+1 tokens costs more than a plain step, and only then because "
                        "not every step has drafts.")
    return head + t(f"两个因子各在一半的行里离 1 更远（{proposal_wins}/{n}）：两者对偏差的贡献差不多。",
                    f"each factor is further from 1 in half the rows ({proposal_wins}/{n}): they explain about as much.")


def _speed(row: Row) -> Verdict:
    """The row's speed-up verdict; rows built by hand (no rounds) count as one exact measurement."""
    return row.verdict or Verdict.exact(row.speedup, margin=NOISE)


def _verify(row: Row) -> Verdict:
    return row.verify_verdict or Verdict.exact(row.verify_cost, margin=0.1)


def ties_with_best(rows: list[Row]) -> list[int]:
    """The k whose speed-up is not clearly below the best k's, round by round (paired rounds)."""
    best = max(rows, key=lambda r: r.speedup)
    ties = []
    for r in rows:
        pairs = [a / b for a, b in zip(r.round_speedups, best.round_speedups) if b > 0]
        v = verdict_from_ratios(pairs, margin=NOISE) if pairs else Verdict.exact(r.speedup / best.speedup, margin=NOISE)
        if r is best or not (v.clear and v.direction == "less"):
            ties.append(r.k)
    return sorted(ties)


def sweep_verdict(opt: OptimalK, rows: list[Row]) -> str:
    best = max(rows, key=lambda r: r.speedup)
    worst = max(rows, key=lambda r: r.verify_cost)
    k = best.k
    lines = [_speed(best).sentence(warn=False,
        greater=(f"实测最优 k = {k}：加速比 {{ratio}}，比普通解码快", f"Best measured k = {k}: {{ratio}}, faster than plain decoding"),
        less=(f"实测最优 k = {k}，可加速比只有 {{ratio}}：比普通解码还慢", f"Best measured k = {k}, yet only {{ratio}}: slower than plain decoding"),
        same=(f"实测最优 k = {k}：加速比 {{ratio}}，与普通解码差不多快", f"Best measured k = {k}: {{ratio}}, about as fast as plain decoding")),
        t(f"Leviathan 公式在 α = {opt.alpha:.2f}、c = {opt.c:.3f} 下选 k = {opt.textbook_k}（预测 {opt.textbook_speedup:.2f}×）；"
          f"代入实测验证代价后选 k = {opt.adjusted_k}。",
          f"Leviathan's formula at α = {opt.alpha:.2f}, c = {opt.c:.3f} picks k = {opt.textbook_k} "
          f"(predicts {opt.textbook_speedup:.2f}×); with the measured verify cost it picks k = {opt.adjusted_k}.")]
    ties = ties_with_best(rows)
    if len(ties) > 1:
        lines.append(t(f"k = {', '.join(map(str, ties))} 与 k = {k} 逐轮比较分不出高下（差别不总是超过 {NOISE:.0%}）：把它们看作一样好。",
                       f"k = {', '.join(map(str, ties))} cannot be told apart from k = {k} round by round (the "
                       f"difference does not always exceed {NOISE:.0%}): treat them as equally good."))
    lines.append(_verify(worst).sentence(warn=False,
        greater=(f"教科书假设“验证 k+1 个 token 只花一个普通步”在这里不成立：k = {worst.k} 时验证一步是普通解码步的 {{ratio}}",
                 f"The textbook assumption 'verifying k+1 tokens costs one plain step' fails here: at k = {worst.k} "
                 f"a verify step costs {{ratio}} plain steps"),
        same=(f"验证一步最多是普通解码步的 {{ratio}}（k = {worst.k}）：教科书假设（1 倍）在这里大致成立",
              f"A verify step costs at most {{ratio}} plain steps (k = {worst.k}): the textbook assumption (1) roughly holds here"),
        less=(f"验证一步最多只花普通解码步的 {{ratio}}（k = {worst.k}）：有的步没有草稿，就是普通步",
              f"A verify step costs at most {{ratio}} plain steps (k = {worst.k}): steps without drafts are plain steps")))
    warning = busy_warning([_speed(best), _verify(worst)])
    return " ".join(lines + ([warning] if warning else []))


# ----------------------------------------------------------------------------- workloads

def matrix_table(rows: list[Row]) -> Table:
    headers = [t("方法", "method"), t("流量", "workload"), "k", "α", t("接受/草稿", "accepted/drafted"),
               t("提议率", "proposal rate"), "c", t("验证代价", "verify cost"), t("实测加速比", "measured speed-up"),
               t("Leviathan 预测", "Leviathan"), t("修正后预测", "adjusted"), t("输出相同", "identical")]
    body = [[method_label(r.method), workload_label(r.workload), r.k, _f(r.alpha), _f(r.accepted_over_drafted),
             f"{100 * r.proposal_rate:.0f}%", _f(r.c, 3), _f(r.verify_cost),
             _x(r.speedup) + _speed(r).mark(less=("（更慢）", " (slower)")), _x(r.prediction),
             _x(r.adjusted_prediction), r.identical] for r in rows]
    return Table(headers, body, caption=t("各方法 × 各类流量的接受率与加速比（单请求，贪心，本机实测）",
                                          "Acceptance and speed-up per method and workload (single stream, greedy, measured)"))


def matrix_figure(rows: list[Row]) -> go.Figure:
    fig = go.Figure()
    for method in dict.fromkeys(r.method for r in rows):
        mine = [r for r in rows if r.method == method]
        fig.add_trace(go.Bar(x=[workload_label(r.workload) for r in mine], y=[r.speedup for r in mine],
                             name=method_label(method), text=[f"{r.speedup:.2f}×" for r in mine], textposition="inside",
                             insidetextanchor="start", textangle=0, textfont=dict(size=11)))
    # Value labels sit at the foot of each bar, so the 1× line (near the top of many bars) crosses none.
    # The "below = slower" note goes in the legend: as an annotation on the line it sat on the bar labels.
    fig.add_hline(y=1.0, line=dict(color=COLORS["rejected"], dash="dash"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color=COLORS["rejected"], dash="dash"),
                             name=t("虚线 1×：低于它 = 比普通解码慢", "dashed 1×: below = slower than plain decoding")))
    top = max((r.speedup for r in rows), default=1.0)
    fig.update_yaxes(range=[0, 1.18 * max(top, 1.0)])
    fig.update_layout(barmode="group", bargroupgap=0.08, uniformtext=dict(minsize=9, mode="show"))
    fig.update_traces(selector=dict(type="bar"), insidetextfont=dict(color="white"))
    k = rows[0].k
    return style(fig, t(f"各类流量上的加速比（k = {k}，本机实测）", f"Speed-up per workload (k = {k}, measured here)"),
                 t("流量", "workload"), t("加速比（×，普通解码 = 1）", "speed-up (×, plain = 1)"))


def proposer_domains(rows: list[Row]) -> dict[str, dict[str, list[Row]]]:
    """Per proposer (in row order): its rows grouped by their speed-up verdict: "greater" (faster than
    plain decoding in every round), "less" (slower in every round), "same" (clearly within the margin)
    and "unsure" (within noise, or measured while busy). What counts as "mismatched traffic" is read
    from here, per proposer, never fixed in advance; only clear verdicts are stated as directions."""
    out: dict[str, dict[str, list[Row]]] = {}
    for r in rows:
        v = _speed(r)
        out.setdefault(r.method, {"greater": [], "same": [], "less": [], "unsure": []})[
            v.direction if v.clear else "unsure"].append(r)
    return out


def _names(rows: list[Row]) -> str:
    return t("、", ", ").join(workload_label(r.workload) for r in rows)


def _speed_word(row: Row) -> str:
    """The row's direction in words (its verdict's mark: the hedge where it is not clear)."""
    return _speed(row).mark(greater=("更快", "faster"), less=("更慢", "slower"), same=("差不多", "about the same"))


def _per_proposer(method: str, groups: dict[str, list[Row]]) -> str:
    parts = [t(f"在{_names(rs)}上{_speed_word(rs[0])}", f"{_speed_word(rs[0])} on {_names(rs)}")
             for rs in (groups["greater"], groups["same"], groups["less"]) if rs]
    if groups["unsure"]:
        parts.append(t(f"在{_names(groups['unsure'])}上没有把握（见表）", f"not certain on {_names(groups['unsure'])} (see the table)"))
    label = method_label(method)
    return t(f"{label}：" + "，".join(parts), f"{label}: " + "; ".join(parts))


def _home_note(method: str, groups: dict[str, list[Row]]) -> str:
    """Why a proposer loses in its own domain, when its verdict there is clearly "less": its cost per
    step, from the row."""
    home = HOME_WORKLOADS.get(method)
    row = next((r for r in groups["less"] if r.workload == home), None)
    if row is None:
        return ""
    draft_cost, word = row.k * row.c, _speed_word(row)
    return t(f"{method_label(method)}连它自己的主场（{workload_label(home)}）也{word}（{row.speedup:.2f}×，α = {_f(row.alpha)}）："
             f"原因不是流量错配，而是它太贵——每步起草花 k·c = {draft_cost:.2f} 个普通步，验证再花 {row.verify_cost:.2f} 个，"
             f"换回的只有 {row.tokens_per_step:.2f} 个 token。",
             f"{method_label(method)} is {word} even in its own domain ({workload_label(home)}: {row.speedup:.2f}x, "
             f"α = {_f(row.alpha)}): not mismatched traffic but cost — drafting takes k·c = {draft_cost:.2f} plain steps "
             f"and verifying {row.verify_cost:.2f} more, for {row.tokens_per_step:.2f} tokens a step.")


def mismatch_sentences(rows: list[Row]) -> list[str]:
    """"Mismatched traffic" depends on the proposer: per proposer where it pays and where it loses,
    the workloads where proposers disagree, and a proposer that loses in its own domain with its cost.
    Every direction stated is a clear verdict's."""
    domains = proposer_domains(rows)
    lines = [_per_proposer(m, g) for m, g in domains.items()]
    split = [m for m, g in domains.items() if g["greater"] and g["less"]]
    if split:
        m = split[0]
        lines.append(t(f"{method_label(m)}在{_names(domains[m]['greater'])}上付得起，在{_names(domains[m]['less'])}上赔钱："
                       "“错配流量”是相对某个提议者而言的，不是流量本身的性质",
                       f"{method_label(m)} pays on {_names(domains[m]['greater'])} and loses on {_names(domains[m]['less'])}: "
                       "'mismatched traffic' is relative to a proposer, not a property of the traffic"))
    by_workload: dict[str, dict[str, Row]] = {}
    for g in domains.values():
        for r in g["greater"] + g["less"]:
            by_workload.setdefault(r.workload, {})[_speed(r).direction] = r
    flip = next((d for d in by_workload.values() if len(d) == 2), None)
    if flip:
        up, down = flip["greater"], flip["less"]
        lines.append(t(f"同一类流量，换一个提议者结论就反过来：{workload_label(up.workload)}上{method_label(up.method)}"
                       f"{_speed_word(up)}，{method_label(down.method)}{_speed_word(down)}",
                       f"On the same traffic the verdict flips with the proposer: on {workload_label(up.workload)} "
                       f"{method_label(up.method)} is {_speed_word(up)}, {method_label(down.method)} {_speed_word(down)}"))
    notes = [n for n in (_home_note(m, g) for m, g in domains.items()) if n]
    return [line.rstrip("。.") + t("。", ".") for line in lines] + notes


def slower_in_every_round(rows: list[Row]) -> int:
    """The rows slower than plain decoding in each of their rounds, counted from the rounds themselves
    (a busy machine makes a verdict unsure, not the rounds disagree)."""
    return sum(bool(r.round_speedups) and all(x < 1 for x in r.round_speedups) and _speed(r).direction == "less"
               for r in rows)


def matrix_verdict(rows: list[Row]) -> str:
    best = max(rows, key=lambda r: r.speedup)
    worst = min(rows, key=lambda r: r.speedup)
    slower = sum(_speed(r).direction == "less" for r in rows)
    sure = slower_in_every_round(rows)
    bm, bw, wm, ww = (method_label(best.method), workload_label(best.workload), method_label(worst.method),
                      workload_label(worst.workload))
    lines = [_speed(best).sentence(warn=False,
        greater=(f"最好的组合：{bm} 在{bw}上比普通解码快，{{ratio}}（α = {_f(best.alpha)}）",
                 f"Best pair: {bm} on {bw} decodes faster than plain, {{ratio}} (α = {_f(best.alpha)})"),
        same=(f"最好的组合 {bm} 在{bw}上也只与普通解码差不多快，{{ratio}}（α = {_f(best.alpha)}）",
              f"The best pair, {bm} on {bw}, is only about as fast as plain decoding, {{ratio}} (α = {_f(best.alpha)})"),
        less=(f"连最好的组合 {bm} 在{bw}上也比普通解码慢，{{ratio}}（α = {_f(best.alpha)}）",
              f"Even the best pair, {bm} on {bw}, is slower than plain decoding, {{ratio}} (α = {_f(best.alpha)})"))]
    if worst is not best:
        lines.append(_speed(worst).sentence(warn=False,
            less=(f"{slower}/{len(rows)} 个组合比普通解码更慢（其中 {sure} 个各轮都一致），最慢的是 {wm} 在{ww}上：{{ratio}}"
                  f"（α = {_f(worst.alpha)}）",
                  f"{slower}/{len(rows)} pairs are slower than plain decoding ({sure} of them in every round); the slowest "
                  f"is {wm} on {ww}: {{ratio}} (α = {_f(worst.alpha)})"),
            same=(f"最慢的组合 {wm} 在{ww}上与普通解码差不多快（{{ratio}}）",
                  f"The slowest pair, {wm} on {ww}, is about as fast as plain decoding ({{ratio}})"),
            greater=(f"这次连最慢的组合 {wm} 在{ww}上也比普通解码快（{{ratio}}）",
                     f"This time even the slowest pair, {wm} on {ww}, is faster than plain decoding ({{ratio}})")))
    lines += mismatch_sentences(rows)
    warning = busy_warning([_speed(r) for r in rows])
    return " ".join(lines + ([warning] if warning else []))


# ----------------------------------------------------------------------------- batch size

def batch_table(rows: list[BatchRow]) -> Table:
    headers = [t("批大小", "batch"), t("普通解码步（毫秒）", "plain step (ms)"), t("投机步（毫秒）", "speculative step (ms)"),
               "α", t("验证代价", "verify cost"), t("实测加速比", "measured speed-up"), t("输出相同", "identical")]
    body = [[b.batch, f"{1000 * b.plain_step_s:.0f}", f"{1000 * b.spec_step_s:.0f}", _f(b.row.alpha),
             _f(b.row.verify_cost), _x(b.row.speedup), b.row.identical] for b in rows]
    return Table(headers, body, caption=t(f"批大小的影响：{method_label(rows[0].row.method)}，k = {rows[0].row.k}（本机实测）",
                                          f"Batch size: {method_label(rows[0].row.method)}, k = {rows[0].row.k} (measured)"))


def batch_figure(rows: list[BatchRow]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    x = [str(b.batch) for b in rows]
    fig.add_trace(go.Bar(x=x, y=[b.row.speedup for b in rows], name=t("实测加速比", "measured speed-up"),
                         marker_color=COLORS["accepted"]), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color=COLORS["rejected"], dash="dash"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[1000 * b.plain_step_s for b in rows], name=t("普通解码步", "plain step"),
                             mode="lines+markers", line=dict(color=COLORS["decode"])), row=1, col=2)
    fig.add_trace(go.Scatter(x=x, y=[1000 * b.spec_step_s for b in rows], name=t("投机步（起草+验证）", "speculative step"),
                             mode="lines+markers", line=dict(color=COLORS["verify"])), row=1, col=2)
    style(fig, batch_title(rows))
    return axis_titles(fig, [(t("批大小（请求数）", "batch size (requests)"), t("加速比（×）", "speed-up (×)")),
                             (t("批大小（请求数）", "batch size (requests)"), t("每步耗时（毫秒）", "time per step (ms)"))])


def batch_title(rows: list[BatchRow]) -> str:
    """The figure's title: what this run measured at each batch size, no conclusion typed in advance."""
    sizes = " → ".join(str(b.batch) for b in rows)
    speedups = " → ".join(f"{b.row.speedup:.2f}×" for b in rows)
    return t(f"批大小 {sizes}：实测加速比 {speedups}（本机实测）", f"Batch {sizes}: measured speed-up {speedups} (this machine)")


def batch_verdict(rows: list[BatchRow]) -> str:
    first, last = rows[0], rows[-1]
    step, speed = batch_verdicts(rows)
    a, b = first.batch, last.batch
    s0, s1 = f"{first.row.speedup:.2f}×", f"{last.row.speedup:.2f}×"
    warning = busy_warning([step, speed])
    return " ".join((
        step.sentence(warn=False, greater=(f"批大小从 {a} 到 {b}：普通解码一步的耗时变成原来的 {{ratio}}，这台机器的算力已经在忙，验证多出来的行不再免费",
                               f"From batch {a} to {b}: a plain step takes {{ratio}} as long; the machine's compute is busy, "
                               "extra verify rows are no longer free"),
                      same=(f"批大小从 {a} 到 {b}：普通解码一步的耗时几乎没变（{{ratio}}），算力还有富余",
                            f"From batch {a} to {b}: a plain step takes about as long ({{ratio}}); compute is still spare"),
                      less=(f"批大小从 {a} 到 {b}：普通解码一步的耗时反而变成原来的 {{ratio}}",
                            f"From batch {a} to {b}: a plain step takes only {{ratio}} as long")),
        speed.sentence(warn=False, less=(f"加速比从 {s0} 下降到 {s1}（变成原来的 {{ratio}}）", f"the speed-up falls from {s0} to {s1} ({{ratio}})"),
                       same=(f"加速比从 {s0} 到 {s1}，几乎不变", f"the speed-up stays about the same, {s0} to {s1}"),
                       greater=(f"加速比从 {s0} 上升到 {s1}（变成原来的 {{ratio}}）",
                                f"the speed-up rises from {s0} to {s1} ({{ratio}})")))) + (f" {warning}" if warning else "")


# ----------------------------------------------------------------------------- lossless

def category_labels(test: SampleTest, decode) -> list[str]:
    """Each token column's label as the histogram shows it (``decode``: token ids -> text); saved in
    §6's record, so the figure renders without the tokenizer."""
    return ["" if c == OTHER else repr(decode([c])) for c in test.categories]


SIGNIFICANCE = 0.01     # the test's threshold (stricter than the prediction's 0.05)


def histogram_title(test: SampleTest) -> str:
    mark = (t("看不出差别", "no visible difference") if test.p_value >= SIGNIFICANCE
            else t("差异显著（p < 0.01）", "a significant difference (p < 0.01)"))
    return t(f"第 2 个输出 token 的分布：卡方检验 p = {test.p_value:.3f}，{mark}",
             f"Second output token: chi-square p = {test.p_value:.3f}, {mark}")


def histogram_rows(test: SampleTest, labels) -> list[tuple[str, float, float]]:
    """(token, plain frequency, speculative frequency) per column: the bars of the figure."""
    names = category_labels(test, labels) if callable(labels) else list(labels)
    names = [t("其他", "other") if c == OTHER else n for c, n in zip(test.categories, names)]
    pa, ps = sum(test.plain_counts), sum(test.spec_counts)
    return [(n, a / pa, b / ps) for n, a, b in zip(names, test.plain_counts, test.spec_counts)]


def histogram_figure(test: SampleTest, labels) -> go.Figure:
    """``labels``: each column's label (``category_labels``), or the tokenizer's decode."""
    rows = histogram_rows(test, labels)
    fig = go.Figure()
    for i, (name, counts, color) in enumerate(((t("不投机（普通采样）", "plain sampling"), test.plain_counts, COLORS["decode"]),
                                               (t("投机（草稿模型 + 拒绝采样）", "speculative (draft + rejection sampling)"),
                                                test.spec_counts, COLORS["verify"]))):
        fig.add_trace(go.Bar(x=[r[0] for r in rows], y=[r[1 + i] for r in rows], name=f"{name}, n = {sum(counts)}",
                             marker_color=color))
    return style(fig, histogram_title(test), t("token", "token"), t("频率", "frequency"))


def test_verdict(test: SampleTest) -> str:
    base = t(f"卡方 = {test.chi2:.2f}，自由度 {test.dof}，p = {test.p_value:.3f}。",
             f"chi-square = {test.chi2:.2f}, {test.dof} degrees of freedom, p = {test.p_value:.3f}. ")
    if test.p_value >= SIGNIFICANCE:
        return base + t("两组样本的差异在抽样噪声范围内：没有证据表明投机改变了分布（这不是证明；样本越多，检验越灵敏）。",
                        "The two samples differ by no more than sampling noise: no evidence that speculation changed the "
                        "distribution (not a proof; more samples make the test more sensitive).")
    return base + t("两组样本差异显著（p < 0.01）。如果两者同分布，这种结果大约 100 次里才出现 1 次：换种子重跑；若仍如此，拒绝采样器有 bug。",
                    "The samples differ significantly (p < 0.01). If they were the same distribution this would happen about "
                    "once in 100 runs: rerun with other seeds; if it persists, the rejection sampler has a bug.")


# ----------------------------------------------------------------------------- latency

def latency_table(plain: StreamTimes, spec: StreamTimes) -> Table:
    headers = ["", t("token 数", "tokens"), t("块数", "chunks"), t("每块 token（首块之后）", "tokens per chunk (after first)"),
               "TPOT (ms)", t("ITL 均值，vLLM 定义 (ms)", "ITL mean, vLLM (ms)"), "ITL P50 (ms)", t("AIPerf 的 ITL (ms)", "AIPerf ITL (ms)")]
    body = [[name, s.num_tokens, len(s.chunk_sizes), _f(s.tokens_per_chunk), _f(1000 * (s.tpot_s or 0), 1),
             _f(1000 * (s.itl_mean_s or 0), 1), _f(1000 * (s.itl_p50_s or 0), 1), _f(1000 * (s.tpot_s or 0), 1)]
            for name, s in ((t("普通解码", "plain"), plain), (t("投机解码", "speculative"), spec))]
    return Table(headers, body, caption=latency_title(spec))


def latency_title(spec: StreamTimes) -> str:
    return t(f"同一个请求的 TPOT 与 ITL（流式客户端计时，墙钟时间）：投机时 ITL 均值 / TPOT = {spec.itl_over_tpot:.2f}",
             f"TPOT and ITL of one request (timed by the streaming client, wall clock): with speculation mean ITL / "
             f"TPOT = {spec.itl_over_tpot:.2f}")


def latency_verdict(spec: StreamTimes) -> str:
    """mean ITL / TPOT = (tokens − 1) / (chunks − 1) exactly (latency.py): a counted ratio, so its
    verdict is exact whatever the clock did."""
    if spec.tpot_s is None or spec.itl_mean_s is None:
        return ""
    per_chunk = spec.itl_over_tpot
    return Verdict.exact(per_chunk).sentence(
        greater=(f"投机解码时 ITL 均值是 TPOT 的 {{ratio}}：每块平均带 {spec.tokens_per_chunk:.2f} 个 token，"
                 f"(token 数 − 1) / (块数 − 1) = {per_chunk:.2f}。报告里写“ITL”时，先问是哪一种定义",
                 f"With speculation mean ITL is {{ratio}} TPOT: a chunk carries {spec.tokens_per_chunk:.2f} tokens on "
                 f"average, (tokens − 1) / (chunks − 1) = {per_chunk:.2f}. When a report says 'ITL', ask which definition"),
        same=("每块只有一个 token：ITL 均值等于 TPOT（投机这次没有一次接受过草稿）",
              "Every chunk is one token: mean ITL equals TPOT (no draft was accepted this time)"),
        less=("ITL 均值小于 TPOT：每块不到一个 token，这不应发生", "Mean ITL below TPOT: under one token a chunk, which cannot happen"))


# ----------------------------------------------------------------------------- summary

def identical_summary(rows: list[Row]) -> tuple[int, int]:
    """(runs whose greedy output equals plain greedy, runs) over every row measured."""
    pairs = [tuple(map(int, r.identical.split("/"))) for r in rows]
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def identical_sentence(groups: dict[str, list[Row]]) -> str:
    """The lossless count over every speculative table the lab shows (``groups``: the table's name ->
    its rows), each table's count beside it, and the rows that differ named, never left out."""
    same, total = identical_summary([r for rows in groups.values() for r in rows])
    parts = []
    for name, rows in groups.items():
        s, n = identical_summary(rows)
        parts.append(f"{name} {s}/{n}")
    head = t(f"{same}/{total} 次投机运行的贪心输出与普通贪心逐 token 相同（{'；'.join(parts)}）",
             f"{same}/{total} speculative runs gave the same greedy tokens as plain greedy ({'; '.join(parts)})")
    differ = [f"{name}: {method_label(r.method)}, {workload_label(r.workload)}, k = {r.k} ({r.identical})"
              for name, rows in groups.items() for r in rows if not r.all_identical]
    if not differ:
        return head
    return head + t("。不同的运行：" + "；".join(differ) + "——这不是投机解码的性质：同一目标模型在这台 CPU 上的某个乘法"
                    "形式让一行的位依赖于批里的行数。",
                    ". Runs that differ: " + "; ".join(differ) + " — not a property of speculative decoding: a "
                    "product form of the target on this CPU gave a row bits that depend on the batch's row count.")


def best_measured(sweep: list[Row], matrix: list[Row], batches: list[BatchRow], paying=()) -> tuple[Row, str]:
    """The largest speed-up over everything the lab measured (the k sweep, the workload matrix, the batch
    sizes and the paying rows), with the table it came from."""
    tables = [(t("k 扫描", "k sweep"), r) for r in sweep] + [(t("流量矩阵", "workload matrix"), r) for r in matrix]
    tables += [(t(f"批大小 {b.batch}", f"batch {b.batch}"), b.row) for b in batches]
    tables += [(t(f"{p.target} 目标（3.1 节）", f"{p.target} target (3.1)"), _paying_row(p)) for p in paying]
    where, row = max(tables, key=lambda pair: pair[1].speedup)
    return row, where


def _paying_row(p) -> Row:
    """A 3.1 row as a ``Row`` whose speed-up and verdict are the interleaved comparison's."""
    from dataclasses import replace
    return replace(p.row, speedup=p.measured, verdict=p.verdict)


def summary_table(opt: OptimalK, sweep: list[Row], matrix: list[Row], batches: list[BatchRow], paying=()) -> Table:
    best, where = best_measured(sweep, matrix, batches, paying)
    slowest = min(matrix, key=lambda r: r.speedup)
    worst_verify = max(sweep, key=lambda r: r.verify_cost)
    first, last = batches[0], batches[-1]
    _step, batch_speed = batch_verdicts(batches)
    rows = [[t("最好的实测加速比（本实验测过的所有行）", "best measured speed-up (every row this lab measured)"),
             f"{best.speedup:.2f}×",
             t(f"{method_label(best.method)}，{workload_label(best.workload)}，k = {best.k}（{where}）",
               f"{method_label(best.method)}, {workload_label(best.workload)}, k = {best.k} ({where})") + _speed(best).mark()],
            [t("最差的组合（误解 2）", "worst pair (misreading 2)"), f"{slowest.speedup:.2f}×",
             t(f"{method_label(slowest.method)}，{workload_label(slowest.workload)}，α = {_f(slowest.alpha)}",
               f"{method_label(slowest.method)}, {workload_label(slowest.workload)}, α = {_f(slowest.alpha)}")
             + _speed(slowest).mark()],
            [t("验证一步 / 普通一步", "verify step / plain step"), f"{worst_verify.verify_cost:.2f}×",
             t(f"k = {worst_verify.k}（教科书假设 1×）", f"k = {worst_verify.k} (the textbook assumes 1×)")
             + _verify(worst_verify).mark()],
            [t("批大小的影响", "batch size"), f"{first.row.speedup:.2f}× → {last.row.speedup:.2f}×",
             t(f"批 {first.batch} → 批 {last.batch}", f"batch {first.batch} → batch {last.batch}") + batch_speed.mark()]]
    return Table([t("要记住的数", "number to remember"), t("本次实测", "measured here"), t("条件", "conditions")], rows,
                 caption=t("小结：本次运行测得", "Summary: measured in this run"))


# ----------------------------------------------------------------------------- against the vLLM blog

def _blog_speedups(cited: str) -> dict[str, float]:
    """The blog's low-QPS speed-ups per proposer, read from the cited row's value
    (e.g. "1.5x draft model ShareGPT; 2.8x n-gram CNN/DM")."""
    import re

    out = {}
    for part in cited.split(";"):
        m = re.search(r"([0-9.]+)x\s+(draft|n-gram)", part)
        if m:
            out["draft" if m.group(2) == "draft" else "ngram"] = float(m.group(1))
    return out


def blog_sentence(rows: list[Row], cited: str) -> str:
    """This run's best speed-up per proposer (any workload, any table passed) beside the vLLM blog's
    low-QPS numbers, with the direction read from the numbers and the costs that differ (c, verify
    cost) from the rows. No verdict across setups: different model, hardware and traffic."""
    blog = _blog_speedups(cited)
    zh, en = [], []
    for method, theirs in blog.items():
        mine = [r for r in rows if r.method == method]
        if not mine:
            continue
        best = max(mine, key=lambda r: r.speedup)
        ratio = best.speedup / theirs
        word = (("更大", "larger") if ratio > 1.05 else ("更小", "smaller") if ratio < 1 / 1.05 else ("相当", "about the same"))
        zh.append(f"{method_label(method)}：本次最好 {best.speedup:.2f}×（{workload_label(best.workload)}，c = {best.c:.3f}，"
                  f"验证代价 {best.verify_cost:.2f}），博客 {theirs:.1f}×——本次{word[0]}")
        en.append(f"{method_label(method)}: best here {best.speedup:.2f}x ({workload_label(best.workload)}, c = {best.c:.3f}, "
                  f"verify cost {best.verify_cost:.2f}), blog {theirs:.1f}x: {word[1]} here")
    if not zh:
        return ""
    return t("与博客的低负载数字对照：" + "；".join(zh) + "。两边的目标模型（135M 对 70B）、硬件和流量都不同，只能比方向；"
             "差别来自哪里，看每行的 c（提议者相对目标有多贵）、验证代价和 α。",
             "Against the blog's low-load numbers: " + "; ".join(en) + ". Target (135M vs 70B), hardware and traffic all "
             "differ, so compare directions only; where the difference comes from shows in each row's c (how costly the "
             "proposer is next to the target), verify cost and α.")
