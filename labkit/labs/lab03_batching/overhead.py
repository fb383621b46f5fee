"""Misreading 3: "continuous batching is free". The scheduler decides every step, on the CPU.

``scheduler_overhead`` fills a simulated engine with ``n`` running requests and times steady decode
steps: the engine reports the scheduler's CPU time per step (``StepStats.scheduler_s``: scheduling
plus applying the step's results) and the simulated accelerator time (``model_s``); ``other_s`` is the
rest of the step's wall time on this CPU (the simulated runner's host work, stats and events). Of
``other_s``, ``runner_s`` is the simulated runner's own work (a stand-in for the model, not engine
work), so ``engine_host_s`` = scheduling + sampling + bookkeeping + stats + events: the engine's whole
host path per step, the figure vLLM's V1 rewrite went after.

While the CPU schedules, a synchronous engine's accelerator waits, so the accelerator is busy
``model / (host + model)`` of the time. Once host time per step exceeds the accelerator's step time
the scheduler, not the accelerator, sets the pace: that is the saturation concurrency. Host time grows
about linearly in the number of running requests, so ``host(n) = a + b·n`` is fitted and solved for
``host(n) = accelerator step``.

``config_overrides`` go into ``EngineConfig``: the on/off comparison of an engine optimisation is one
more call with its switch flipped.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace

from labkit.config import EngineConfig
from labkit.metrics import percentile
from labkit.sampling_params import SamplingParams

PROMPT_LEN = 8


@dataclass(frozen=True)
class OverheadRow:
    num_running: int
    scheduler_s: float      # host time outside the forward pass (StepStats.scheduler_s), measured
    model_s: float          # simulated accelerator time of the same step
    other_s: float          # rest of the step's wall time on this CPU
    simulated: bool = True
    schedule_s: float = 0.0     # of scheduler_s: deciding (scheduler.schedule())
    sample_s: float = 0.0       # of scheduler_s: sampling; the rest is applying results and bookkeeping
    runner_s: float = 0.0       # of other_s: the simulated runner's own CPU work (the model's stand-in)
    engine_host_median_s: float | None = None   # median engine_host_s over the timed steps
    gc_s: float = 0.0           # Python's garbage collector, mean seconds per timed step (the medians carry it)

    @property
    def host_s(self) -> float:
        return self.scheduler_s + self.other_s

    @property
    def engine_host_s(self) -> float:
        """The engine's host work per step: deciding, sampling, bookkeeping, stats and events."""
        return self.scheduler_s + self.other_s - self.runner_s

    @property
    def stats_events_s(self) -> float:
        """Of engine_host_s: what follows the scheduler's part (step stats, metrics, events, glue)."""
        return self.other_s - self.runner_s

    def scheduler_share(self, accelerator_s: float | None = None) -> float:
        """Share of a synchronous step the scheduler takes, against ``accelerator_s`` (default: the sim's)."""
        acc = self.model_s if accelerator_s is None else accelerator_s
        return self.scheduler_s / (self.scheduler_s + acc)


def overhead_engine(num_running: int, config_overrides: dict | None = None, model_profile: str = "llama-3-8b",
                    hardware: str = "h100-sxm"):
    from labkit import LLM

    base = EngineConfig(max_num_seqs=max(num_running, 1), max_model_len=256,
                        max_num_batched_tokens=max(1024, num_running * PROMPT_LEN))
    try:
        config = replace(base, **(config_overrides or {}))
    except TypeError as exc:
        raise ValueError(f"config_overrides must name EngineConfig fields: {exc}") from None
    return LLM(model="sim", config=config, model_profile=model_profile, hardware=hardware, progress=False)


