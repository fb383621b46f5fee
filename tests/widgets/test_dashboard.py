"""The control panel and the engine room, driven from Python the way the buttons drive them.

Real engine (SmolLM2-135M on the paged / continuous path) on tiny workloads. What is specified:
Step does exactly one engine step and the views' synced state follows; Run steps in a background
thread, adds requests no earlier than their arrival times and finishes the workload; Pause stops
between steps; Reset aborts every request (the pool returns to 0 used blocks) and rebuilds with the
current settings; closing mid-run (or the kernel exiting) stops the thread and leaves nothing
running; a setting the engine cannot build shows its error in the panel. Layouts the lead is still
adding (contiguous KV, static batching, the simulated model) are checked once they import.
"""

from __future__ import annotations

import threading
import time

import pytest

from labkit import i18n
from labkit.events import RequestAdded, StepEnd
from labkit.sampling_params import SamplingParams
from labkit.widgets import EngineRoom, PanelSettings
from labkit.widgets.control_panel import ControlPanel, _shutdown_live_panels
from labkit.widgets.engine_driver import Arrival, DriverState, EngineDriver
from labkit.widgets.panel_settings import build_arrivals, build_engine

WAIT_S = 120   # generous: the CI machine has 2 shared cores


def tiny(**overrides) -> PanelSettings:
    """A workload that finishes in a few engine steps."""
    fields = dict(block_size=8, num_blocks=32, max_num_seqs=4, num_requests=2, request_rate=0.0,
                  max_tokens=3, max_model_len=256)
    return PanelSettings(**{**fields, **overrides})


def kv_usage(engine) -> float:
    return engine.stats()["kv_cache_usage_perc"]


def wait_for(predicate, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def room():
    room = EngineRoom(tiny())
    yield room
    room.close()


@pytest.fixture
def panel():
    panel = ControlPanel(tiny(num_requests=3, max_tokens=6))
    yield panel
    panel.close()


# ----------------------------------------------------------------------------- Step

def test_step_does_one_engine_step_and_the_views_show_it(room):
    room.panel.step()
    room.views.flush()

    assert room.panel.driver.num_steps == 1
    block_map, timeline = room.views.block_map, room.views.timeline
    assert block_map.step == 1 and timeline.step == 1
    assert set(owner for owner in block_map.owner if owner) == {"0", "1"}   # both prompts prefilled
    assert timeline.kinds == ["pp"]
    assert 'data-step="1"' in room.panel.status.value


def test_step_when_idle_jumps_to_the_next_arrival_instead_of_waiting():
    engine = build_engine(tiny())
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    driver = EngineDriver(engine, [Arrival("0", 0.0, [5, 6, 7], params, chat=False),
                                   Arrival("1", 3600.0, [8, 9, 10], params, chat=False)])
    while driver.num_admitted < 2:
        assert driver.step()
    assert 3600.0 <= driver.clock.now() < 3600.0 + WAIT_S   # jumped, plus the one step it took
    while driver.step():
        pass
    assert driver.state is DriverState.FINISHED and driver.finished_ids == {"0", "1"}


# ----------------------------------------------------------------------------- Run / Pause

def test_run_finishes_the_workload_in_a_background_thread(panel):
    step_threads = set()
    panel.engine.hooks.subscribe(lambda _e: step_threads.add(threading.current_thread()), StepEnd)

    panel.run()
    assert panel.wait(WAIT_S)

    assert panel.driver.state is DriverState.FINISHED
    assert panel.driver.finished_ids == {"0", "1", "2"}
    assert threading.main_thread() not in step_threads and len(step_threads) == 1
    assert not panel.engine.has_unfinished_requests() and kv_usage(panel.engine) == 0.0
    assert 'data-state="finished"' in panel.status.value


def test_run_adds_each_request_no_earlier_than_its_arrival_time():
    engine = build_engine(tiny())
    added = []   # (arrival_time stamped on the request, engine clock when it was added)
    engine.hooks.subscribe(lambda e: added.append((e.arrival_time, engine.clock())), RequestAdded)
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    arrivals = [Arrival(str(i), t, [5 + i, 6, 7], params, chat=False) for i, t in enumerate((0.0, 0.3, 0.6))]
    driver = EngineDriver(engine, arrivals)

    driver.run()
    assert driver.wait(WAIT_S) and driver.state is DriverState.FINISHED

    stamps = [stamp for stamp, _ in added]
    assert [b - a for a, b in zip(stamps, stamps[1:])] == pytest.approx([0.3, 0.3])
    assert all(now >= stamp for stamp, now in added)


def test_pause_stops_between_steps_and_run_resumes(panel):
    panel.run()
    wait_for(lambda: panel.driver.num_steps >= 1)
    panel.pause(wait=True)
    steps = panel.driver.num_steps

    time.sleep(0.3)
    assert panel.driver.state is DriverState.PAUSED and not panel.driver.running
    assert panel.driver.num_steps == steps

    panel.run()
    assert panel.wait(WAIT_S) and panel.driver.state is DriverState.FINISHED


# ----------------------------------------------------------------------------- Reset

def test_reset_aborts_every_request_and_empties_the_pool(room):
    for _ in range(2):
        room.panel.step()
    old_engine, old_views = room.panel.engine, room.views
    assert kv_usage(old_engine) > 0

    room.panel.reset()

    assert kv_usage(old_engine) == 0.0 and not old_engine.has_unfinished_requests()
    assert room.panel.engine is not old_engine and room.panel.driver.state is DriverState.READY
    assert not any(view.attached for view in old_views.views.values())
    assert all(view.attached for view in room.views.views.values())


def test_reset_applies_the_changed_settings(panel):
    panel.knobs["block_size"].value = 16
    panel.knobs["num_blocks"].value = 24
    assert "重置" in panel.status.value   # the panel says the change waits for Reset

    panel.reset()

    assert (panel.engine.config.block_size, panel.engine.config.num_blocks) == (16, 24)


def test_run_on_an_untouched_engine_adopts_changed_settings_first(panel):
    panel.knobs["max_num_seqs"].value = 2
    panel.step()
    assert panel.engine.config.max_num_seqs == 2 and panel.driver.num_steps == 1


# ----------------------------------------------------------------------------- leaving mid-run

def test_close_mid_run_stops_the_thread_and_leaves_nothing_running():
    room = EngineRoom(tiny(num_requests=4, max_tokens=64))
    engine, driver, views = room.panel.engine, room.panel.driver, room.views
    room.panel.run()
    wait_for(lambda: driver.num_steps >= 1)

    room.close()

    assert not driver.running and driver.state is DriverState.STOPPED
    assert not engine.has_unfinished_requests() and kv_usage(engine) == 0.0
    assert not any(view.attached for view in views.views.values())


def test_kernel_exit_stops_a_running_panel_and_aborts_its_requests(panel):
    panel.run()
    wait_for(lambda: panel.driver.num_steps >= 1)

    _shutdown_live_panels()   # what atexit runs when the kernel process ends

    assert not panel.driver.running and panel.driver.state is DriverState.STOPPED
    assert not panel.engine.has_unfinished_requests() and kv_usage(panel.engine) == 0.0


# ----------------------------------------------------------------------------- errors, language

def test_a_setting_the_engine_rejects_shows_its_error_in_the_panel(panel):
    panel.knobs["scheduler"].value = "static"
    panel.knobs["spec_method"].value = "ngram"

    panel.reset()

    assert panel.engine is None and "speculative" in panel.error
    assert "lk-panel-error" in panel.status.value and panel.buttons["run"].disabled
    panel.knobs["scheduler"].value = "continuous"
    panel.reset()
    assert panel.engine is not None and panel.error is None


def test_labels_follow_the_language(panel):
    try:
        i18n.set_language("en")
        assert panel.buttons["run"].description == "Run"
        assert panel.knobs["kv_cache"].description == "KV layout"
    finally:
        i18n.set_language("zh")
    assert panel.buttons["run"].description == "运行"


# ----------------------------------------------------------------------------- workloads

def test_arrivals_form_a_poisson_process_at_the_request_rate(llm):
    times = [a.arrival_s for a in build_arrivals(tiny(num_requests=400, request_rate=5.0), llm.engine)]
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] / 399 == pytest.approx(1 / 5.0, rel=0.15)   # mean gap 1/rate
    assert {a.arrival_s for a in build_arrivals(tiny(request_rate=0.0), llm.engine)} == {0.0}


