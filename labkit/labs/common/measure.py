"""One way to time, compare and conclude in every lab (labs/README.md, "Measuring and concluding").

A lab's lesson must survive a learner's busy laptop. Every timed comparison a lab prints goes
through :func:`compare`, and every conclusion sentence is rendered from the :class:`Verdict` it
returns, never from a bare number::

    with measuring():                        # torch on LABKIT_THREADS threads (default 1)
        c = compare({"plain": run_plain, "ngram": run_ngram}, baseline="plain", rounds=5,
                    quantity="speed", work=lambda name, out: out.tokens, id="ngram_copy",
                    claim=("n-gram 的加速比", "n-gram speed-up"), lab="04")
    print(c.verdict.sentence(greater=("n-gram 比普通解码快", "n-gram decodes faster"),
                             less=("n-gram 比普通解码慢", "n-gram decodes slower"),
                             same=("两者一样快", "both are as fast")))

How it measures:

- Arms run interleaved in rounds, the order alternating (round 0: A B, round 1: B A, ...), so a
  slow spell of the machine falls on both arms; ``warmup`` whole rounds run first and are dropped.
- The clock is the process CPU time (``time.process_time``) on a CPU: a busy neighbour's time
  slices do not count. On CUDA it is the wall clock after ``torch.cuda.synchronize()`` (the GPU's
  work is not CPU time). The clock used is recorded beside every number.
- A value is seconds per unit of work (``work`` gives the units, e.g. tokens) for
  ``quantity="time"``, or units per second for ``quantity="speed"``. The ratio is candidate over
  baseline of that quantity: from the per-arm minima (the least disturbed run), with the min–max of
  the per-round ratios (each round pairs the two arms' runs, adjacent in time).

How it concludes (``verdict_from_ratios``): with margin m,

    ============================  ===============  =========================================
    per-round ratios              direction        confidence
    ============================  ===============  =========================================
    all above 1 + m               greater          clear
    all below 1 − m               less             clear
    all within [1 − m, 1 + m]     same             clear
    anything else, or one round   from the ratio   within noise
    load > cores, or an arm's     from the ratio   machine busy (overrides the above)
    rounds spread > max_spread
    ============================  ===============  =========================================

Counted or simulated quantities are deterministic: :meth:`Verdict.exact` makes a clear verdict.

Tests inject contention through :func:`clock_override` (a :class:`ContendedClock` slows random
stretches of time 1–10×) and check that no verdict turns clear in the direction opposite to the
noiseless run.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from labkit import host_clock

DIRECTIONS = ("greater", "less", "same")
CONFIDENCES = ("clear", "within noise", "machine busy")
CONFIDENCE_LABELS = {"clear": ("明确（clear）", "clear"), "within noise": ("噪声之内（within noise）", "within noise"),
                     "machine busy": ("机器正忙（machine busy）", "machine busy")}
QUANTITIES = ("time", "speed")
DEFAULT_MARGIN = 0.05
DEFAULT_MAX_SPREAD = 1.5     # an arm whose slowest round took 1.5× its fastest was disturbed


# ----------------------------------------------------------------------------- threads and clock

def measure_threads() -> int:
    """Torch threads for measurements: ``LABKIT_THREADS`` (a positive integer), default 1."""
    raw = os.environ.get("LABKIT_THREADS", "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"LABKIT_THREADS must be a positive integer, got {raw!r}")
    return n


@contextmanager
def measuring() -> Iterator[int]:
    """Run torch on ``measure_threads()`` threads inside the block; restored afterwards (also after
    an error). Yields the thread count."""
    import torch

    before = torch.get_num_threads()
    n = measure_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Clock:
    """A clock (seconds, any origin) and the words that say which one it is."""

    name: str
    read: Callable[[], float]

    def __call__(self) -> float:
        return self.read()


_override: list[Clock] = []


def _cuda_wall() -> float:
    import torch

    torch.cuda.synchronize()
    return time.perf_counter()


def cpu_clock(device: Any = None) -> Clock:
    """The measuring clock: the injected one inside :func:`clock_override`; on CUDA the wall clock
    after synchronize; else the process CPU time."""
    if _override:
        return _override[-1]
    if getattr(device, "type", device) == "cuda":
        return Clock("wall clock after torch.cuda.synchronize()", _cuda_wall)
    return Clock("CPU time (time.process_time)", time.process_time)


def wall_clock(name: str = "wall clock (time.perf_counter)") -> Clock:
    """The wall clock, for a comparison whose point is that threads overlap (CPU time would add
    them up); inside :func:`clock_override` the injected clock, as for :func:`cpu_clock`, so noise
    tests reach these measurements too."""
    if _override:
        return _override[-1]
    return Clock(name, time.perf_counter)


def as_clock(clock: Clock | Callable[[], float] | None, device: Any = None) -> Clock:
    if clock is None:
        return cpu_clock(device)
    if isinstance(clock, Clock):
        return clock
    if not callable(clock):
        raise TypeError(f"clock must be a Clock or a callable returning seconds, got {clock!r}")
    return Clock(getattr(clock, "name", None) or getattr(clock, "__name__", "injected clock"), clock)


@contextmanager
def clock_override(clock: Clock | Callable[[], float]) -> Iterator[Clock]:
    """Every ``cpu_clock()`` and ``wall_clock()`` (so every lab measurement) and the engine's host-path
    timers (``labkit.host_clock``) inside the block read ``clock``: the hook tests use to inject
    contention into the labs' own code paths."""
    c = as_clock(clock)
    _override.append(c)
    host_clock.use(c.read)
    try:
        yield c
    finally:
        _override.remove(c)
        host_clock.use(_override[-1].read if _override else None)


