"""Misreading 3: "continuous batching is free". The scheduler decides every step, on the CPU.

``scheduler_overhead`` fills a simulated engine with ``n`` running requests and times steady decode
steps: the engine reports the scheduler's CPU time per step (``StepStats.host_s``: scheduling
plus applying the step's results) and the simulated accelerator time (``model_s``); ``other_s`` is the
rest of the step's wall time on this CPU (the simulated runner's host work, stats and events). Of
``other_s``, ``runner_s`` is the simulated runner's own work (a stand-in for the model, not engine
work), so ``engine_host_s`` = scheduling + sampling + bookkeeping + stats + events: the engine's whole
host path per step, the figure vLLM's V1 rewrite went after.

While the CPU schedules, a synchronous engine's accelerator waits, so the accelerator is busy
``model / (host + model)`` of the time. Once host time per step exceeds the accelerator's step time
the scheduler, not the accelerator, sets the pace. Both grow with the number of running requests n:
the host line ``host(n) = a + b·n`` is fitted to the measured rows with ``a >= 0`` (a negative
intercept is no host time at all, so the line is then refitted through the origin) and drawn as a
guide. The crossover the lab reports is read from the measured rows (``measured_crossover``): the
first measured n where the host path is not shorter than the simulator's own decode step at the same
n and context, interpolated from the point below it, or "not reached within the measured range". A
fitted line can disagree with the points (one expensive point, e.g. 4,096 requests whose per-request
cost is several times the others', drags a through-origin fit), and a sentence beside a table follows
the table.

The remedies are ``EngineConfig`` switches measured one at a time (``remedies``): batched sampling,
the persistent batch (input preparation from columns kept across steps) and async scheduling (the
accelerator's step overlaps the host's; the step is about max(host, model) instead of the sum). Each
rung reports the accelerator's busy share and the decode throughput from the simulator's virtual clock,
which every piece of host work advances (``labkit.sim.simulator.SimEngine.step``).

``config_overrides`` go into ``EngineConfig``: the on/off comparison of an engine optimisation is one
more call with its switch flipped.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field, replace

from labkit import host_clock
from labkit.config import EngineConfig
from labkit.metrics import percentile
from labkit.sampling_params import SamplingParams
from labkit.sim.cost import HARDWARE, MODELS, step_time

PROMPT_LEN = 8


@dataclass(frozen=True)
class OverheadRow:
    num_running: int
    scheduler_s: float      # host time outside the forward pass (StepStats.host_s), measured
    model_s: float          # simulated accelerator time of the same step
    other_s: float          # rest of the step's wall time on this CPU
    simulated: bool = True
    schedule_s: float = 0.0     # of scheduler_s: deciding (scheduler.schedule())
    sample_s: float = 0.0       # of scheduler_s: sampling; the rest is applying results and bookkeeping
    runner_s: float = 0.0       # of other_s: the simulated runner's own CPU work (the model's stand-in)
    engine_host_median_s: float | None = None   # median engine_host_s over the timed steps
    gc_s: float = 0.0           # Python's garbage collector, mean seconds per timed step (the medians carry it)
    prepare_s: float = 0.0      # of engine_host_s: building the forward's inputs (list path or persistent batch)
    engine_host_mean_s: float | None = None     # mean engine_host_s over the timed steps (collections included)
    step_s: float | None = None  # median step on the simulator's virtual clock (sync: host + model)
    wait_s: float = 0.0         # async: of step_s, the host waiting for the accelerator (median)
    step_mean_s: float | None = None   # mean step on the virtual clock (the statistic of engine_host_mean_s)

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
        return self.other_s - self.runner_s - self.prepare_s

    @property
    def busy_share(self) -> float | None:
        """Share of the (virtual) step the accelerator computes."""
        return None if not self.step_s else min(1.0, self.model_s / self.step_s)

    @property
    def tokens_per_s(self) -> float | None:
        """Decode throughput: one token per running request per step."""
        return None if not self.step_s else self.num_running / self.step_s

    def scheduler_share(self, accelerator_s: float | None = None) -> float:
        """Share of a synchronous step the scheduler takes, against ``accelerator_s`` (default: the sim's)."""
        acc = self.model_s if accelerator_s is None else accelerator_s
        return self.scheduler_s / (self.scheduler_s + acc)


# Model profiles on one accelerator where each side wins (labkit.sim.cost.MODELS / HARDWARE).
PROFILES = {"SmolLM2-135M / H100": ("smollm2-135m", "h100-sxm"), "Llama-3-8B / H100": ("llama-3-8b", "h100-sxm")}


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
                     warmup: int = 2, model_profile: str = "llama-3-8b", hardware: str = "h100-sxm") -> OverheadRow:
    """Per-step split at ``num_running`` requests in steady decode: the step with the least engine host
    time of ``steps`` (on a shared machine other programs only ever add time; its parts add up), the
    median and mean engine host time beside it, the simulated model time and the median virtual step."""
    engine = overhead_engine(num_running, config_overrides, model_profile, hardware).engine
    params = SamplingParams(max_tokens=warmup + steps + 2, ignore_eos=True)
    for i in range(num_running):
        engine.add_request([97 + i % 26] * PROMPT_LEN, params)
    for _ in range(1 + warmup):                 # the prefill step, then warm-up decodes
        engine.step()
    rows, virtual = [], []
    with GCTimer() as gc_time:
        for _ in range(steps):
            v0, t0 = engine.clock(), host_clock.now()
            engine.step()
            wall = host_clock.now() - t0
            virtual.append(engine.clock() - v0)
            last, runner = engine.metrics.last, engine.runner
            prepare_s = getattr(runner, "last_prepare_s", 0.0)
            stand_in_s = getattr(runner, "last_host_s", 0.0) - prepare_s
            rows.append(OverheadRow(num_running, last.host_s, last.model_s, max(0.0, wall - last.host_s),
                                    schedule_s=last.schedule_s, sample_s=last.sample_s, runner_s=stand_in_s,
                                    prepare_s=prepare_s, wait_s=max(0.0, last.step_s - last.host_s)))
    fastest = min(rows, key=lambda r: r.engine_host_s)
    hosts = [r.engine_host_s for r in rows]
    return replace(fastest, model_s=percentile([r.model_s for r in rows], 50),
                   engine_host_median_s=percentile(hosts, 50), engine_host_mean_s=sum(hosts) / len(hosts),
                   gc_s=gc_time.seconds / steps, step_s=percentile(virtual, 50), step_mean_s=sum(virtual) / len(virtual),
                   wait_s=percentile([r.wait_s for r in rows], 50))


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
                       steps: int = 5, model_profile: str = "llama-3-8b", hardware: str = "h100-sxm") -> list[OverheadRow]:
    return [measure_overhead(n, config_overrides, steps, model_profile=model_profile, hardware=hardware)
            for n in num_running_list]