def test_synthetic_requests_fit_the_pool_and_run_to_their_sampled_length(llm):
    settings = tiny(workload="synthetic", num_requests=50, max_tokens=40, num_blocks=16)   # 128 slots
    arrivals = build_arrivals(settings, llm.engine)
    for a in arrivals:
        assert not a.chat and a.params.ignore_eos
        assert len(a.prompt) + a.params.max_tokens <= 128 and a.params.max_tokens <= 40
    lengths = sorted(len(a.prompt) for a in arrivals)
    assert lengths[-1] > 3 * lengths[len(lengths) // 2]   # heavy tail: the longest dwarfs the median


@pytest.mark.parametrize("settings, module", [
    (dict(kv_cache="contiguous"), "labkit.kv.contiguous"),
    (dict(scheduler="static"), "labkit.scheduler.static"),
    (dict(model="sim"), "labkit.sim.simulator"),
])
def test_other_engine_choices_run_a_workload_once_they_exist(settings, module):
    pytest.importorskip(module)
    panel = ControlPanel(tiny(**settings))
    try:
        assert panel.error is None, panel.error
        panel.run()
        assert panel.wait(WAIT_S) and panel.driver.state is DriverState.FINISHED
        assert kv_usage(panel.engine) == 0.0
    finally:
        panel.close()


def test_prompts_too_long_to_finish_in_the_pool_are_left_out(llm):
    settings = tiny(workload="copy", num_requests=40, max_tokens=16)   # room: 256 slots
    for a in build_arrivals(settings, llm.engine):
        assert len(llm.engine.tokenizer.encode_prompt(a.prompt, chat=True)) + 16 <= settings.room
    with pytest.raises(ValueError, match="enlarge the KV pool"):
        build_arrivals(tiny(workload="copy", num_blocks=8, block_size=4), llm.engine)   # 32 slots


def test_a_speculative_run_measures_its_speed_up_against_the_plain_run_before_it():
    room = EngineRoom(tiny(model="sim", num_requests=3, max_tokens=8))
    try:
        room.panel.run()
        assert room.panel.wait(WAIT_S)
        plain = room.baseline_tpot_s()
        assert plain is not None and plain > 0
        assert "acceptance" not in room.views.views                   # no speculation: no empty panel
        room.panel.knobs["spec_method"].value = "ngram"
        room.panel.reset()
        assert room.views.acceptance.baseline_tpot_s == plain         # filled from the run, not typed in
    finally:
        room.close()
