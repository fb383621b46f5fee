"""Lab 01 measurements: where a contiguous KV reservation's memory goes.

The pool split itself (used / reserved_later / internal / external / free) and its step-average
``PoolBreakdown`` live in ``labkit.kv.breakdown`` (recorded from the engine's steps by
``labkit.metrics.BreakdownRecorder``); this module replays traces through it, measures
the learner's first-fit allocator the same way, and reads the paper's Fig. 2 for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.i18n import t
from labkit.kv.breakdown import PARTS, PoolBreakdown
from labkit.labs.common.references import cite, percentages
from labkit.metrics import BreakdownRecorder
from labkit.replay import replay
from labkit.traces import TraceRequest


@dataclass(frozen=True)
class FragmentationReport:
    """One trace replayed through one engine configuration."""

    label: str
    breakdown: PoolBreakdown
    num_requests: int
    num_steps: int
    mean_running: float     # requests holding KV, averaged over steps
    num_clipped: int        # trace requests shortened to fit max_model_len / the pool
    simulated: bool
    wall_s: float


def replay_breakdown(llm, trace: list[TraceRequest], label: str) -> FragmentationReport:
    """Replay ``trace`` (``labkit.replay``) and measure the pool split step by step."""
    recorder = BreakdownRecorder(llm.engine)
    try:
        result = replay(llm.engine, trace)
    finally:
        recorder.detach()
    steps = max(recorder.num_steps, 1)
    return FragmentationReport(label, recorder.breakdown(), len(trace), recorder.num_steps,
                               recorder.running_sum / steps, result.num_clipped, llm.engine.simulated,
                               result.wall_s)


# ------------------------------------------------------------------- the learner's allocator

class AllocatorError(ValueError):
    """The allocator under test broke a rule; the message says which, in the learner's terms."""


@dataclass
class _Live:
    start: int
    reserved: int
    needed: int
    filled: int


def _check_start(start, size: int, num_slots: int, live: list[_Live]) -> None:
    if isinstance(start, bool) or not isinstance(start, int):
        raise AllocatorError(f"allocate({size}) must return an int start or None, got {start!r}")
    if not 0 <= start <= num_slots - size:
        raise AllocatorError(f"allocate({size}) returned start {start}: the region [{start}, {start + size}) "
                             f"leaves the arena of {num_slots} slots")
    for other in live:
        if start < other.start + other.reserved and other.start < start + size:
            raise AllocatorError(f"allocate({size}) returned start {start}, overlapping the live region "
                                 f"[{other.start}, {other.start + other.reserved})")


def simulate_allocator(allocator_cls, trace: list[TraceRequest], num_slots: int,
                       reserve_len: int | None = None) -> PoolBreakdown:
    """Serve ``trace`` with a contiguous allocator, first come first served, every request queued
    at the start (a saturated server; arrival times are ignored).

    Each request reserves ``reserve_len`` slots (max-length reservation; None: exactly
    prompt + output, an oracle), fills its prompt at admission and one slot per step, and frees
    its region when done. Returns the step-averaged ``PoolBreakdown``. A step admits requests from
    the head of the queue while ``allocate`` finds room; external fragmentation is counted when
    the head waits although enough slots are free in total.
    """
    allocator, queue, live = allocator_cls(num_slots), list(trace), []
    sums, steps = dict.fromkeys(PARTS, 0.0), 0
    while queue or live:
        _admit(allocator, queue, live, num_slots, reserve_len)
        for part, slots in _split(queue, live, num_slots, reserve_len).items():
            sums[part] += 100.0 * slots / num_slots
        steps += 1
        _advance(allocator, live)
    return PoolBreakdown(**{part: total / max(steps, 1) for part, total in sums.items()})


def _sizes(req: TraceRequest, num_slots: int, reserve_len: int | None) -> tuple[int, int]:
    needed = min(req.prompt_len + req.output_len, reserve_len or num_slots, num_slots)
    return needed, min(reserve_len or needed, num_slots)


def _admit(allocator, queue: list[TraceRequest], live: list[_Live], num_slots: int,
           reserve_len: int | None) -> None:
    while queue:
        needed, size = _sizes(queue[0], num_slots, reserve_len)
        start = allocator.allocate(size)
        if start is None:
            if not live:
                raise AllocatorError(f"allocate({size}) returned None although every region was freed "
                                     f"(arena of {num_slots} slots): does free() release the slots?")
            return
        _check_start(start, size, num_slots, live)
        prompt = min(queue.pop(0).prompt_len, needed - 1) if needed > 1 else 1
        live.append(_Live(start, size, needed, prompt))


def _split(queue: list[TraceRequest], live: list[_Live], num_slots: int, reserve_len: int | None) -> dict:
    used = sum(r.filled for r in live)
    later = sum(r.needed - r.filled for r in live)
    internal = sum(r.reserved - r.needed for r in live)
    free = num_slots - used - later - internal
    external = free if queue and free >= _sizes(queue[0], num_slots, reserve_len)[1] else 0
    return {"used": used, "reserved_later": later, "internal": internal, "external": external,
            "free": free - external}


def _advance(allocator, live: list[_Live]) -> None:
    for region in list(live):
        region.filled += 1
        if region.filled >= region.needed:
            allocator.free(region.start)
            live.remove(region)


def paper_breakdown(system: str) -> tuple[str, PoolBreakdown]:
    """Kwon et al. SOSP'23 Fig. 2 for ``system`` ("Orca(Max)", "Orca(Pow2)", "Orca(Oracle)") as a
    ``PoolBreakdown`` (its shares of KV memory; the paper reports no free share, so free = 0)."""
    citation = cite(f"{system} KV breakdown")
    names = citation.claim.split("breakdown", 1)[1].split()[0].split("/")
    key = {"token": "used", "reserv": "reserved_later", "internal": "internal", "external": "external"}
    values = dict.fromkeys(PARTS, 0.0)
    values.update({key[name]: value for name, value in zip(names, percentages(citation))})
    return t(f"论文：{system}", f"paper: {system}"), PoolBreakdown(**values)