class ContendedClock:
    """A clock slowed by contention: time passes ``factor`` times faster than on ``base`` during
    random stretches ("episodes"), as when other programs share the cores. Each episode lasts
    ``episode`` seconds of base time (uniform between the two bounds); with probability ``p`` it is
    slowed by a factor drawn uniformly from ``slow``, else it runs at 1×."""

    def __init__(self, base: Callable[[], float], seed: int, *, p: float = 0.5,
                 slow: tuple[float, float] = (1.0, 10.0), episode: tuple[float, float] = (0.01, 0.1)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p!r}")
        if not 1.0 <= slow[0] <= slow[1]:
            raise ValueError(f"slow must be (low, high) with 1 <= low <= high, got {slow!r}")
        if not 0.0 < episode[0] <= episode[1]:
            raise ValueError(f"episode must be (low, high) seconds with 0 < low <= high, got {episode!r}")
        self.base, self.p, self.slow, self.episode = base, p, slow, episode
        self.rng = random.Random(seed)
        self.name = f"contended clock (seed {seed}, p={p}, {slow[0]:g}–{slow[1]:g}×)"
        self._last = base()
        self._reading = 0.0
        self._new_episode(self._last)

    def _new_episode(self, start: float) -> None:
        self._end = start + self.rng.uniform(*self.episode)
        self._factor = self.rng.uniform(*self.slow) if self.rng.random() < self.p else 1.0

    def __call__(self) -> float:
        now = self.base()
        while self._end < now:
            self._reading += (self._end - self._last) * self._factor
            self._last = self._end
            self._new_episode(self._end)
        self._reading += (now - self._last) * self._factor
        self._last = now
        return self._reading


# ----------------------------------------------------------------------------- machine

def machine_load() -> float | None:
    """How many programs want the CPU: the larger of the 1-minute load average and (on Linux) the
    tasks runnable right now (``/proc/loadavg``, this one included). The average lags a minute
    behind a program that just started; the instant count does not. None where the OS has neither."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        average = None
    runnable = _runnable_now()
    known = [x for x in (average, runnable) if x is not None]
    return max(known) if known else None


def _runnable_now(samples: int = 5, gap_s: float = 0.01) -> float | None:
    """The median of a few instant counts of runnable tasks: a single sample catches passing blips."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                counts.append(float(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    return statistics.median(counts)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def describe_machine() -> str:
    from labkit.model.cpu_features import describe_cpu

    try:
        return describe_cpu()
    except Exception:           # an unreadable /proc must not stop a measurement
        return "unknown CPU"


