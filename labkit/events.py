"""The engine's events and the small bus that carries them (``engine.hooks``; docs/engine.md).

Every event is a frozen dataclass built from plain Python values after the engine state is
consistent, so an observer can keep it, draw it later, or send it to a browser. A subscriber that
raises is reported once (``warnings``) and unsubscribed; the engine step goes on untouched.

Events carry values their owners define: ``BlockMapSnapshot`` (``kv.snapshot``), ``RequestTimings``
(``request``), ``StepKind`` (``scheduler_output``). ``StepStats`` and ``BatchEntry`` are the engine's.
"""

from __future__ import annotations

import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable

from labkit.kv.snapshot import BlockMapSnapshot
from labkit.request import RequestTimings
from labkit.scheduler_output import StepKind

# ----------------------------------------------------------------------------- step values

@dataclass(frozen=True)
class BatchEntry:
    """One request slot in this step's batch."""

    request_id: str
    slot: int
    num_tokens: int
    kind: StepKind          # PREFILL | DECODE | VERIFY | IDLE


@dataclass(frozen=True)
class StepStats:
    """Current-step values. Percentages are 0..100."""

    step: int
    num_requests_running: int
    num_requests_waiting: int
    num_scheduled_tokens: int
    kv_cache_usage_perc: float
    kv_waste_perc: float
    kv_reserved_unused_perc: float
    kv_internal_frag_perc: float
    kv_external_frag_perc: float
    batch_occupancy_perc: float
    token_budget_perc: float
    num_preemptions: int
    host_s: float                  # the step's host (CPU) time outside the forward pass: the four below
    model_s: float
    step_s: float
    simulated: bool = False
    schedule_s: float = 0.0        # of host_s: deciding (scheduler.schedule())
    sample_s: float = 0.0          # of host_s: sampling and verification; the rest is update,
                                   # bookkeeping and proposing
    propose_s: float = 0.0         # of host_s: the proposer drafting for the next step (0 without one)


# ----------------------------------------------------------------------------- events

@dataclass(frozen=True)
class RequestAdded:
    request_id: str
    prompt_len: int
    max_tokens: int
    arrival_time: float


@dataclass(frozen=True)
class RequestScheduled:
    request_id: str
    step: int
    num_tokens: int
    kind: StepKind


@dataclass(frozen=True)
class BlocksAllocated:
    request_id: str
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class BlocksFreed:
    request_id: str
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class PrefixHit:
    request_id: str
    num_cached_tokens: int


@dataclass(frozen=True)
class Preempted:
    request_id: str
    num_computed_tokens_lost: int


@dataclass(frozen=True)
class SpecVerified:
    request_id: str
    drafted: int
    accepted: int
    per_position: tuple[bool, ...]
    draft_token_ids: tuple[int, ...] = ()     # the drafts verified (rejected ones included)


@dataclass(frozen=True)
class TokensAppended:
    """Output tokens a request gained this step, emitted after verification and before ``StepEnd``.

    With speculative decoding one step can append several tokens: the accepted draft tokens
    first, then the target's recovered or bonus token::

        token_ids = (d1, d2, t)      num_accepted_draft = 2
                     └─ draft ─┘ └ target

    Without speculation ``token_ids`` holds the one sampled token and ``num_accepted_draft`` is 0.
    """

    request_id: str
    token_ids: tuple[int, ...]
    num_accepted_draft: int = 0


@dataclass(frozen=True)
class RequestFinished:
    request_id: str
    reason: str          # "stop" (EOS / stop token) | "length" | "abort" | "error"
    timings: RequestTimings


@dataclass(frozen=True)
class StepEnd:
    step: int
    stats: StepStats
    block_map: BlockMapSnapshot
    batch: tuple[BatchEntry, ...]


Event = (RequestAdded | RequestScheduled | BlocksAllocated | BlocksFreed | PrefixHit | Preempted
         | SpecVerified | TokensAppended | RequestFinished | StepEnd)


# ----------------------------------------------------------------------------- bus

@dataclass
class HookError:
    subscriber: str
    event: str
    traceback: str


@dataclass
class EventBus:
    """``subscribe(fn)`` gets every event; ``subscribe(fn, StepEnd)`` only those types."""

    _subs: list[tuple[Callable, tuple[type, ...]]] = field(default_factory=list)
    errors: list[HookError] = field(default_factory=list)

    def subscribe(self, fn: Callable, *event_types: type) -> Callable:
        self._subs.append((fn, event_types))
        return fn

    def unsubscribe(self, fn: Callable) -> None:
        # ==, not is: ``obj.method`` is a new bound-method object each time it is read
        self._subs = [(f, t) for f, t in self._subs if f != fn]

    @property
    def active(self) -> bool:
        """False when nobody listens: the engine then skips building snapshots."""
        return bool(self._subs)

    def wants(self, event_type: type) -> bool:
        return any(not types or event_type in types for _, types in self._subs)

    def emit(self, event) -> None:
        for fn, types in list(self._subs):
            if types and type(event) not in types:
                continue
            try:
                fn(event)
            except Exception:  # an observer must never stop the engine
                name = getattr(fn, "__qualname__", repr(fn))
                err = HookError(name, type(event).__name__, traceback.format_exc())
                self.errors.append(err)
                self.unsubscribe(fn)
                warnings.warn(f"labkit hook {name} raised on {err.event} and was unsubscribed:\n"
                              f"{err.traceback}", RuntimeWarning, stacklevel=2)


def hooks_of(engine: object | None, hooks: EventBus | None = None) -> EventBus:
    """The bus to listen to: ``hooks`` if given, else ``engine.hooks`` (an ``LLM``'s engine works too)."""
    if hooks is not None:
        return hooks
    for owner in (engine, getattr(engine, "engine", None)):
        bus = getattr(owner, "hooks", None)
        if bus is not None:
            return bus
    raise TypeError("expected an LLM or LLMEngine (with .hooks), or hooks=EventBus()")
