"""``ControlPanel``: the engine's switches, a workload, and Run / Pause / Step / Reset.

::

    ┌ engine ─────────────────┬ KV pool and batch ──┬ workload ─────────────────────┐
    │ model (real / sim)      │ block size          │ prompt set or synthetic trace │
    │ KV layout · scheduler   │ pool (num_blocks)   │ requests · arrival rate       │
    │ speculative method · k  │ batch slots · prefix│ max new tokens                │
    ├─────────────────────────┴─────────────────────┴───────────────────────────────┤
    │ [Run] [Pause] [Step] [Reset]   state · step · arrived · finished · clock · error │
    └────────────────────────────────────────────────────────────────────────────────┘

Run steps the engine in a background thread (``EngineDriver``; why a thread is explained there),
so the page stays responsive while the model computes. Settings take effect on Reset, which
aborts every unfinished request (the KV pool empties) and builds a fresh engine; Run or Step on an
engine that has not started yet rebuilds it first if the settings changed. A choice the engine
cannot build (e.g. speculation with static batching) shows its error in the panel, and the kernel
stays well.

A viewer who leaves mid-run leaks nothing: ``close()``, and the kernel's exit (Voila shuts a page's
kernel down when the page closes), stop the run thread and abort its requests. Other widgets follow
the engine with ``on_engine_change(fn)`` (``fn(engine)`` after each rebuild).
"""

from __future__ import annotations

import atexit
import dataclasses
import html
import threading
import weakref
from typing import Callable

import ipywidgets as widgets

from labkit import i18n
from labkit.i18n import t
from labkit.widgets.engine_driver import DriverState, EngineDriver
from labkit.widgets.panel_settings import PanelSettings, build_arrivals, build_engine
from labkit.widgets.throttle import Throttle

_LIVE_PANELS: weakref.WeakSet = weakref.WeakSet()
_WIDE = {"description_width": "8em"}
STOP_TIMEOUT_S = 60.0   # Reset / close wait this long for the step in progress (one step, normally)


def _option_labels() -> dict[str, list[tuple[str, object]]]:
    return {
        "model": [(t("真实模型 SmolLM2-135M", "real model SmolLM2-135M"), "real"),
                  (t("模拟 GPU (成本模型)", "simulated GPU (cost model)"), "sim")],
        "kv_cache": [(t("分页 paged", "paged"), "paged"),
                     (t("连续预留 contiguous", "contiguous"), "contiguous")],
        "scheduler": [(t("连续批处理 continuous", "continuous"), "continuous"),
                      (t("静态批处理 static", "static"), "static")],
        "spec_method": [(t("关闭", "off"), "none"), ("n-gram", "ngram"), (t("草稿模型", "draft model"), "draft")],
        "workload": [(t("对话提示 (chat)", "chat prompts"), "chat"), (t("代码提示 (code)", "code prompts"), "code"),
                     (t("复述提示 (copy)", "copy prompts"), "copy"),
                     (t("合成长尾轨迹", "synthetic heavy-tailed trace"), "synthetic")],
        "block_size": [(str(n), n) for n in (4, 8, 16, 32)],
    }


def _descriptions() -> dict[str, str]:
    return {
        "model": t("模型", "model"), "kv_cache": t("KV 布局", "KV layout"),
        "scheduler": t("调度器", "scheduler"), "block_size": t("块大小 (token)", "block size (tokens)"),
        "num_blocks": t("KV 池 (块数)", "KV pool (blocks)"), "max_num_seqs": t("批槽位数", "batch slots"),
        "enable_prefix_caching": t("前缀缓存", "prefix caching"), "spec_method": t("投机解码", "speculative"),
        "num_speculative_tokens": t("草稿数 k", "draft tokens k"), "workload": t("工作负载", "workload"),
        "num_requests": t("请求数", "requests"), "request_rate": t("到达率 (个/秒)", "arrival rate (req/s)"),
        "max_tokens": t("最多生成 token", "max new tokens"),
    }


