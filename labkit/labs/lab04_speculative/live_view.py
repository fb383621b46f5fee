"""The live view of section 2: drafted tokens coloured by what verification did, step by step.

``LiveSpecDemo(engines)`` shows controls (method, k, workload, tokens), a token stream whose
colours say accepted / rejected / resampled / bonus / plain, a per-step line, and labkit's
``AcceptanceView`` (acceptance per draft position) filling in as the request runs. ``run()`` runs
one request with the current settings (the notebook calls it once so a headless run shows output).

The colours need the drafted tokens, which no engine event carries: ``live.trace_request`` reads
them from the request before each step (see its docstring).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as W

from labkit.i18n import t
from labkit.labs.lab04_speculative.live import KINDS, SpecStep, summarize, trace_request
from labkit.labs.lab04_speculative.speedup import Timers
from labkit.labs.lab04_speculative.sweeps import METHODS, WORKLOADS, Engines, engine_name
from labkit.labs.lab04_speculative.views import method_label, workload_label
from labkit.report.figures import COLORS

KIND_STYLE = {
    "accepted": f"background:{COLORS['accepted']}40",
    "rejected": f"background:{COLORS['rejected']}30;text-decoration:line-through;color:#9a2b2b",
    "resampled": f"background:{COLORS['predicted']}55",
    "bonus": "background:#4C78A855;font-weight:600",
    "plain": "background:#EEEEEE",
}


def kind_label(kind: str) -> str:
    return {"accepted": t("接受的草稿", "accepted draft"), "rejected": t("被拒绝的草稿（回滚）", "rejected draft (rolled back)"),
            "resampled": t("重采样/纠正 token", "resampled / recovered token"), "bonus": t("bonus token", "bonus token"),
            "plain": t("目标模型自己的 token（本步无草稿）", "target's own token (no drafts this step)")}[kind]


def legend_html() -> str:
    return " ".join(f'<span style="{KIND_STYLE[k]};padding:1px 4px;border-radius:3px">{html.escape(kind_label(k))}</span>'
                    for k in KINDS)


class TextOf:
    """Text of tokens appended to a growing output, decoded in context. A character split over
    several tokens decodes to U+FFFD until its last piece arrives: it is held back and shown on
    the token that completes it (an incremental detokenizer's rule)."""

    def __init__(self, decode):
        self.decode, self.ids, self.text = decode, [], ""

    def _piece(self, ids: list[int]) -> tuple[str, str]:
        stable = self.decode(ids).rstrip("\ufffd")
        return (stable[len(self.text):] if stable.startswith(self.text) else stable), stable

    def peek(self, token_id: int) -> str:
        return self._piece(self.ids + [token_id])[0]

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        piece, self.text = self._piece(self.ids)
        return piece


def steps_html(steps: list[SpecStep], decode) -> str:
    """The whole stream: one span per token, a thin bar between steps."""
    text, parts = TextOf(decode), []
    for step in steps:
        for tok in step.tokens:
            piece = text.peek(tok.token_id) if tok.kind == "rejected" else text.push(tok.token_id)
            parts.append(f'<span style="{KIND_STYLE[tok.kind]};border-radius:3px;margin-right:1px" title="{tok.kind}">'
                         f'{html.escape(piece) or "·"}</span>')
        parts.append('<span style="color:#bbb">│</span>')
    return ('<div style="font-family:monospace;white-space:pre-wrap;line-height:1.9;max-width:900px">'
            + "".join(parts) + "</div>")


def summary_line(steps: list[SpecStep]) -> str:
    s = summarize(steps)
    pos = ", ".join(f"{100 * r:.0f}%" for r in s.per_position) or "—"
    return t(f"解码 {s.steps} 步产出 {s.tokens} 个 token（每步 {s.tokens_per_step:.2f} 个）；接受 {s.counts['accepted']}、"
             f"拒绝 {s.counts['rejected']}、重采样 {s.counts['resampled']}、bonus {s.counts['bonus']}、无草稿 {s.counts['plain']}；"
             f"各草稿位置的接受率：{pos}",
             f"{s.steps} decode steps emitted {s.tokens} tokens ({s.tokens_per_step:.2f} per step); accepted "
             f"{s.counts['accepted']}, rejected {s.counts['rejected']}, resampled {s.counts['resampled']}, bonus "
             f"{s.counts['bonus']}, no drafts {s.counts['plain']}; acceptance by draft position: {pos}")


@dataclass(frozen=True)
class Baseline:
    tpot_s: float | None     # the plain request's TPOT (RequestMetrics: the clock AcceptanceView compares with)
    step_s: float | None     # mean plain decode step on the engines' clock (for c)


def measure_baseline(engines: Engines, prompt: list[int], params) -> Baseline:
    """Serve ``prompt`` once with plain decoding: its TPOT and its mean decode step."""
    timers = engines.timed("plain")
    mark = len(timers.steps)
    out = engines.get("plain").generate([prompt], params)
    metrics = out[0].outputs[0].metrics
    decode = timers.steps[mark + 1:]                 # the first step is the prefill
    return Baseline(metrics.tpot_s if metrics else None, sum(decode) / len(decode) if decode else None)


def measured_c(timers: Timers, marks: tuple[int, int], k: int, plain_step_s: float | None) -> float | None:
    """c = proposer time per decode step / (k × plain step), from the durations recorded since ``marks``
    (the same definition as ``speedup.aggregate``); None if nothing was proposed or timed."""
    proposals = timers.proposals[marks[1]:]
    decode_steps = len(timers.steps) - marks[0] - 1
    if not proposals or decode_steps < 1 or not plain_step_s or k < 1:
        return None
    return sum(proposals) / decode_steps / (k * plain_step_s)


class LiveSpecDemo:
    """Controls + live token stream + AcceptanceView (see the module docstring)."""

    def __init__(self, engines: Engines, method: str = "ngram", k: int = 4, workload: str = "copy",
                 max_tokens: int = 48, prompt_index: int = 0):
        self.engines, self.prompt_index = engines, prompt_index
        self.method = W.Dropdown(options=[(method_label(m), m) for m in METHODS], value=method,
                                 description=t("方法", "method"))
        self.k = W.IntSlider(value=k, min=1, max=8, description="k")
        self.workload = W.Dropdown(options=[(workload_label(w), w) for w in WORKLOADS], value=workload,
                                   description=t("流量", "workload"))
        self.max_tokens = W.IntSlider(value=max_tokens, min=8, max=128, step=8, description="max_tokens")
        self.button = W.Button(description=t("运行", "Run"), button_style="primary")
        self.button.on_click(lambda _b: self.run())
        self.stream, self.status = W.HTML(), W.HTML()
        self.acceptance = W.Box()
        self.steps: list[SpecStep] = []
        self.box = W.VBox([W.HBox([self.method, self.k]), W.HBox([self.workload, self.max_tokens, self.button]),
                           W.HTML(legend_html()), self.stream, self.status, self.acceptance])

    def run(self) -> list[SpecStep]:
        from labkit import SamplingParams
        from labkit.widgets import AcceptanceView

        self.button.disabled = True
        try:
            self.status.value = t("构建引擎…（4-bit 副本第一次要量化，约 10–20 秒）", "Building the engine… (the 4-bit copy "
                                  "is quantised on first use, ~10-20 s)")
            llm = self.engines.get(self.method.value, self.k.value)
            for child in self.acceptance.children:
                child.close()
            prompt = self.engines.encode(self.workload.value, self.prompt_index + 1)[self.prompt_index]
            params = SamplingParams(temperature=0.0, max_tokens=self.max_tokens.value)
            self.status.value = t("先用普通解码跑同一个提示，量基线 TPOT 和普通步耗时…",
                                  "First the same prompt with plain decoding: baseline TPOT and plain step time…")
            baseline = measure_baseline(self.engines, prompt, params)
            view = AcceptanceView(llm, show_inputs=False)     # c and the baseline TPOT come from this run
            self.acceptance.children = (view,)
            view.baseline_tpot_s = baseline.tpot_s
            timers = self.engines.timed(engine_name(self.method.value, self.k.value))
            marks = len(timers.steps), len(timers.proposals)
            decode = lambda ids: llm.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
            self.steps = []

            def show(step: SpecStep) -> None:
                self.steps.append(step)
                self.stream.value = steps_html(self.steps, decode)
                self.status.value = html.escape(summary_line(self.steps))

            try:
                trace_request(llm, prompt, params, show)
                view.c = measured_c(timers, marks, self.k.value, baseline.step_s)
            finally:
                view.flush()
                view.detach()      # the engine serves later experiments: this view shows this run only
        finally:
            self.button.disabled = False
        return self.steps

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)