# ----------------------------------------------------------------------------- verdicts

@dataclass(frozen=True)
class Verdict:
    """What a comparison shows and how sure it is. ``ratio`` is candidate over baseline of the
    compared quantity (for ``quantity="speed"``: a speed-up); ``ratio_min``/``ratio_max`` its range
    over rounds. ``reasons`` says why the confidence is not clear."""

    direction: str
    confidence: str
    ratio: float
    ratio_min: float
    ratio_max: float
    margin: float
    id: str = ""
    claim: tuple[str, str] = ("", "")
    quantity: str = "time"
    clock: str = ""
    rounds: int = 0
    load_before: float | None = None
    load_after: float | None = None
    cores: int = 1
    cpu: str = ""
    spread: float | None = None         # the largest slowest/fastest round of an arm
    reasons: tuple[str, ...] = ()
    deterministic: bool = False

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

    @property
    def clear(self) -> bool:
        return self.confidence == "clear"

    @property
    def busy(self) -> bool:
        return self.confidence == "machine busy"

    @classmethod
    def exact_ratio(cls, value: float, reference: float, *, margin: float = 0.0, **info) -> "Verdict":
        return cls.exact(value / reference if reference else math.inf, margin=margin, **info)

    @classmethod
    def exact(cls, ratio: float, *, margin: float = 0.0, clock: str = "exact (counted or simulated)",
              **info) -> "Verdict":
        """A deterministic quantity (counted tokens, a simulation): the same on every run and
        every machine, so its verdict is clear; the direction compares ``ratio`` with 1 ± margin."""
        return cls(_direction(ratio, margin), "clear", ratio, ratio, ratio, margin, clock=clock,
                   rounds=1, deterministic=True, **info)

    # -- sentences

    def sentence(self, *, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str],
                 unit: str = "×", digits: int = 2, warn: bool = True) -> str:
        """The conclusion in the current language. Each template is a (zh, en) clause stating the
        finding as if it were certain; it may use ``{ratio}``, ``{lo}``, ``{hi}`` (formatted
        numbers). The confidence decides the hedge around it. ``warn=False``: a busy machine gets
        a short hedge only, the section printing ``busy_warning`` once for all its sentences."""
        return render(self, greater=greater, less=less, same=same, unit=unit, digits=digits, warn=warn)

    @property
    def confidence_label(self) -> str:
        """The confidence in the reader's language, Chinese with the English term (a table cell)."""
        from labkit.i18n import t

        return t(*CONFIDENCE_LABELS[self.confidence])

    def mark(self, *, greater: tuple[str, str] = ("", ""), less: tuple[str, str] = ("", ""),
             same: tuple[str, str] = ("", "")) -> str:
        """A short table mark: the direction's (zh, en) word when clear, else the hedge."""
        from labkit.i18n import t

        if self.confidence == "within noise":
            return t("（噪声之内）", " (within noise)")
        if self.confidence == "machine busy":
            return t("（机器正忙）", " (machine busy)")
        return t(*{"greater": greater, "less": less, "same": same}[self.direction])

    def as_entry(self) -> dict[str, Any]:
        entry = asdict(self)
        entry["claim"] = {"zh": self.claim[0], "en": self.claim[1]}
        entry["load"] = {"before": self.load_before, "after": self.load_after, "cores": self.cores}
        return entry

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Verdict:
        """The verdict again from its saved JSON: ``as_entry``'s (a results summary, extra keys such as
        ``load`` ignored) or a plain ``asdict`` (a section record). JSON has no tuples (the claim may be a
        {zh, en} object) and no infinity (an undefined ratio was saved as null)."""
        names = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in entry.items() if k in names}
        for key in ("ratio", "ratio_min", "ratio_max"):
            if key in kw and kw[key] is None:
                kw[key] = math.inf
        claim = kw.get("claim")
        if isinstance(claim, Mapping):
            kw["claim"] = (claim.get("zh", ""), claim.get("en", ""))
        elif claim is not None:
            kw["claim"] = tuple(claim)
        if "reasons" in kw:
            kw["reasons"] = tuple(kw["reasons"] or ())
        return cls(**kw)


