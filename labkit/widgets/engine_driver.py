"""``EngineDriver``: steps an engine in a background thread and feeds it a workload on time.

::

    workload   Arrival(arrival_s=0.0)  Arrival(0.4)  Arrival(0.9) …     seconds of running time
                          │ added when the workload clock reaches arrival_s
                          ▼
    run thread   admit due arrivals → engine.step() → admit → step → …  until every request ended
                 (waits while the engine is idle and the next arrival lies ahead)
    main thread  run() / pause() / step() / shutdown()   (Run / Pause / Step / Reset buttons)

Why a thread rather than an asyncio task on the kernel's loop: one engine step is blocking code that
takes milliseconds to seconds on a CPU. On the kernel's loop it would hold the loop for the whole
step, and a click on Pause would wait for it; in a thread (torch releases the GIL inside its
kernels) the kernel keeps answering widget messages, in JupyterLab and Voila alike. Engine events
are emitted on the run thread; the views lock and throttle what they send (``widgets/base.py``).

The workload clock counts running time only — time spent in Run or inside a Step — and stands
still while paused or between Step clicks, so a pause does not release a burst of overdue
arrivals. An arrival's timestamp is its place on that clock, so a request that waits behind a slow
step has the wait in its TTFT, and a pause taken while it is in flight is in its latency too.

A simulated engine (``engine.simulated``) keeps virtual time: its clock advances by each step's
simulated cost, and when it is idle the driver moves that clock to the next arrival (Step does the
same on any engine, so stepping never waits). Run paces it to the wall clock, so the views show the
virtual GPU at its real speed rather than a whole workload in one blink.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Callable

from labkit.sampling_params import SamplingParams

MAX_IDLE_WAIT_S = 0.1   # an idle run thread re-checks for Pause / shutdown this often


@dataclass(frozen=True)
class Arrival:
    """One request of the workload: what to add to the engine, and when (seconds of running time)."""

    request_id: str
    arrival_s: float
    prompt: str | list[int]
    params: SamplingParams
    chat: bool = True


class DriverState(str, enum.Enum):
    READY = "ready"          # nothing ran yet
    RUNNING = "running"      # the run thread is stepping
    PAUSED = "paused"        # stopped between steps; Run resumes, Step steps
    FINISHED = "finished"    # every arrival was added and has ended
    FAILED = "failed"        # a step raised; see ``error``
    STOPPED = "stopped"      # shut down: unfinished requests aborted, nothing runs again


class WorkloadClock:
    """Seconds of running time, read from the engine's clock; starts paused at 0."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._origin = clock()
        self._paused_at: float | None = self._origin

    def now(self) -> float:
        end = self._paused_at if self._paused_at is not None else self._clock()
        return end - self._origin

    def resume(self) -> None:
        if self._paused_at is not None:
            self._origin += self._clock() - self._paused_at
            self._paused_at = None

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = self._clock()

    def skip_to(self, t: float) -> None:
        """Jump ahead to running time ``t`` (never back).

        A virtual clock (one with ``advance_to``) is moved, so the idle time passes for the engine
        too; a wall clock cannot be, so the origin shifts instead.
        """
        gap = t - self.now()
        if gap <= 0:
            return
        advance = getattr(self._clock, "advance_to", None)
        if advance is not None and self._paused_at is None:
            advance(self._clock() + gap)
        else:
            self._origin -= gap

    def engine_time(self, t: float) -> float:
        """Running time ``t`` on the engine's clock (an arrival timestamp)."""
        return self._origin + t