def _button_labels() -> dict[str, tuple[str, str]]:
    """Button text and tooltip (plain text: symbol glyphs are missing from many fonts)."""
    return {
        "run": (t("运行", "Run"), t("在后台按到达时间加入请求并连续执行引擎步",
                                    "Step the engine in the background, adding requests as they arrive")),
        "pause": (t("暂停", "Pause"), t("当前引擎步结束后停下", "Stop after the current engine step")),
        "step": (t("单步", "Step"), t("只执行一个引擎步", "Run exactly one engine step")),
        "reset": (t("重置", "Reset"), t("中止所有请求，按当前设置重建引擎",
                                      "Abort every request and rebuild the engine with the current settings")),
    }


_API_NAMES = {   # tooltips: where each knob lives in the API, in vLLM's words
    "model": "LLM(model=None | 'sim')", "kv_cache": "EngineConfig.kv_cache",
    "scheduler": "EngineConfig.scheduler", "spec_method": "SpecConfig.method",
    "num_speculative_tokens": "SpecConfig.num_speculative_tokens", "block_size": "EngineConfig.block_size",
    "num_blocks": "EngineConfig.num_blocks", "max_num_seqs": "EngineConfig.max_num_seqs",
    "enable_prefix_caching": "EngineConfig.enable_prefix_caching", "workload": "labkit.traces",
    "num_requests": "labkit.traces", "request_rate": "synthetic_trace(rate=...)",
    "max_tokens": "SamplingParams.max_tokens",
}
_BUTTON_STYLES = {"run": "success", "pause": "warning", "step": "info", "reset": "danger"}


def _state_label(state: DriverState | None) -> str:
    return {
        None: t("未就绪", "not ready"), DriverState.READY: t("就绪", "ready"),
        DriverState.RUNNING: t("运行中", "running"), DriverState.PAUSED: t("已暂停", "paused"),
        DriverState.FINISHED: t("已完成", "finished"), DriverState.FAILED: t("出错", "failed"),
        DriverState.STOPPED: t("已停止", "stopped"),
    }[state]