def _direction(ratio: float, margin: float) -> str:
    if ratio > 1 + margin:
        return "greater"
    if ratio < 1 - margin:
        return "less"
    return "same"


def verdict_from_ratios(ratios: list[float], *, margin: float = DEFAULT_MARGIN, ratio: float | None = None,
                        load: float | None = None, cores: int = 1, spread: float | None = None,
                        max_spread: float = DEFAULT_MAX_SPREAD, **info) -> Verdict:
    """The verdict from per-round ratios (the table in the module docstring). ``ratio`` is the
    headline ratio (default: the median round); ``load`` the highest load seen while measuring;
    ``spread`` the largest max/min of an arm's rounds."""
    ratios = [float(r) for r in ratios]
    if not ratios or any(not math.isfinite(r) or r < 0 for r in ratios):
        raise ValueError(f"ratios must be a non-empty list of finite non-negative numbers, got {ratios!r}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    central = statistics.median(ratios) if ratio is None else float(ratio)
    # The range a sentence prints holds the headline too: a headline built across rounds (each arm's
    # best round) can fall outside the paired rounds, and "1.6x, rounds 1.3-1.5x" reads as a contradiction.
    lo, hi = min(min(ratios), central), max(max(ratios), central)
    reasons: list[str] = []
    if lo > 1 + margin and central > 1 + margin:
        direction, confidence = "greater", "clear"
    elif hi < 1 - margin and central < 1 - margin:
        direction, confidence = "less", "clear"
    elif lo >= 1 - margin and hi <= 1 + margin:
        direction, confidence = "same", "clear"
    else:
        direction, confidence = _direction(central, margin), "within noise"
        reasons.append(f"round ratios {lo:.3g}–{hi:.3g} do not all lie on one side of 1 ± {margin:g}")
    if len(ratios) < 2 and confidence == "clear":
        confidence = "within noise"       # one round has no spread: nothing says how large the noise is
        reasons.append("one round only: no spread to judge the noise by")
    if load is not None and load > cores:
        confidence = "machine busy"
        reasons.append(f"load {load:.1f} above {cores} cores")
    if spread is not None and spread > max_spread:
        confidence = "machine busy"
        reasons.append(f"an arm's rounds spread {spread:.2f}× (more than {max_spread:g}×): disturbed")
    if load is not None and info.get("load_after") is None:
        info["load_after"] = load
    return Verdict(direction, confidence, central, lo, hi, margin, cores=cores, reasons=tuple(reasons),
                   rounds=len(ratios), spread=spread, **info)


def _fmt(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if math.isfinite(x) else "∞"


def render(verdict: Verdict, *, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str],
           unit: str = "×", digits: int = 2, warn: bool = True) -> str:
    """A conclusion sentence from ``verdict`` (see ``Verdict.sentence``)."""
    from labkit.i18n import t

    nums = {"ratio": _fmt(verdict.ratio, digits) + unit, "lo": _fmt(verdict.ratio_min, digits) + unit,
            "hi": _fmt(verdict.ratio_max, digits) + unit}
    zh, en = {"greater": greater, "less": less, "same": same}[verdict.direction]
    clause = t(zh, en).format(**nums)
    if verdict.deterministic:
        return clause + t("。", ".")
    span = nums["lo"] if nums["lo"] == nums["hi"] else f"{nums['lo']}–{nums['hi']}"
    where = t(f"{nums['ratio']}，{verdict.rounds} 轮在 {span}", f"{nums['ratio']}; {verdict.rounds} rounds {span}")
    if verdict.clock:
        where += t(f"，{_clock_zh(verdict.clock)}", f"; {verdict.clock}")
    lower = clause[:1].lower() + clause[1:]
    if verdict.confidence == "clear":     # the clause states the ratio; add the rounds and the clock
        rounds = t(f"{verdict.rounds} 轮在 {span}", f"{verdict.rounds} rounds {span}")
        clock = t(f"，{_clock_zh(verdict.clock)}", f"; {verdict.clock}") if verdict.clock else ""
        return clause + t(f"（{rounds}{clock}）。", f" ({rounds}{clock}).")
    if verdict.confidence == "within noise" and verdict.rounds < 2:
        return t(f"只测了一轮（{where}），看不出噪声有多大：看起来{clause}，但这一轮不足以下结论；"
                 "多测几轮（重跑这一格）才能确定。",
                 f"Only one round ({where}), so the noise is unknown: it suggests that {lower}, but one round "
                 "is not enough to conclude; measure more rounds (rerun this cell) to be sure.")
    if verdict.confidence == "within noise":
        return t(f"测得 {where}：差别在噪声之内，这次测量不能说明「{clause}」。",
                 f"Measured {where}: the difference is within noise; this measurement does not show "
                 f"that {lower}.")
    if not warn:
        return t(f"测得 {where}，看起来{clause}（机器正忙，不可靠）。",
                 f"Measured {where}, which suggests that {lower} (machine busy: not reliable).")
    loads = [x for x in (verdict.load_before, verdict.load_after) if x is not None]
    if loads and max(loads) > verdict.cores:
        load_zh = f"负载 {max(loads):.1f}，{verdict.cores} 个核"
        load_en = f"load {max(loads):.1f} on {verdict.cores} cores"
    else:
        spread = verdict.spread or math.nan
        load_zh = f"同一件事各轮用时相差到 {spread:.1f} 倍"
        load_en = f"the same work took up to {spread:.1f}× longer in one round than in another"
    return t(f"测得 {where}，看起来{clause}；但测量时机器正忙（{load_zh}），这个结论不可靠。"
             "关掉别的程序，或在第一个单元格之前设置 LABKIT_FAST=1，然后再运行这个单元格。",
             f"Measured {where}, which suggests that {lower}; but the machine was "
             f"busy while measuring ({load_en}), so this is not reliable. Close other programs, or set "
             "LABKIT_FAST=1 before the first cell, then run this cell again.")


def busy_warning(verdicts) -> str:
    """One warning for a section whose sentences were rendered with ``warn=False``: "" when none of
    ``verdicts`` was measured on a busy machine."""
    from labkit.i18n import t

    busy = [v for v in verdicts if v is not None and v.busy]
    if not busy:
        return ""
    return t(f"本节 {len(busy)} 个结论测量时机器正忙（负载高于核数，或同一件事各轮用时相差太大），上面标着“不可靠”或“机器正忙”的结论和表格行不要当真。"
             "关掉别的程序，或在第一个单元格之前设置 LABKIT_FAST=1，然后重跑本节。",
             f"{len(busy)} conclusion(s) in this section were measured while the machine was busy (load above the cores, "
             "or rounds of the same work far apart); do not trust the conclusions and table rows marked 'not reliable' or 'machine busy'. Close other programs, "
             "or set LABKIT_FAST=1 before the first cell, then rerun this section.")


def _clock_zh(clock: str) -> str:
    if clock.startswith("CPU time"):
        return "CPU 时间"
    if clock.startswith("wall clock after torch.cuda"):
        return "墙钟时间（同步 GPU 后）"
    if clock.startswith("wall clock"):
        return "墙钟时间（客户端计时）" if "client" in clock else "墙钟时间"
    return clock


# ----------------------------------------------------------------------------- comparisons

@dataclass(frozen=True)
class Sample:
    """What an arm may return instead of a plain result: the seconds it measured itself (with
    ``cpu_clock()``, e.g. decode steps only, without the prefill), the units of work and the result."""

    seconds: float
    units: float = 1.0
    result: Any = None


@dataclass(frozen=True)
class ArmValues:
    """One arm's values over the kept rounds (``quantity``: seconds per unit, or units per second)."""

    name: str
    values: tuple[float, ...]
    seconds: tuple[float, ...]
    units: tuple[float, ...]

    @property
    def best(self) -> float:
        """The least disturbed round: the fastest (min time or max speed)."""
        return self._best

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """Slowest round's time per unit over the fastest's (1.0 = every round alike)."""
        per_unit = [s / u for s, u in zip(self.seconds, self.units) if u]
        if not per_unit or min(per_unit) <= 0:
            return 1.0
        return max(per_unit) / min(per_unit)

    _best: float = field(default=math.nan, repr=False)


@dataclass(frozen=True)
class Comparison:
    """Arms measured in interleaved rounds, and one verdict per candidate against the baseline."""

    arms: Mapping[str, ArmValues]
    baseline: str
    verdicts: Mapping[str, Verdict]
    order: tuple[tuple[str, ...], ...]        # the order arms ran in, per round (warm-up included)
    results: Mapping[str, Any]                # each arm's last result
    quantity: str
    clock: str
    load_before: float | None
    load_after: float | None
    cores: int
    cpu: str

    @property
    def loads(self) -> str:
        """The load averages before and after, as a caption prints them: "1.2 → 3.4" (? if unknown)."""
        return " → ".join("?" if x is None else f"{x:.1f}" for x in (self.load_before, self.load_after))

    @property
    def verdict(self) -> Verdict:
        if len(self.verdicts) != 1:
            raise ValueError(f"this comparison has {len(self.verdicts)} candidates; use verdicts[name]")
        return next(iter(self.verdicts.values()))

    @property
    def ratio(self) -> float:
        return self.verdict.ratio

    @property
    def ratio_min(self) -> float:
        return self.verdict.ratio_min

    @property
    def ratio_max(self) -> float:
        return self.verdict.ratio_max

    def as_entry(self, candidate: str | None = None) -> dict[str, Any]:
        v = self.verdicts[candidate] if candidate else self.verdict
        name = candidate or next(iter(self.verdicts))
        entry = v.as_entry()
        entry["arms"] = {n: {"values": list(a.values), "best": a.best, "median": a.median,
                             "seconds": list(a.seconds), "units": list(a.units)}
                         for n, a in self.arms.items() if n in (name, self.baseline)}
        entry["baseline"], entry["candidate"] = self.baseline, name
        return entry


def _run_arm(fn: Callable[[], Any], clock: Clock) -> tuple[float, float | None, Any]:
    t0 = clock()
    out = fn()
    elapsed = clock() - t0
    if isinstance(out, Sample):
        return out.seconds, out.units, out.result
    return elapsed, None, out


def compare(arms: Mapping[str, Callable[[], Any]], *, baseline: str, rounds: int, warmup: int = 1,
            clock: Clock | Callable[[], float] | None = None, quantity: str = "time",
            work: Callable[[str, Any], float] | None = None, margin: float = DEFAULT_MARGIN,
            max_spread: float = DEFAULT_MAX_SPREAD, id: str = "", claim: tuple[str, str] = ("", ""),
            lab: str | None = None, progress: bool = False, device: Any = None,
            load: Callable[[], float | None] = machine_load) -> Comparison:
    """Measure ``arms`` (name → zero-argument callable doing one unit of the compared work) in
    ``rounds`` interleaved rounds after ``warmup`` dropped ones; a verdict for every arm but
    ``baseline``. Time comes from the clock around the call, or from a returned :class:`Sample`;
    units of work from ``work(name, result)`` or the Sample (default 1). With ``lab`` set, every
    verdict is recorded in that lab's results summary (``record_verdict``)."""
    if baseline not in arms:
        raise ValueError(f"baseline must name one of the arms {list(arms)}, got {baseline!r}")
    if len(arms) < 2:
        raise ValueError(f"arms must hold a baseline and at least one candidate, got {list(arms)}")
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"rounds must be an integer >= 2 (a spread needs two rounds), got {rounds!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {QUANTITIES}, got {quantity!r}")
    clk = as_clock(clock, device)
    names = list(arms)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    units: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, Any] = {}
    order: list[tuple[str, ...]] = []
    bar = _bar(progress, (warmup + rounds) * len(names), claim, id)
    load_before = load()
    for r in range(warmup + rounds):
        this = tuple(names if r % 2 == 0 else reversed(names))
        order.append(this)
        for name in this:
            if bar is not None:
                bar.set_postfix_str(name)
            s, u, out = _run_arm(arms[name], clk)
            if u is None:
                u = float(work(name, out)) if work is not None else 1.0
            if r >= warmup:
                seconds[name].append(float(s))
                units[name].append(float(u))
            results[name] = out
            if bar is not None:
                bar.update(1)
    load_after = load()
    if bar is not None:
        bar.close()
    for name in names:
        if any(u <= 0 for u in units[name]) or any(s <= 0 for s in seconds[name]):
            raise ValueError(f"arm {name!r} measured no time or no work in a round "
                             f"(seconds {seconds[name]}, units {units[name]}): it cannot be compared")
    arm_values = {n: _arm_values(n, seconds[n], units[n], quantity) for n in names}
    loads = [x for x in (load_before, load_after) if x is not None]
    n_cores, cpu = cores(), describe_machine()
    verdicts = {}
    base = arm_values[baseline]
    for name in names:
        if name == baseline:
            continue
        cand = arm_values[name]
        per_round = [c / b for c, b in zip(cand.values, base.values)]
        verdicts[name] = verdict_from_ratios(
            per_round, margin=margin, ratio=cand.best / base.best, load=max(loads) if loads else None,
            cores=n_cores, spread=max(cand.spread, base.spread), max_spread=max_spread,
            id=id if len(names) == 2 else f"{id}/{name}" if id else name, claim=claim, quantity=quantity,
            clock=clk.name, load_before=load_before, load_after=load_after, cpu=cpu)
    comparison = Comparison(arm_values, baseline, verdicts, tuple(order), results, quantity, clk.name,
                            load_before, load_after, n_cores, cpu)
    if lab is not None:
        for name in verdicts:
            record_verdict(lab, comparison, candidate=name)
    return comparison