def fit_linear(rows: list[OverheadRow], host: bool = False, value=None) -> tuple[float, float]:
    """(a, b) of seconds per step = a + b·n with a >= 0: least squares, refitted through the origin when
    the free intercept comes out negative. ``value`` picks the seconds (default: scheduler time, or the
    whole host time with ``host=True``)."""
    pick = value or (lambda r: r.host_s if host else r.scheduler_s)
    xs, ys = [r.num_running for r in rows], [pick(r) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    a = my - b * mx
    if a < 0:
        a, b = 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return a, b


def model_step_s(num_running: int, model_profile: str, hardware: str, context_len: int) -> float:
    """The simulator's decode step for ``num_running`` sequences of ``context_len`` tokens."""
    n = max(1, round(num_running))
    return step_time(MODELS[model_profile], HARDWARE[hardware], [1] * n, [context_len] * n)


@dataclass(frozen=True)
class MeasuredCrossover:
    """Where the measured host path first reaches the accelerator step, read from the measured rows
    themselves (never from a fitted line): ``n`` interpolated linearly between the last measured
    concurrency where the host was shorter (``below``) and the first where it was not (``above``).
    ``n`` is None when the host stays shorter at every measured point (``below`` is then the highest
    one measured); ``below`` is None when the host is already longer at the first point."""

    n: float | None
    below: int | None
    above: int | None

    @property
    def reached(self) -> bool:
        return self.n is not None


def measured_crossover(rows: list[OverheadRow], model_profile: str, hardware: str, context_len: int,
                       value=None) -> MeasuredCrossover:
    """The crossover from the rows a table prints (default value: the engine's whole host path),
    by the same estimator: host minus step at each measured n, and the first sign change."""
    pick = value or (lambda r: r.engine_host_s)
    points = sorted((r.num_running, pick(r) - model_step_s(r.num_running, model_profile, hardware, context_len))
                    for r in rows)
    if not points:
        raise ValueError("no measured rows")
    if points[0][1] >= 0:
        return MeasuredCrossover(float(points[0][0]), None, points[0][0])
    for (n0, g0), (n1, g1) in zip(points, points[1:]):
        if g1 >= 0:
            return MeasuredCrossover(n0 + (n1 - n0) * (-g0) / (g1 - g0), n0, n1)
    return MeasuredCrossover(None, points[-1][0], None)


def fit_deviation(rows: list[OverheadRow], line: tuple[float, float], value=None) -> tuple[int, float]:
    """The measured point furthest from ``line`` (``fit_linear``'s ``(a, b)``): (its n, fitted / measured − 1)."""
    pick = value or (lambda r: r.engine_host_s)
    a, b = line
    worst = max(rows, key=lambda r: abs((a + b * r.num_running) / pick(r) - 1) if pick(r) > 0 else 0.0)
    return worst.num_running, (a + b * worst.num_running) / pick(worst) - 1 if pick(worst) > 0 else 0.0


def saturation_concurrency(rows: list[OverheadRow], accelerator_s, host: bool = False) -> float | None:
    """Running requests at which scheduler time per step reaches the accelerator's step: ``accelerator_s``
    seconds, or a function of the concurrency (e.g. ``partial(model_step_s, ...)``). None if it never does."""
    a, b = fit_linear(rows, host)
    step = accelerator_s if callable(accelerator_s) else (lambda n: accelerator_s)
    if b <= 0 and a < step(1):
        return None
    n = 0.0
    for _ in range(60):                  # fixed point of n = (step(n) - a) / b; step(n) grows slowly in n
        nxt = max(0.0, (step(max(n, 1)) - a) / b) if b > 0 else 0.0
        if abs(nxt - n) < 0.5:
            return nxt
        n = nxt
    return n


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


# ------------------------------------------------------------------------------ the host line, measured

@dataclass(frozen=True)
class HostSweep:
    """The engine's host path per step at each concurrency (the same engine work whatever the profile;
    only the accelerator's step differs), measured in ``rounds`` interleaved rounds."""

    rows: list[OverheadRow]             # per concurrency: the round with the least engine host time
    rounds: list[list[OverheadRow]]     # every round, per concurrency
    load: float | None                  # the highest load average seen while measuring
    context_len: int                    # tokens per sequence during the timed steps (for the sim's step)

    def host_ms_spread(self, index: int = -1) -> tuple[float, float]:
        """The engine's host path per step (ms) at concurrency ``index``: lowest and highest over the rounds."""
        values = [1000 * r[index].engine_host_s for r in self.rounds]
        return min(values), max(values)


def host_sweep(sizes: list[int], rounds: int = 2, steps: int = 5, warmup: int = 2,
               config_overrides: dict | None = None) -> HostSweep:
    from labkit.labs.common.measure import machine_load

    load = machine_load()
    per_round: list[list[OverheadRow]] = []
    for _ in range(rounds):
        per_round.append([measure_overhead(n, config_overrides, steps, warmup) for n in sizes])
        now = machine_load()
        load = now if load is None else max(load, now or 0.0)
    best = [min((r[i] for r in per_round), key=lambda row: row.engine_host_s) for i in range(len(sizes))]
    return HostSweep(best, per_round, load, PROMPT_LEN + warmup + 1 + steps // 2)


# ------------------------------------------------------------------------------ the remedies, one at a time

# Each rung adds one switch to the one above (EngineConfig fields; same tokens on every rung).
RUNGS: tuple[tuple[str, dict], ...] = (
    ("per-request sampling", {"batched_sampling": False}),
    ("+ batched sampling", {}),
    ("+ persistent batch", {"persistent_batch": True}),
    ("+ async scheduling", {"persistent_batch": True, "async_scheduling": True}),
)


@dataclass(frozen=True)
class RemedyRun:
    """The rungs at one concurrency and profile: per rung its best round (least engine host time) and
    every round's virtual step, measured interleaved (rung 1, 2, 3, 4, then again)."""

    profile: str
    num_running: int
    rows: dict[str, OverheadRow]
    steps: dict[str, list[float]]        # per rung: each round's median virtual step (seconds)
    load: float | None
    host_means: dict[str, list[float]] = field(default_factory=dict)   # per rung: each round's mean engine host s
    step_means: dict[str, list[float]] = field(default_factory=dict)   # per rung: each round's mean virtual step s

    def step_ratio(self, rung: str, base: str = RUNGS[0][0]) -> list[float]:
        """Per round: this rung's virtual step over the base rung's (below 1: a shorter step)."""
        return [a / b for a, b in zip(self.steps[rung], self.steps[base])]


def remedies(num_running: int, profile: str, steps: int = 6, rounds: int = 2,
             rungs: tuple[tuple[str, dict], ...] = RUNGS) -> RemedyRun:
    """Every rung at ``num_running`` on ``profile`` (a key of ``PROFILES``), interleaved."""
    from labkit.labs.common.measure import machine_load

    model_profile, hardware = PROFILES[profile]
    tries: dict[str, list[OverheadRow]] = {name: [] for name, _ in rungs}
    load = machine_load()
    for _ in range(rounds):
        for name, overrides in rungs:
            tries[name].append(measure_overhead(num_running, overrides, steps, model_profile=model_profile,
                                                hardware=hardware))
        now = machine_load()
        load = now if load is None else max(load, now or 0.0)
    best = {name: min(rows, key=lambda r: r.engine_host_s) for name, rows in tries.items()}
    return RemedyRun(profile, num_running, best, {name: [r.step_s for r in rows] for name, rows in tries.items()},
                     load, {name: [r.engine_host_mean_s for r in rows] for name, rows in tries.items()},
                     {name: [r.step_mean_s for r in rows] for name, rows in tries.items()})


# ------------------------------------------------------------------------------ the real model

@dataclass(frozen=True)
class RealAsync:
    """Sync vs async scheduling on the real CPU model: throughput (wall clock: the point is that two
    threads overlap) and whether the greedy tokens were identical."""

    batch: int
    max_tokens: int
    comparison: object          # labkit.labs.common.measure.Comparison, quantity="speed", async vs sync
    identical: bool
    threads: int = 1            # torch intra-op threads of the forward (the host thread comes on top)


def real_model_async(batch: int = 16, max_tokens: int = 24, rounds: int = 3, model=None,
                     threads: int | None = None) -> RealAsync:
    """Both engines built once, then ``generate`` of one batch alternately (warm-up dropped). The clock is
    the wall clock: async scheduling runs the forward on a second thread, so CPU time (which adds both
    threads up) would hide exactly the overlap being measured. ``threads``: torch's intra-op threads
    (default: the labs' ``measure_threads()``); with async the scheduler's thread runs beside them."""
    import torch

    from labkit import LLM
    from labkit.labs.common.measure import compare, measuring, wall_clock

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    prompts = [f"Request {i}: write one sentence about the number {i}." for i in range(batch)]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    wall = wall_clock("time.perf_counter（墙钟 wall clock：前向线程和主机线程重叠 / the two threads overlap）")
    with measuring():
        if threads is not None:
            torch.set_num_threads(threads)            # measuring() restores the count afterwards
        threads = torch.get_num_threads()
        llms = {flag: LLM(model, config=EngineConfig(max_num_seqs=batch, async_scheduling=flag), progress=False)
                for flag in (False, True)}

        def arm(flag: bool):
            return lambda: [o.token_ids for o in llms[flag].generate(prompts, params)]
        c = compare({"sync": arm(False), "async": arm(True)}, baseline="sync", rounds=rounds, warmup=1, clock=wall,
                    quantity="speed", work=lambda name, out: batch * max_tokens, id="lab03_async_real",
                    claim=("异步调度的吞吐（真实模型）", "async scheduling throughput (real model)"))
    return RealAsync(batch, max_tokens, c, c.results["sync"] == c.results["async"], threads)