class EngineDriver:
    """Runs ``arrivals`` through ``engine``; ``on_update()`` is called after each step and state change.

    ``on_update`` may be called on the run thread. All engine calls hold one lock, so Step, Reset
    and the run thread never touch the engine at the same time.
    """

    def __init__(self, engine, arrivals: list[Arrival], on_update: Callable[[], None] = lambda: None) -> None:
        self.engine = engine
        self.arrivals = sorted(arrivals, key=lambda a: a.arrival_s)
        self.state = DriverState.READY
        self.error: str | None = None
        self.num_steps = 0
        self.finished_ids: set[str] = set()  # ended by the engine (stop token, max_tokens)
        self.aborted_ids: set[str] = set()   # aborted by shutdown()
        self.clock = WorkloadClock(engine.clock)
        self._on_update = on_update
        self._simulated = bool(getattr(engine, "simulated", False))
        self._resumed_at = (0.0, 0.0)        # (wall clock, running time) when Run last started
        self._next = 0                       # index of the next arrival to add
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ progress

    @property
    def num_admitted(self) -> int:
        return self._next

    @property
    def num_finished(self) -> int:
        return len(self.finished_ids)

    @property
    def running(self) -> bool:
        """True while the run thread is alive (it may be finishing its last step after pause())."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """True between pause()/shutdown() and the run thread's exit."""
        return self.running and self._stop.is_set()

    # ------------------------------------------------------------------ controls

    def run(self) -> None:
        """Start (or resume) stepping in the background; no-op unless READY or PAUSED."""
        if self.running or self.state not in (DriverState.READY, DriverState.PAUSED):
            return
        self._stop.clear()
        self.state = DriverState.RUNNING
        self._thread = threading.Thread(target=self._run_loop, name="labkit-engine-driver", daemon=True)
        self._thread.start()
        self._on_update()

    def pause(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop after the current step; with ``wait`` block until the run thread has exited."""
        self._stop.set()
        if wait:
            self.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run thread exits; True if it did within ``timeout``."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def step(self) -> bool:
        """One engine step (adding what has arrived; jumping to the next arrival when idle).

        False, and no step, when the workload is done or the driver cannot step now (running,
        failed or stopped).
        """
        if self.running or self.state in (DriverState.FAILED, DriverState.STOPPED, DriverState.FINISHED):
            return False
        with self._lock:
            self.clock.resume()   # the workload clock runs while the step does
            try:
                stepped = self._step_or_skip(jump=True)
            except Exception as exc:
                self._fail(exc)
                raise
            finally:
                self.clock.pause()
            self.state = DriverState.PAUSED if stepped and not self._done() else DriverState.FINISHED
        self._on_update()
        return stepped

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the run thread and abort every unfinished request (the KV pool empties). Final."""
        self._closing = True
        self._stop.set()
        if not self.wait(timeout):
            return   # mid-step: the run thread aborts everything itself when the step ends
        with self._lock:
            self._abort_all()
        self.state = DriverState.STOPPED
        self._on_update()

    # ------------------------------------------------------------------ run thread

    def _run_loop(self) -> None:
        self.clock.resume()
        self._resumed_at = (time.monotonic(), self.clock.now())
        try:
            while not self._stop.is_set() and self._advance():
                if self._simulated:
                    self._pace()
        except Exception as exc:   # shown in the panel; the kernel and the views live on
            self._fail(exc)
        finally:
            self.clock.pause()
            self._after_run()

    def _advance(self) -> bool:
        """One unit of run-thread work: a step, or a wait for the next arrival. False when done."""
        with self._lock:
            if self._step_or_skip(jump=self._simulated):
                return True
            wait_s = self._next_arrival_in()
        if wait_s is None:
            return False
        self._stop.wait(min(wait_s, MAX_IDLE_WAIT_S))
        return True

    def _pace(self) -> None:
        """Keep virtual time from running ahead of the wall clock since Run started."""
        wall0, run0 = self._resumed_at
        ahead = (self.clock.now() - run0) - (time.monotonic() - wall0)
        if ahead > 0:
            self._stop.wait(ahead)

    def _fail(self, exc: Exception) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        self.state = DriverState.FAILED
        self._on_update()

    def _after_run(self) -> None:
        if self._closing:
            with self._lock:
                self._abort_all()
            self.state = DriverState.STOPPED
        elif self.error is not None:
            self.state = DriverState.FAILED
        else:
            self.state = DriverState.FINISHED if self._done() else DriverState.PAUSED
        self._on_update()

    # ------------------------------------------------------------------ engine work (lock held)

    def _step_or_skip(self, jump: bool) -> bool:
        """Add due arrivals and step; if the engine is idle and ``jump``, skip to the next arrival."""
        self._admit_due()
        if not self.engine.has_unfinished_requests() and jump and self._next < len(self.arrivals):
            self.clock.skip_to(self.arrivals[self._next].arrival_s)
            self._admit_due()
        if not self.engine.has_unfinished_requests():
            return False
        for out in self.engine.step():
            if out.finished:
                self.finished_ids.add(out.request_id)
        self.num_steps += 1
        self._on_update()
        return True

    def _admit_due(self) -> None:
        now = self.clock.now()
        while self._next < len(self.arrivals) and self.arrivals[self._next].arrival_s <= now:
            a = self.arrivals[self._next]
            self.engine.add_request(a.prompt, a.params, request_id=a.request_id,
                                    arrival_time=self.clock.engine_time(a.arrival_s), chat=a.chat)
            self._next += 1

    def _next_arrival_in(self) -> float | None:
        if self._next >= len(self.arrivals):
            return None
        return max(0.0, self.arrivals[self._next].arrival_s - self.clock.now())

    def _done(self) -> bool:
        return self._next >= len(self.arrivals) and not self.engine.has_unfinished_requests()

    def _abort_all(self) -> None:
        ended = self.finished_ids | self.aborted_ids
        for a in self.arrivals[:self._next]:
            if a.request_id not in ended:
                self.engine.abort(a.request_id)
                self.aborted_ids.add(a.request_id)