def _arm_values(name: str, seconds: list[float], units: list[float], quantity: str) -> ArmValues:
    if quantity == "time":
        values = [s / u for s, u in zip(seconds, units)]
        best = min(values)
    else:
        values = [u / s for s, u in zip(seconds, units)]
        best = max(values)
    return ArmValues(name, tuple(values), tuple(seconds), tuple(units), best)


def _bar(progress: bool, total: int, claim: tuple[str, str], id: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    from labkit.i18n import t

    what = t(claim[0], claim[1]) or id or t("对比", "comparison")
    return tqdm(total=total, desc=t(f"测量：{what}", f"measuring: {what}"), unit=t("次", "run"), leave=False)


# ----------------------------------------------------------------------------- the lab report

def record_verdict(lab: str, measured: Comparison | Verdict, *, candidate: str | None = None,
                   key: str | None = None, **extra) -> Any:
    """Store a verdict (with its numbers, clock, load and CPU; for a Comparison also each arm's
    values) under ``verdicts[id]`` of the lab's results summary. Returns the file written or None."""
    from labkit.report import results

    if isinstance(measured, Comparison):
        entry = measured.as_entry(candidate)
    elif isinstance(measured, Verdict):
        entry = measured.as_entry()
    else:
        raise TypeError(f"measured must be a Comparison or a Verdict, got {type(measured).__name__}")
    entry.update(extra)
    key = key or entry.get("id")
    if not key:
        raise ValueError("a recorded verdict needs an id: pass id= to compare/Verdict, or key=")
    return results.record(lab, "verdicts", key, entry)
