"""Live widgets: driven by hand-made events on an EventBus, the way the engine will drive them.

What is checked: the synced traits (what a browser, Voila or a page reload sees) show the latest
step; pushes are throttled yet the last state always arrives; a failing subscriber never stops
the others; close() unsubscribes; labels follow the language; the formulas the views print; and
each widget's JavaScript parses and draws against the real synced state (node, fake DOM).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import i18n
from labkit.events import BatchEntry, EventBus, RequestAdded, RequestFinished, SpecVerified, StepEnd, StepStats
from labkit.kv.snapshot import BlockMapSnapshot, Region
from labkit.request import RequestTimings
from labkit.scheduler_output import StepKind
from labkit.widgets import (
    AcceptanceView,
    BatchTimeline,
    BlockMap,
    EngineViews,
    LatencyView,
    MemoryGauge,
    TokensAppended,
    TokenStream,
    request_color,
)
from labkit.widgets.acceptance_view import estimate_alpha, expected_tokens_per_step, leviathan_speedup
from labkit.widgets.base import bundle_esm
from labkit.widgets.detokenizer import IncrementalDetokenizer
from labkit.widgets.history import StepHistory, link_scrub
from labkit.widgets.throttle import Throttle

ALL_VIEW_CLASSES = (BlockMap, BatchTimeline, AcceptanceView, MemoryGauge, TokenStream, LatencyView)


# ----------------------------------------------------------------------------- synthetic events

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stats(step: int, **values) -> StepStats:
    fields = dict(step=step, num_requests_running=1, num_requests_waiting=0, num_scheduled_tokens=1,
                  kv_cache_usage_perc=0.0, kv_waste_perc=0.0, kv_reserved_unused_perc=0.0,
                  kv_internal_frag_perc=0.0, kv_external_frag_perc=0.0, batch_occupancy_perc=0.0,
                  token_budget_perc=0.0, num_preemptions=0, host_s=0.0, model_s=0.0, step_s=0.0)
    return StepStats(**{**fields, **values})


def paged_snapshot(requests: dict[str, tuple[list[int], int]], num_blocks: int = 8,
                   block_size: int = 4, cached: tuple[int, ...] = ()) -> BlockMapSnapshot:
    """``requests``: id -> (block table, tokens held). Shared blocks list several holders."""
    owner: list[str | None] = [None] * num_blocks
    ref_cnt, filled = [0] * num_blocks, [0] * num_blocks
    for rid, (table, num_tokens) in requests.items():
        for logical, block in enumerate(table):
            owner[block] = owner[block] or rid
            ref_cnt[block] += 1
            filled[block] = max(filled[block], min(block_size, num_tokens - logical * block_size))
    return BlockMapSnapshot("paged", block_size, num_blocks, tuple(owner), tuple(filled), tuple(ref_cnt),
                            tuple(b in cached for b in range(num_blocks)),
                            block_tables=tuple((rid, tuple(t)) for rid, (t, _) in requests.items()))


def step_end(step: int, requests=None, batch=(), **stat_values) -> StepEnd:
    snapshot = paged_snapshot(requests or {})
    return StepEnd(step, stats(step, **stat_values), snapshot, tuple(batch))


def finished(rid: str, ttft: float, tpot: float, n: int = 11) -> RequestFinished:
    timings = RequestTimings(arrival_time=0.0, first_scheduled_time=0.0, first_token_time=ttft,
                             finished_time=ttft + tpot * (n - 1), num_output_tokens=n, num_preemptions=0)
    return RequestFinished(rid, "length", timings)


@pytest.fixture(autouse=True)
def chinese_after_each_test():
    yield
    i18n.set_language("zh")


# ----------------------------------------------------------------------------- latest state, throttling

def test_block_map_syncs_the_latest_step_not_the_first():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    bus.emit(step_end(0, {"a": ([0], 1)}))
    bus.emit(step_end(1, {"a": ([0, 5], 6), "b": ([2], 3)}))
    view.flush()
    assert view.step == 1
    assert view.owner == ["a", None, "b", None, None, "a", None, None]
    assert view.filled == [4, 0, 3, 0, 0, 2, 0, 0]
    assert view.block_tables == {"a": [0, 5], "b": [2]}
    assert view.summary["num_used"] == 3


def test_block_map_marks_shared_and_prefix_cached_blocks():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    snapshot = paged_snapshot({"a": ([0, 1], 8), "b": ([0, 3], 6)}, cached=(0, 6))
    bus.emit(StepEnd(0, stats(0), snapshot, ()))
    view.flush()
    assert view.ref_cnt[0] == 2 and view.summary["num_shared"] == 1
    assert view.cached[6] and view.owner[6] is None          # free yet reusable from the cache
    assert view.summary["num_cached"] == 2


def test_block_map_sends_contiguous_regions():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    region = Region("a", start=0, reserved=16, used=5, needed=9)
    snapshot = BlockMapSnapshot("contiguous", 4, 8, ("a",) * 4 + (None,) * 4, (4, 1, 0, 0, 0, 0, 0, 0),
                                (1,) * 4 + (0,) * 4, (False,) * 8, regions=(region,))
    bus.emit(StepEnd(3, stats(3, kv_external_frag_perc=12.5), snapshot, ()))
    view.flush()
    assert view.kv_layout == "contiguous"
    assert view.regions == [{"request_id": "a", "start": 0, "reserved": 16, "used": 5, "needed": 9}]
    assert view.summary["kv_external_frag_perc"] == 12.5


def test_a_request_has_the_same_colour_in_every_view():
    bus = EventBus()
    block_map, timeline, tokens = BlockMap(hooks=bus), BatchTimeline(hooks=bus), TokenStream(hooks=bus)
    bus.emit(RequestAdded("req-7", 3, 4, 0.0))
    bus.emit(step_end(0, {"req-7": ([1], 3)}, [BatchEntry("req-7", 0, 3, StepKind.PREFILL)]))
    for view in (block_map, timeline, tokens):
        view.flush()
        assert view.colors == {"req-7": request_color("req-7")}


def test_consecutive_request_ids_get_distinct_colours():
    colours = [request_color(str(i)) for i in range(16)]
    assert len(set(colours)) == 16
    assert request_color("req-3") == request_color("req-3")


def test_pushes_are_throttled_and_flush_sends_the_last_step():
    clock, bus = FakeClock(), EventBus()
    view = MemoryGauge(hooks=bus, clock=clock)
    for step in range(100):             # 100 steps in one second of (fake) time
        clock.now = step * 0.01
        bus.emit(step_end(step, kv_cache_usage_perc=float(step)))
    assert view.num_pushes <= 11
    assert view.step < 99               # between pushes the browser lags behind ...
    view.flush()
    assert (view.step, view.usage_perc) == (99, 99.0)   # ... and flush brings it to the latest


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=0.3), min_size=1, max_size=80))
def test_throttle_never_pushes_twice_within_its_interval(gaps):
    clock, times = FakeClock(), []
    throttle = Throttle(lambda: times.append(clock.now), interval_s=0.1, clock=clock)
    for gap in gaps:
        clock.now += gap
        throttle.mark_dirty()
    assert all(b - a >= 0.1 - 1e-9 for a, b in zip(times, times[1:]))
    assert len(times) <= 1 + (clock.now - gaps[0]) / 0.1 + 1e-9
    assert times[0] == gaps[0]          # the first change goes out at once


def test_trailing_push_delivers_the_last_state_without_flush():
    async def run() -> BlockMap:
        bus = EventBus()
        view = BlockMap(hooks=bus, interval_s=0.05)   # built inside a running loop, like a kernel
        bus.emit(step_end(0, {"a": ([0], 1)}))
        bus.emit(step_end(1, {"a": ([0], 2)}))          # inside the window: held back
        assert view.step == 0
        await asyncio.sleep(0.2)
        return view

    assert asyncio.run(run()).step == 1


# ----------------------------------------------------------------------------- robustness, lifecycle

def test_a_raising_subscriber_does_not_stop_the_views():
    bus = EventBus()

    def broken(event):
        raise RuntimeError("observer bug")

    bus.subscribe(broken)
    view = MemoryGauge(hooks=bus)
    with pytest.warns(RuntimeWarning, match="observer bug"):
        bus.emit(step_end(0, kv_cache_usage_perc=10.0))
    bus.emit(step_end(1, kv_cache_usage_perc=20.0))
    view.flush()
    assert view.usage_perc == 20.0
    assert [e.subscriber for e in bus.errors] == ["test_a_raising_subscriber_does_not_stop_the_views.<locals>.broken"]


def test_a_view_that_raises_is_dropped_and_says_so():
    bus = EventBus()
    view, other = BlockMap(hooks=bus), MemoryGauge(hooks=bus)
    with pytest.warns(RuntimeWarning):
        bus.emit(StepEnd(0, stats(0), None, ()))       # malformed: no block map
    assert not view.attached and other.attached
    bus.emit(step_end(1))
    other.flush()
    assert other.step == 1


@pytest.mark.parametrize("cls", ALL_VIEW_CLASSES)
def test_close_unsubscribes(cls):
    bus = EventBus()
    view = cls(hooks=bus)
    assert bus.active
    view.close()
    assert not bus.active and not view.attached


def test_detach_keeps_the_final_picture_and_ignores_later_events():
    clock, bus = FakeClock(), EventBus()
    view = BlockMap(hooks=bus, clock=clock)
    bus.emit(step_end(0, {"a": ([0], 1)}))
    bus.emit(step_end(1, {"a": ([0], 2)}))     # held back by the throttle
    view.detach()
    bus.emit(step_end(2, {"a": ([0], 3)}))
    view.flush()
    assert view.step == 1 and not bus.active


def test_views_take_the_bus_from_an_engine_or_an_llm():
    class Engine:
        hooks = EventBus()

    class LLM:
        engine = Engine()

    assert BlockMap(Engine()).attached and BlockMap(LLM()).attached
    with pytest.raises(TypeError, match="hooks"):
        BlockMap(object())


@pytest.mark.parametrize("cls", ALL_VIEW_CLASSES)
def test_language_switch_relabels(cls):
    view = cls(hooks=EventBus())
    chinese = dict(view.labels)
    i18n.set_language("en")
    assert view.labels.keys() == chinese.keys()
    assert view.labels["title"] != chinese["title"]
    assert view.labels["title"].isascii() and not chinese["title"].isascii()


def test_a_closed_view_ignores_language_switches():
    view = BlockMap(hooks=EventBus())
    view.close()
    i18n.set_language("en")
    assert not view.labels["title"].isascii()


def test_engine_views_builds_the_chosen_views_on_one_bus():
    bus = EventBus()
    views = EngineViews(hooks=bus, include=("block_map", "timeline"))
    assert sorted(views.views) == ["block_map", "timeline"] and views.block_map.attached
    views.close()
    assert not bus.active
    with pytest.raises(ValueError, match="unknown views"):
        EngineViews(hooks=bus, include=("pie_chart",))


# ----------------------------------------------------------------------------- batch timeline

def test_timeline_keeps_a_bounded_window_of_slots_by_kind():
    bus = EventBus()
    view = BatchTimeline(hooks=bus, window=5)
    for step in range(8):
        a = BatchEntry("a", 0, 16, StepKind.PREFILL) if step == 0 else BatchEntry("a", 0, 1, StepKind.DECODE)
        batch = [a, BatchEntry("b", 2, 0, StepKind.IDLE)]
        bus.emit(step_end(step, batch=batch, batch_occupancy_perc=50.0, token_budget_perc=float(step)))
    view.flush()
    assert view.steps == [3, 4, 5, 6, 7]
    assert view.kinds == ["d.i"] * 5                  # slot 1 empty, slot 2 held but idle
    assert view.requests[-1] == ["a", None, "b"] and view.tokens[-1] == [1, 0, 0]
    assert view.token_budget_perc == [3.0, 4.0, 5.0, 6.0, 7.0]


# ----------------------------------------------------------------------------- speculative decoding

@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=0, max_value=10))
def test_expected_tokens_is_the_geometric_sum(alpha, k):
    assert expected_tokens_per_step(alpha, k) == pytest.approx(sum(alpha ** i for i in range(k + 1)))


def test_leviathan_speedup_limits():
    assert leviathan_speedup(0.0, 4, 0.5) == pytest.approx(1 / 3)       # every draft wasted
    assert leviathan_speedup(1.0, 4, 0.0) == pytest.approx(5.0)         # free, perfect draft
    assert leviathan_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.2))
    with pytest.raises(ValueError):
        leviathan_speedup(1.2, 4, 0.0)


def draft_outcomes(alpha: float, k: int, n: int, seed: int) -> list[int]:
    """Accepted counts of n drafts: each position passes with prob. alpha until the first miss."""
    rng, counts = random.Random(seed), []
    for _ in range(n):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        counts.append(accepted)
    return counts


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85])
def test_alpha_estimate_recovers_the_per_token_acceptance(alpha):
    k, counts = 4, draft_outcomes(alpha, 4, 20_000, seed=int(alpha * 100))
    accepted, rejections = sum(counts), sum(c < k for c in counts)
    assert estimate_alpha(accepted, rejections) == pytest.approx(alpha, abs=0.015)
    assert accepted / (k * len(counts)) < alpha - 0.05     # the acceptance rate is not α


def test_acceptance_view_counts_per_position_and_speedups():
    bus = EventBus()
    view = AcceptanceView(hooks=bus, c=0.1, baseline_tpot_s=0.030)
    bus.emit(SpecVerified("a", 3, 3, (True, True, True)))
    bus.emit(SpecVerified("a", 3, 1, (True, False, False)))
    bus.emit(SpecVerified("b", 2, 0, (False, False)))
    bus.emit(SpecVerified("b", 0, 0, ()))                  # nothing proposed: not a draft
    bus.emit(finished("a", ttft=0.1, tpot=0.010))
    bus.emit(finished("b", ttft=0.1, tpot=0.020))
    view.flush()
    assert (view.num_drafts, view.num_draft_tokens, view.num_accepted_tokens, view.k) == (3, 8, 4, 3)
    assert view.drafts_per_pos == [3, 3, 2] and view.accepted_per_pos == [2, 1, 1]
    assert view.history == [[3, 3], [1, 3], [0, 2]]
    assert view.acceptance_rate == pytest.approx(4 / 8)
    assert view.mean_acceptance_length == pytest.approx(1 + 4 / 3)
    assert view.alpha == pytest.approx(4 / (4 + 2))
    assert view.predicted_speedup == pytest.approx(leviathan_speedup(4 / 6, 3, 0.1))
    assert view.measured_speedup == pytest.approx(0.030 / 0.015)


def test_without_a_given_c_the_view_measures_it_from_the_proposer_time_and_the_baseline():
    """c = mean proposer time per drafting step / (k · baseline TPOT); a given c wins over it."""
    bus = EventBus()
    view = AcceptanceView(hooks=bus)
    bus.emit(SpecVerified("a", 4, 2, (True, True, False, False)))
    bus.emit(step_end(1, propose_s=0.002))
    bus.emit(step_end(2, propose_s=0.004))
    bus.emit(step_end(3, propose_s=0.0))                  # a step that drafted nothing does not count
    view.flush()
    assert view.c_measured is None and view.predicted_speedup is None      # no baseline yet
    view.baseline_tpot_s = 0.025
    view.flush()
    assert view.c_measured == pytest.approx(0.003 / (4 * 0.025))
    assert view.predicted_speedup == pytest.approx(leviathan_speedup(view.alpha, 4, view.c_measured))
    view.c = 0.5
    view.flush()
    assert view.predicted_speedup == pytest.approx(leviathan_speedup(view.alpha, 4, 0.5))
    own_bus = EventBus()                                  # a caller that measures c itself (lab 04's demo)
    caller_measured = AcceptanceView(hooks=own_bus, baseline_tpot_s=0.025, show_inputs=False)
    assert not own_bus.wants(StepEnd)                     # so the engine builds no per-step snapshot for it
    own_bus.emit(SpecVerified("a", 4, 2, (True, True, False, False)))
    caller_measured.flush()
    assert caller_measured.c_measured is None


def test_setting_c_recomputes_the_prediction_at_once():
    bus = EventBus()
    view = AcceptanceView(hooks=bus)
    bus.emit(SpecVerified("a", 4, 2, (True, True, False, False)))
    view.flush()
    assert view.predicted_speedup is None and view.predicted_curve == []
    view.c = 0.25                                           # e.g. typed into the widget
    assert view.predicted_speedup == pytest.approx(leviathan_speedup(2 / 3, 4, 0.25))
    assert [k for k, _ in view.predicted_curve] == list(range(1, 9))


# ----------------------------------------------------------------------------- memory, latency

def test_memory_gauge_shows_the_latest_split_and_a_bounded_history():
    bus = EventBus()
    view = MemoryGauge(hooks=bus, window=3)
    for step in range(5):
        bus.emit(step_end(step, kv_cache_usage_perc=10.0 * step, kv_waste_perc=40.0,
                          kv_reserved_unused_perc=30.0, kv_internal_frag_perc=10.0, kv_external_frag_perc=5.0))
    view.flush()
    assert (view.usage_perc, view.waste_perc, view.reserved_unused_perc) == (40.0, 40.0, 30.0)
    assert (view.internal_frag_perc, view.external_frag_perc) == (10.0, 5.0)
    assert view.history["step"] == [2, 3, 4] and view.history["usage"] == [20.0, 30.0, 40.0]


def test_latency_percentiles_follow_the_samples():
    bus = EventBus()
    view = LatencyView(hooks=bus)
    rng = np.random.default_rng(0)
    ttfts, tpots = rng.lognormal(-2, 0.5, 50), rng.lognormal(-4, 0.3, 50)
    for i, (ttft, tpot) in enumerate(zip(ttfts, tpots)):
        bus.emit(finished(str(i), float(ttft), float(tpot)))
    bus.emit(RequestFinished("x", "abort", RequestTimings(0.0, None, None, 0.5, 0, 0)))   # no TTFT
    view.flush()
    assert view.num_finished == 51 and len(view.ttft_s) == 50
    assert view.percentiles["ttft_s"]["p99"] == pytest.approx(np.percentile(ttfts, 99))
    assert view.percentiles["tpot_s"]["p50"] == pytest.approx(np.percentile(tpots, 50), rel=1e-6)


# ----------------------------------------------------------------------------- token stream

def utf8_detokenize(ids: list[int]) -> str:
    """A byte-level 'tokenizer': one token per UTF-8 byte, like the worst case of byte BPE."""
    return bytes(ids).decode("utf-8", errors="replace")


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="ab 你好世界。é", min_size=1, max_size=20), st.integers(min_value=1, max_value=4))
def test_incremental_detokenizer_never_splits_a_character(text, chunk):
    ids, detok, pieces = list(text.encode()), IncrementalDetokenizer(utf8_detokenize), []
    for i in range(0, len(ids), chunk):
        pieces.append(detok.append(ids[i:i + chunk]))
    pieces.append(detok.finish())
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)


def test_token_stream_marks_accepted_draft_tokens():
    bus = EventBus()
    view = TokenStream(hooks=bus, detokenize=utf8_detokenize)
    bus.emit(RequestAdded("a", 5, 16, 0.0))
    bus.emit(TokensAppended("a", tuple(b"Hi")))
    bus.emit(TokensAppended("a", tuple(" 你好".encode()), num_accepted_draft=4))   # " 你" drafted
    bus.emit(RequestFinished("a", "stop", RequestTimings(0.0, 0.0, 0.1, 0.2, 9, 0)))
    view.flush()
    assert view.segments == {"a": [["Hi", "target"], [" 你", "draft"], ["好", "target"]]}
    assert view.finished == {"a": "stop"} and view.num_tokens == {"a": 9}
    assert view.text("a") == "Hi 你好"


def test_token_stream_without_a_tokenizer_shows_ids():
    bus = EventBus()
    view = TokenStream(hooks=bus)
    bus.emit(TokensAppended("a", (5, 17)))
    view.flush()
    assert view.text("a") == "[5][17]"


def test_token_stream_drops_finished_requests_first():
    bus = EventBus()
    view = TokenStream(hooks=bus, max_requests=2, detokenize=utf8_detokenize)
    bus.emit(RequestAdded("old-running", 1, 4, 0.0))
    bus.emit(RequestAdded("done", 1, 4, 0.0))
    bus.emit(RequestFinished("done", "stop", RequestTimings(0.0, 0.0, 0.1, 0.2, 1, 0)))
    bus.emit(RequestAdded("new", 1, 4, 0.0))
    view.flush()
    assert view.order == ["old-running", "new"]


# ----------------------------------------------------------------------------- the JavaScript

FAKE_DOM = r"""
// Minimal DOM + canvas stand-ins: enough to run a view's render() and catch runtime errors.
// model.get() throws on a trait Python does not send, so names must match on both sides.
const listeners = [];
function element(tag) {
  const el = { tagName: tag, children: [], style: { setProperty() {} }, classList: { add() {} }, dataset: {},
    clientWidth: 900, scrollHeight: 0, scrollTop: 0, clientHeight: 0, value: "",
    append(...kids) { this.children.push(...kids); }, appendChild(kid) { this.children.push(kid); return kid; },
    replaceChildren(...kids) { this.children = kids; },
    addEventListener(type, fn) { listeners.push([this, type, fn]); },
    getBoundingClientRect() { return { left: 0, top: 0 }; } };
  if (tag === "canvas") {
    const ctx = new Proxy({}, { get: (t, p) => p in t ? t[p] : p === "measureText" ? () => ({ width: 20 })
                                                                 : () => undefined,
                                set: (t, p, v) => { t[p] = v; return true; } });
    el.getContext = () => ctx;
  }
  return el;
}
globalThis.window = { devicePixelRatio: 2 };
globalThis.document = { createElement: element, createTextNode: (s) => ({ text: s }), activeElement: null };
globalThis.requestAnimationFrame = (fn) => fn();
const [,, modulePath, statePath] = process.argv;
const state = JSON.parse(require("fs").readFileSync(statePath, "utf8"));
const handlers = {};
const model = {
  get(name) { if (!(name in state)) throw new Error("no synced trait " + name); return state[name]; },
  set(name, value) { state[name] = value; (handlers["change:" + name] || []).forEach((fn) => fn()); },
  save_changes() {}, on(name, fn) { (handlers[name] = handlers[name] || []).push(fn); }, off() {},
};
import(require("url").pathToFileURL(modulePath).href).then(({ default: widget }) => {
  const el = element("div");
  const cleanup = widget.render({ model, el });
  for (const name of Object.keys(handlers)) handlers[name].forEach((fn) => fn());   // every redraw path
  for (const [target, type, fn] of listeners) {
    for (const [x, y] of [[5, 5], [40, 30], [300, 120], [880, 400]]) {
      fn({ clientX: x, clientY: y });
      if (type === "change") break;
    }
  }
  cleanup();
  console.log("rendered");
}).catch((err) => { console.error(err.stack || err); process.exit(1); });
"""


@pytest.fixture(scope="module")
def populated_views() -> list:
    """One view of each kind (two block maps: paged and contiguous) after a few events."""
    bus, contiguous_bus = EventBus(), EventBus()
    paged, contiguous = BlockMap(hooks=bus), BlockMap(hooks=contiguous_bus)
    by_request = BatchTimeline(hooks=bus)
    by_request.color_by = "request"          # its legend names requests, not phases
    others = [BatchTimeline(hooks=bus), AcceptanceView(hooks=bus, c=0.1, baseline_tpot_s=0.02),
              MemoryGauge(hooks=bus), TokenStream(hooks=bus, detokenize=utf8_detokenize), LatencyView(hooks=bus),
              by_request]
    for step in range(3):
        batch = [BatchEntry("a", 0, 4, StepKind.PREFILL), BatchEntry("b", 1, 1, StepKind.VERIFY)]
        bus.emit(step_end(step, {"a": ([0, 1], 6), "b": ([0, 3], 5)}, batch,
                          kv_cache_usage_perc=30.0, kv_waste_perc=20.0, kv_internal_frag_perc=20.0))
        bus.emit(SpecVerified("b", 3, step, tuple(i < step for i in range(3))))
        bus.emit(TokensAppended("b", tuple("好a".encode()), num_accepted_draft=1))
    bus.emit(finished("a", 0.1, 0.01))
    region = Region("a", start=3, reserved=20, used=6, needed=9)
    contiguous_bus.emit(StepEnd(0, stats(0), BlockMapSnapshot(
        "contiguous", 4, 8, (None,) * 8, (0,) * 8, (0,) * 8, (False,) * 8, regions=(region,)), ()))
    views = [paged, contiguous, *others]
    for view in views:
        view.flush()
    return views


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("index", range(8))
def test_widget_javascript_renders_the_synced_state(populated_views, index, tmp_path):
    view = populated_views[index]
    module = tmp_path / "widget.mjs"
    module.write_text(view._esm)
    check = subprocess.run(["node", "--check", str(module)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    state = tmp_path / "state.json"
    state.write_text(json.dumps({k: v for k, v in view.get_state().items() if not k.startswith("_")}))
    harness = tmp_path / "harness.cjs"
    harness.write_text(FAKE_DOM)
    run = subprocess.run(["node", str(harness), str(module), str(state)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and "rendered" in run.stdout, run.stderr


def test_widget_modules_are_self_contained():
    for name in ("block_map", "batch_timeline", "acceptance_view", "memory_gauge", "token_stream",
                 "latency_view"):
        source = bundle_esm(f"{name}.js")
        assert "import " not in source.replace("import(", "") and "http" not in source
        assert source.count("export default") == 1


# ----------------------------------------------------------------------------- step history and slider

def run_that_rises_and_ends(bus: EventBus, peak_at: int = 3, num_steps: int = 6) -> None:
    """Usage rises to a peak then drains; after the last step nothing runs (the run has ended)."""
    for step in range(num_steps):
        holders = max(0, 1 + peak_at - abs(step - peak_at)) if step < num_steps - 1 else 0
        requests = {f"r{i}": ([i], 4) for i in range(holders)}
        last = step == num_steps - 1
        bus.emit(step_end(step, requests, kv_cache_usage_perc=100.0 * holders / 8,
                          num_requests_running=0 if last else max(holders, 1)))


def test_block_map_after_a_finished_run_shows_its_peak_not_the_empty_pool():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    run_that_rises_and_ends(bus, peak_at=3)
    view.flush()
    assert view.history_steps == [0, 1, 2, 3, 4, 5]
    assert view.step == 3 and view.cursor == view.peak_index == 3 and not view.running
    assert sum(owner is not None for owner in view.owner) == 4          # the pool at its fullest


def test_block_map_follows_the_newest_step_while_the_engine_runs():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    for step in range(4):
        bus.emit(step_end(step, {"a": ([0], 4)} if step < 2 else {}, kv_cache_usage_perc=50.0 if step < 2 else 0.0))
    view.flush()
    assert view.running and view.step == 3 and view.cursor == 3 and view.peak_index == 0


def test_the_slider_scrubs_back_and_stays_pinned_until_follow():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    run_that_rises_and_ends(bus, peak_at=3)
    view.flush()
    view.set_state({"pinned": True, "cursor": 1})                       # what the front end sends
    assert view.step == 1 and sum(o is not None for o in view.owner) == 2
    view.show_step(5)
    assert view.step == 5 and all(o is None for o in view.owner)
    bus.emit(step_end(6, {"z": ([7], 4)}, kv_cache_usage_perc=12.5))  # a new run starts
    view.flush()
    assert view.step == 5, "a pinned view must not jump"
    view.follow()
    assert not view.pinned and view.step == 6 and view.owner[7] == "z"


def test_a_finished_block_map_sends_every_kept_step_as_a_frame_and_none_while_running():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    for step in range(3):
        bus.emit(step_end(step, {"a": ([step], 4)}, kv_cache_usage_perc=10.0, num_requests_running=1))
    view.flush()
    assert view.running and view.frames == []        # live: the kernel draws each step
    bus.emit(step_end(3, {}, kv_cache_usage_perc=0.0, num_requests_running=0))
    view.flush()
    assert [f["step"] for f in view.frames] == view.history_steps == [0, 1, 2, 3]
    assert view.frames[1]["owner"][1] == "a" and view.frames[1]["block_tables"] == {"a": [1]}


def test_a_shared_block_lists_every_request_holding_it():
    bus = EventBus()
    view = BlockMap(hooks=bus)
    bus.emit(step_end(0, {"A": ([3, 7], 8), "A#1": ([3, 5], 8), "A#2": ([3, 6], 8)}))
    view.flush()
    assert view.holders(3) == {"A": [3, 7], "A#1": [3, 5], "A#2": [3, 6]} and view.ref_cnt[3] == 3
    assert view.holders(5) == {"A#1": [3, 5]}


def test_memory_gauge_scrubs_the_same_way_and_marks_the_shown_step():
    bus = EventBus()
    gauge = MemoryGauge(hooks=bus)
    run_that_rises_and_ends(bus, peak_at=2, num_steps=5)
    gauge.flush()
    assert gauge.step == 2 and gauge.usage_perc == 100.0 * 3 / 8
    assert gauge.history["step"] == [0, 1, 2, 3, 4]                     # the trend keeps every step
    gauge.set_state({"pinned": True, "cursor": 4})
    assert gauge.step == 4 and gauge.usage_perc == 0.0


def test_step_history_is_bounded_covers_the_whole_run_and_keeps_the_peak():
    history = StepHistory(max_steps=50)
    for step in range(10_000):
        usage = 99.0 if step == 4_321 else float(step % 7)
        history.add(step_end(step, kv_cache_usage_perc=usage))
    steps = [e.step for e in history.entries()]
    assert len(steps) <= 52 and steps == sorted(set(steps))
    assert steps[0] == 0 and steps[-1] == 9_999 and 4_321 in steps
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    assert max(gaps) <= 2 * history.stride, "kept steps must spread over the whole run"


def test_step_history_keeps_fewer_steps_of_a_bigger_pool():
    history = StepHistory(max_steps=500, max_cells=4 * 8 * 10 + 100)   # room for ~10 snapshots of 8 blocks
    for step in range(200):
        history.add(step_end(step))
    assert 5 <= len(history.entries()) <= 13
    with pytest.raises(ValueError, match="max_steps"):
        StepHistory(max_steps=1)


def test_block_map_keeps_its_public_constructor():
    from labkit import LLM

    view = BlockMap(LLM(model="sim", progress=False))
    assert view.attached and view.history_steps == [] and view.cursor == -1
    view.close()


RECORDING_DOM = FAKE_DOM.replace(
    """    const ctx = new Proxy({}, { get: (t, p) => p in t ? t[p] : p === "measureText" ? () => ({ width: 20 })
                                                                 : () => undefined,
                                set: (t, p, v) => { t[p] = v; return true; } });""",
    """    // A recording context: every fillRect and fillText of the last frame, in CSS pixels.
    const ctx = new Proxy({ ops: [] }, { get: (t, p) => {
        if (p in t) return t[p];
        if (p === "measureText") return (s) => ({ width: 6 * String(s).length });   // 10px sans ~ 6 px/char
        if (p === "clearRect") return () => { t.ops = []; globalThis.lastOps = t; };
        if (p === "fillRect") return (x, y, w, h) => t.ops.push({ op: "rect", x, y, w, h, style: t.fillStyle });
        if (p === "fillText") return (text, x, y) => t.ops.push({ op: "text", text: String(text), x, y,
                                                                  align: t.textAlign, baseline: t.textBaseline });
        return () => undefined; },
      set: (t, p, v) => { t[p] = v; return true; } });""").replace(
    """  cleanup();
  console.log("rendered");""",
    """  cleanup();
  console.log(JSON.stringify(globalThis.lastOps.ops));""")
assert RECORDING_DOM != FAKE_DOM and "lastOps.ops" in RECORDING_DOM


def drawn(view, tmp_path) -> list[dict]:
    """The fillRect/fillText calls of the view's last frame (node, recording canvas)."""
    module, state, harness = tmp_path / "widget.mjs", tmp_path / "state.json", tmp_path / "harness.cjs"
    module.write_text(view._esm)
    state.write_text(json.dumps({k: v for k, v in view.get_state().items() if not k.startswith("_")}))
    harness.write_text(RECORDING_DOM)
    run = subprocess.run(["node", str(harness), str(module), str(state)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def text_box(op: dict, height: float = 11.0) -> tuple[float, float, float, float]:
    width = 6 * len(op["text"])
    x0 = {"left": op["x"], "right": op["x"] - width, "center": op["x"] - width / 2}.get(op["align"], op["x"])
    y0 = {"top": op["y"], "bottom": op["y"] - height, "middle": op["y"] - height / 2}.get(op["baseline"], op["y"] - height)
    return x0, y0, x0 + width, y0 + height


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("spread", [1.0, 1.02, 8.0])       # P99 = spread × P50: equal, close, far apart
def test_latency_percentile_labels_touch_neither_the_bars_nor_each_other(tmp_path, spread):
    bus = EventBus()
    view = LatencyView(hooks=bus)
    for i in range(40):
        bus.emit(finished(f"r{i}", ttft=0.05 * (spread if i == 39 else 1.0) + 0.0001 * i, tpot=0.02))
    view.flush()
    ops = drawn(view, tmp_path)
    labels = [text_box(op) for op in ops if op["op"] == "text" and op["text"].startswith(("P50", "P99"))]
    bars = [(op["x"], op["y"], op["x"] + op["w"], op["y"] + op["h"]) for op in ops
            if op["op"] == "rect" and op["h"] > 0 and str(op["style"]).startswith("rgba")]
    assert len(labels) == 4 and bars, (labels, len(bars))        # P50 and P99 in both panels
    for i, label in enumerate(labels):
        assert not any(overlap(label, bar) for bar in bars), f"label {label} covers a bar"
        assert not any(overlap(label, other) for other in labels[i + 1:]), f"labels overlap: {labels}"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_batch_timeline_fills_its_width_before_the_window_is_full(tmp_path):
    bus = EventBus()
    view = BatchTimeline(hooks=bus, window=120)
    for step in range(30):
        bus.emit(step_end(step, {"a": ([0], 4)}, [BatchEntry("a", 0, 1, StepKind.DECODE)]))
    view.flush()
    cells = [op for op in drawn(view, tmp_path) if op["op"] == "rect" and op["y"] < 20]
    left, right = min(op["x"] for op in cells), max(op["x"] + op["w"] for op in cells)
    width = 900 - 18                                          # the harness's element width, less padding
    assert left < 40 + 0.05 * width and right > 0.9 * width, (left, right)


def test_linked_views_move_together_when_the_learner_scrubs_one_and_follow_together():
    bus = EventBus()
    view, gauge = link_scrub(BlockMap(hooks=bus), MemoryGauge(hooks=bus))
    run_that_rises_and_ends(bus, peak_at=3)
    view.flush()
    gauge.flush()
    assert view.step == gauge.step == 3
    view.set_state({"pinned": True, "cursor": 1})                   # the learner drags the block map's slider
    assert view.step == gauge.step == 1 and gauge.pinned
    gauge.set_state({"pinned": True, "cursor": 4})                  # ... then the gauge's
    assert gauge.step == view.step == 4
    bus.emit(step_end(6, {"z": ([7], 4)}, kv_cache_usage_perc=12.5, num_requests_running=1))
    view.flush()
    gauge.flush()
    assert view.step == gauge.step == 4, "an engine update moves neither pinned view"
    view.follow()
    assert not gauge.pinned and view.step == gauge.step == 6


def test_unlinked_views_scrub_alone():
    bus = EventBus()
    view, gauge = BlockMap(hooks=bus), MemoryGauge(hooks=bus)
    run_that_rises_and_ends(bus, peak_at=3)
    view.flush()
    gauge.flush()
    view.set_state({"pinned": True, "cursor": 1})
    assert view.step == 1 and gauge.step == 3