class ControlPanel(widgets.VBox):
    """Knobs + Run / Pause / Step / Reset over a live engine (see the module docstring)."""

    def __init__(self, settings: PanelSettings | None = None,
                 build: Callable[[PanelSettings], object] = build_engine, **kwargs) -> None:
        self._build_engine = build
        self._initial = settings or PanelSettings.defaults()
        self.engine = None
        self.driver: EngineDriver | None = None
        self.error: str | None = None
        self._applied: PanelSettings | None = None
        self._listeners: list[Callable[[object], None]] = []
        self.knobs = _make_knobs(self._initial)
        self.buttons = {name: widgets.Button(button_style=style, layout=widgets.Layout(width="6em"))
                         for name, style in _BUTTON_STYLES.items()}
        self.status = widgets.HTML()
        super().__init__(children=self._layout(), **kwargs)
        self.add_class("lk-control-panel")
        self._render_lock = threading.RLock()   # the run thread renders progress too
        self._status_throttle = Throttle(self._render, 0.1, lock=self._render_lock)
        self._last_state: DriverState | None = None
        self._wire()
        self._relabel()
        self._language_listener = _follow_language(self)
        _LIVE_PANELS.add(self)
        self.reset()

    # ------------------------------------------------------------------ public

    @property
    def settings(self) -> PanelSettings:
        """The knobs as they are now (applied at the next Reset)."""
        return dataclasses.replace(self._initial, **{name: knob.value for name, knob in self.knobs.items()})

    def on_engine_change(self, fn: Callable[[object], None]) -> None:
        """Call ``fn(engine)`` now (if an engine exists) and after every rebuild."""
        self._listeners.append(fn)
        if self.engine is not None:
            fn(self.engine)

    def run(self) -> None:
        """Start or resume stepping in the background (Run)."""
        if self._rebuild_if_untouched() and self.driver is not None:
            self.driver.run()

    def pause(self, wait: bool = True) -> None:
        """Stop after the current step (Pause); ``wait`` blocks until the run thread is gone."""
        if self.driver is not None:
            self.driver.pause(wait=wait)
        self._render()

    def step(self) -> None:
        """Exactly one engine step (Step); errors go to the panel."""
        if not self._rebuild_if_untouched() or self.driver is None:
            return
        try:
            self.driver.step()
        except Exception as exc:   # the driver is FAILED and says why
            self.error = f"{type(exc).__name__}: {exc}"
        self._render()

    def reset(self) -> None:
        """Abort everything, then build a fresh engine with the current settings (Reset)."""
        self._stop_driver()
        settings = self.settings
        try:
            engine = self._build_engine(settings)
            arrivals = build_arrivals(settings, engine)
        except Exception as exc:   # e.g. a layout not built yet: say so, keep the kernel well
            self.engine, self.driver, self.error = None, None, f"{type(exc).__name__}: {exc}"
            self._render()
            return
        self.engine, self.error, self._applied = engine, None, settings
        self.driver = EngineDriver(engine, arrivals, on_update=self._on_driver_update)
        for fn in list(self._listeners):
            fn(engine)
        self._render()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a background run ends (finished, paused or failed); True if it did."""
        return self.driver is None or self.driver.wait(timeout)

    def shutdown(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the run thread and abort unfinished requests; the widgets stay on the page."""
        self._stop_driver(timeout)
        self._render()

    def close(self) -> None:
        """Shut the engine run down, then remove the panel from every page."""
        _LIVE_PANELS.discard(self)
        self._stop_driver()
        self._status_throttle.stop()
        i18n.off_language_change(getattr(self, "_language_listener", None))
        close_tree(self)

    # ------------------------------------------------------------------ internals

    def _layout(self) -> list[widgets.Widget]:
        groups = (("model", "kv_cache", "scheduler", "spec_method", "num_speculative_tokens"),
                  ("block_size", "num_blocks", "max_num_seqs", "enable_prefix_caching"),
                  ("workload", "num_requests", "request_rate", "max_tokens"))
        self._headings = [widgets.HTML() for _ in groups]
        columns = [widgets.VBox([heading, *(self.knobs[name] for name in names)],
                                layout=widgets.Layout(margin="0 28px 0 0"))
                   for heading, names in zip(self._headings, groups)]
        buttons = widgets.HBox(list(self.buttons.values()), layout=widgets.Layout(margin="0 16px 0 0"))
        return [widgets.HBox(columns, layout=widgets.Layout(flex_flow="row wrap")),
                widgets.HBox([buttons, self.status], layout=widgets.Layout(align_items="center"))]

    def _wire(self) -> None:
        actions = {"run": self.run, "pause": lambda: self.pause(wait=False), "step": self.step,
                   "reset": self.reset}
        for name, button in self.buttons.items():
            button.on_click(lambda _b, act=actions[name]: act())
        for knob in self.knobs.values():
            knob.observe(lambda _change: self._render(), names="value")

    def _rebuild_if_untouched(self) -> bool:
        """Before the first Run/Step, adopt changed settings. False when there is no engine."""
        untouched = self.driver is not None and self.driver.state is DriverState.READY
        if self.driver is None or (untouched and self.settings != self._applied):
            self.reset()
        return self.driver is not None

    def _stop_driver(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.driver is not None:
            self.driver.shutdown(timeout)

    def _on_driver_update(self) -> None:
        """From either thread: state changes show at once, step progress at most ~10 times a second."""
        state = self.driver.state if self.driver is not None else None
        if state is not self._last_state:
            self._status_throttle.push_now()
        else:
            self._status_throttle.mark_dirty()

    def _render(self) -> None:
        with self._render_lock:
            self._render_locked()

    def _render_locked(self) -> None:
        driver = self.driver
        state = driver.state if driver is not None else None
        self._last_state = state
        self.status.value = _status_html(self, driver, state)
        self.buttons["run"].disabled = state not in (DriverState.READY, DriverState.PAUSED) or driver.running
        self.buttons["pause"].disabled = not (driver is not None and driver.running and not driver.stopping)
        self.buttons["step"].disabled = self.buttons["run"].disabled
        self.knobs["num_speculative_tokens"].disabled = self.knobs["spec_method"].value == "none"
        self.knobs["enable_prefix_caching"].disabled = self.knobs["kv_cache"].value != "paged"

    def _relabel(self) -> None:
        options, descriptions = _option_labels(), _descriptions()
        for name, knob in self.knobs.items():
            knob.description, knob.tooltip = descriptions[name], _API_NAMES[name]
            if name in options:
                value = knob.value
                knob.options = options[name]
                knob.value = value
        for name, (label, tooltip) in _button_labels().items():
            self.buttons[name].description, self.buttons[name].tooltip = label, tooltip
        titles = (t("引擎", "Engine"), t("KV 池与批", "KV pool and batch"), t("工作负载", "Workload"))
        for heading, title in zip(self._headings, titles):
            heading.value = f"<b>{title}</b>"
        self._render()


def close_tree(widget: widgets.Widget) -> None:
    """Close ``widget`` and every widget inside it (closing a box leaves its children's comms open)."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    widgets.Widget.close(widget)


def _make_knobs(s: PanelSettings) -> dict[str, widgets.ValueWidget]:
    opts = _option_labels()
    toggle = dict(style={"button_width": "auto", **_WIDE})
    slider = dict(style=_WIDE, continuous_update=False, layout=widgets.Layout(width="24em"))
    return {
        "model": widgets.ToggleButtons(options=opts["model"], value=s.model, **toggle),
        "kv_cache": widgets.ToggleButtons(options=opts["kv_cache"], value=s.kv_cache, **toggle),
        "scheduler": widgets.ToggleButtons(options=opts["scheduler"], value=s.scheduler, **toggle),
        "block_size": widgets.ToggleButtons(options=opts["block_size"], value=s.block_size, **toggle),
        "num_blocks": widgets.IntSlider(value=s.num_blocks, min=8, max=512, step=8, **slider),
        "max_num_seqs": widgets.IntSlider(value=s.max_num_seqs, min=1, max=32, **slider),
        "enable_prefix_caching": widgets.Checkbox(value=s.enable_prefix_caching, indent=True, style=_WIDE),
        "spec_method": widgets.ToggleButtons(options=opts["spec_method"], value=s.spec_method, **toggle),
        "num_speculative_tokens": widgets.IntSlider(value=s.num_speculative_tokens, min=1, max=8, **slider),
        "workload": widgets.Dropdown(options=opts["workload"], value=s.workload, style=_WIDE),
        "num_requests": widgets.IntSlider(value=s.num_requests, min=1, max=64, **slider),
        "request_rate": widgets.FloatSlider(value=s.request_rate, min=0.0, max=20.0, step=0.5, **slider),
        "max_tokens": widgets.IntSlider(value=s.max_tokens, min=2, max=256, **slider),
    }


def _status_html(panel: ControlPanel, driver: EngineDriver | None, state: DriverState | None) -> str:
    parts = [f"<b>{_state_label(state)}</b>"]
    if driver is not None:
        if driver.stopping:
            parts[0] = f"<b>{t('正在暂停…', 'pausing…')}</b>"
        total = len(driver.arrivals)
        parts += [f"{t('步', 'step')} {driver.num_steps}",
                  f"{t('已到达', 'arrived')} {driver.num_admitted}/{total}",
                  f"{t('已完成', 'finished')} {driver.num_finished}",
                  f"{t('时钟', 'clock')} {driver.clock.now():.1f} s"]
        if driver.aborted_ids:
            parts.append(f"{t('已中止', 'aborted')} {len(driver.aborted_ids)}")
    if panel._applied is not None and panel.settings != panel._applied:
        parts.append(f"<i>{t('设置已更改：按「重置」生效', 'settings changed: press Reset to apply')}</i>")
    error = panel.error or (driver.error if driver is not None else None)
    body = " · ".join(parts)
    if error:
        body += f'<div class="lk-panel-error" style="color:#C0392B">{html.escape(error)}</div>'
    step = driver.num_steps if driver is not None else 0
    return (f'<div class="lk-panel-status" data-state="{state.value if state else "none"}" '
            f'data-step="{step}">{body}</div>')


def _follow_language(panel: ControlPanel) -> Callable[[str], None]:
    """Relabel ``panel`` on ``labkit.set_language``; held weakly so a dropped panel can go."""
    ref = weakref.ref(panel)

    def relabel(_language: str) -> None:
        alive = ref()
        if alive is not None:
            alive._relabel()

    i18n.on_language_change(relabel)
    return relabel


@atexit.register
def _shutdown_live_panels() -> None:
    """Kernel exit (Voila shuts the kernel down when its page closes): stop every run, abort requests."""
    for panel in list(_LIVE_PANELS):
        try:
            panel._stop_driver(timeout=2.0)
        except Exception:   # the interpreter is going away; nothing left to report to
            pass