def measure_overhead(num_running: int, config_overrides: dict | None = None, steps: int = 5,
                     warmup: int = 2) -> OverheadRow:
    """Per-step split at ``num_running`` requests in steady decode: the step with the least engine host
    time of ``steps`` (on a shared machine other programs only ever add time; its parts add up), the
    median engine host time beside it, and the simulated model time."""
    engine = overhead_engine(num_running, config_overrides).engine
    params = SamplingParams(max_tokens=warmup + steps + 2, ignore_eos=True)
    for i in range(num_running):
        engine.add_request([97 + i % 26] * PROMPT_LEN, params)
    for _ in range(1 + warmup):                 # the prefill step, then warm-up decodes
        engine.step()
    rows = []
    with GCTimer() as gc_time:
        for _ in range(steps):
            t0 = time.perf_counter()
            engine.step()
            wall = time.perf_counter() - t0
            last, runner_s = engine.metrics.last, getattr(engine.runner, "last_host_s", 0.0)
            rows.append(OverheadRow(num_running, last.scheduler_s, last.model_s, max(0.0, wall - last.scheduler_s),
                                    schedule_s=last.schedule_s, sample_s=last.sample_s, runner_s=runner_s))
    fastest = min(rows, key=lambda r: r.engine_host_s)
    return replace(fastest, model_s=percentile([r.model_s for r in rows], 50),
                   engine_host_median_s=percentile([r.engine_host_s for r in rows], 50), gc_s=gc_time.seconds / steps)


class GCTimer:
    """Seconds the garbage collector runs while the block is open (``gc.callbacks``). The engine's
    step garbage is freed by reference counting; what the collector costs is scanning the young
    objects each step allocates and, now and then, the whole heap (the notebook's included)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> "GCTimer":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)


def scheduler_overhead(num_running_list: list[int], config_overrides: dict | None = None,
                       steps: int = 5) -> list[OverheadRow]:
    return [measure_overhead(n, config_overrides, steps) for n in num_running_list]


def fit_linear(rows: list[OverheadRow], host: bool = False) -> tuple[float, float]:
    """Least squares (a, b) of scheduler (or whole host) seconds per step = a + b·n."""
    xs = [r.num_running for r in rows]
    ys = [r.host_s if host else r.scheduler_s for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return my - b * mx, b


def saturation_concurrency(rows: list[OverheadRow], accelerator_s: float, host: bool = False) -> float | None:
    """Running requests at which scheduler time per step reaches ``accelerator_s`` (None if it never grows)."""
    a, b = fit_linear(rows, host)
    if b <= 0:
        return None
    return max(0.0, (accelerator_s - a) / b)


# ------------------------------------------------------------------------------ the engine's optimisation switch

@dataclass(frozen=True)
class Switch:
    """An ``EngineConfig`` field that turns the engine's host-path optimisation on and off."""

    name: str
    on: object = True
    off: object = False

    def overrides(self, enabled: bool) -> dict:
        return {self.name: self.on if enabled else self.off}


# The EngineConfig field of the engine's host-path optimisation: ``batched_sampling`` samples and
# verifies the whole batch in one tensor call per kind of row (True) instead of request by request
# (False); same tokens either way. The first name that is an EngineConfig field is used.
HOST_PATH_SWITCH_NAMES: tuple[str, ...] = ("batched_sampling",)


def host_path_switch() -> Switch | None:
    """The engine's host-path optimisation switch, or None when this engine has none."""
    from dataclasses import fields

    names = {f.name for f in fields(EngineConfig)}
    for name in HOST_PATH_SWITCH_NAMES:
        if name in names:
            return Switch(name)
    return None


def before_after(num_running_list: list[int], switch: Switch | None, steps: int = 5,
                 rounds: int = 2) -> tuple[list[OverheadRow], list[OverheadRow] | None]:
    """The sweep with the switch off and on, interleaved (off, on, off, on ... at each concurrency) so a
    change in the machine's load hits both alike; per setting the round with the least scheduler time.
    Without a switch: (the engine as built, None)."""
    if switch is None:
        return scheduler_overhead(num_running_list, None, steps), None
    best: dict[bool, list[OverheadRow]] = {False: [], True: []}
    for n in num_running_list:
        tries: dict[bool, list[OverheadRow]] = {False: [], True: []}
        for _ in range(rounds):
            for enabled in (False, True):
                tries[enabled].append(measure_overhead(n, switch.overrides(enabled), steps))
        for enabled in (False, True):
            best[enabled].append(min(tries[enabled], key=lambda r: r.scheduler_s))
    return best[False], best[True]
