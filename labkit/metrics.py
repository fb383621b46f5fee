"""Run-level statistics, accumulated from each step's ``StepStats`` and finished requests.

Means are over engine steps, each step weighted equally. Latencies come from request timestamps:
TTFT = first token - arrival; ITL = gaps between the steps that gave one request tokens (tokens one speculative step appends count once);
TPOT = (finish - first token) / (output tokens - 1); e2e = finish - arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from labkit.events import Preempted, StepEnd, StepStats, hooks_of
from labkit.kv.breakdown import PARTS, PoolBreakdown, snapshot_slots
from labkit.scheduler_output import DECODE, IDLE, PREFILL, VERIFY


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]; None for no data."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


_MEANED = ("kv_cache_usage_perc", "kv_waste_perc", "kv_reserved_unused_perc", "kv_internal_frag_perc",
           "kv_external_frag_perc", "batch_occupancy_perc", "token_budget_perc", "host_s", "model_s",
           "step_s")


@dataclass
class MetricsCollector:
    """``keep_samples``: keep every finished request's latencies (and every ITL gap) for the
    percentiles, as a run in a lab wants. A long-lived server turns it off (``labkit serve``: its
    latency histograms are in ``/metrics``), so its memory does not grow by ~1 KB a request."""

    keep_samples: bool = True
    steps: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_MEANED, 0.0))
    decode_steps: int = 0
    decode_occupancy_sum: float = 0.0
    last: StepStats | None = None
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    num_output_tokens: int = 0
    num_finished: int = 0
    first_arrival: float | None = None
    last_finish: float | None = None
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    spec_drafted_per_pos: list[int] = field(default_factory=list)

    def record_step(self, stats: StepStats, decode_only: bool) -> None:
        self.steps += 1
        self.last = stats
        for name in _MEANED:
            self.sums[name] += getattr(stats, name)
        if decode_only:
            self.decode_steps += 1
            self.decode_occupancy_sum += stats.batch_occupancy_perc

    def record_arrival(self, t: float) -> None:
        if self.first_arrival is None or t < self.first_arrival:
            self.first_arrival = t

    def record_finished(self, timings, token_times: list[float]) -> None:
        self.num_finished += 1
        self.num_output_tokens += timings.num_output_tokens
        if timings.finished_time is not None:
            self.last_finish = max(self.last_finish or timings.finished_time, timings.finished_time)
        if not self.keep_samples:
            return
        for name, value in (("ttft", timings.ttft_s), ("tpot", timings.tpot_s), ("e2e", timings.e2e_s),
                            ("queue", timings.queue_s)):
            if value is not None:
                getattr(self, name).append(value)
        # One gap per step that gave the request tokens (vLLM's per-iteration ITL): the tokens one
        # speculative step appends share its timestamp and are one chunk, not zero-second gaps.
        self.itl.extend(b - a for a, b in zip(token_times, token_times[1:]) if b != a)

    def record_spec(self, drafted: int, accepted_flags: list[bool]) -> None:
        self.spec_num_drafts += 1
        self.spec_num_draft_tokens += drafted
        num_accepted = 0
        for pos, ok in enumerate(accepted_flags):
            while len(self.spec_drafted_per_pos) <= pos:
                self.spec_drafted_per_pos.append(0)
                self.spec_accepted_per_pos.append(0)
            self.spec_drafted_per_pos[pos] += 1
            if ok:
                num_accepted += 1
                self.spec_accepted_per_pos[pos] += 1
        self.spec_num_accepted_tokens += num_accepted

    def as_dict(self) -> dict:
        d: dict = {}
        if self.last is not None:
            d.update({f.name: getattr(self.last, f.name) for f in fields(self.last)})
        n = max(self.steps, 1)
        for name in _MEANED:
            d[f"mean_{name}"] = self.sums[name] / n
        d["num_steps"] = self.steps
        d["mean_decode_occupancy_perc"] = (self.decode_occupancy_sum / self.decode_steps
                                           if self.decode_steps else None)
        for name in ("ttft", "itl", "tpot", "e2e", "queue"):
            values = getattr(self, name)
            d[f"{name}_p50_s"] = percentile(values, 50)
            d[f"{name}_p99_s"] = percentile(values, 99)
            d[f"{name}_mean_s"] = sum(values) / len(values) if values else None
        d["time_to_first_token_seconds"] = list(self.ttft)
        d["inter_token_latency_seconds"] = list(self.itl)
        d["num_finished_requests"] = self.num_finished
        d["num_output_tokens"] = self.num_output_tokens
        elapsed = (self.last_finish - self.first_arrival
                   if self.last_finish is not None and self.first_arrival is not None else None)
        d["elapsed_s"] = elapsed
        d["output_tokens_per_s"] = self.num_output_tokens / elapsed if elapsed else None
        d["requests_per_s"] = self.num_finished / elapsed if elapsed else None
        d["spec_decode_num_drafts"] = self.spec_num_drafts
        d["spec_decode_num_draft_tokens"] = self.spec_num_draft_tokens
        d["spec_decode_num_accepted_tokens"] = self.spec_num_accepted_tokens
        d["spec_decode_num_accepted_tokens_per_pos"] = list(self.spec_accepted_per_pos)
        d["spec_decode_acceptance_rate"] = (self.spec_num_accepted_tokens / self.spec_num_draft_tokens
                                            if self.spec_num_draft_tokens else None)
        d["spec_decode_mean_acceptance_length"] = (1 + self.spec_num_accepted_tokens / self.spec_num_drafts
                                                   if self.spec_num_drafts else None)
        return d


# ------------------------------------------------------------------------------ per-step recording
# ``StepRecorder``: one row per engine step, built from ``StepEnd`` events only (observers never read
# the engine's internals):
#
#     with StepRecorder(llm) as rec:
#         llm.generate(prompts, params)
#     rec.rows[0].prefill_tokens, rec.rows[0].step_s

@dataclass(frozen=True)
class StepRow:
    """What one engine step did. Times are seconds (virtual seconds when ``simulated``)."""

    step: int
    prefill_tokens: int
    decode_tokens: int
    verify_tokens: int
    num_requests: int
    model_s: float
    step_s: float
    simulated: bool

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens + self.verify_tokens


def step_row(event: StepEnd) -> StepRow:
    """Fold a ``StepEnd`` into a ``StepRow`` (idle batch slots count as no work)."""
    tokens = dict.fromkeys((PREFILL, DECODE, VERIFY), 0)
    for entry in event.batch:
        if entry.kind in tokens:
            tokens[entry.kind] += entry.num_tokens
    busy = sum(entry.kind != IDLE for entry in event.batch)
    stats = event.stats
    return StepRow(event.step, tokens[PREFILL], tokens[DECODE], tokens[VERIFY], busy,
                   stats.model_s, stats.step_s, stats.simulated)


class StepRecorder:
    """Collects a ``StepRow`` per step and every ``Preempted`` event while attached."""

    def __init__(self, engine) -> None:
        self.hooks = hooks_of(engine)
        self.rows: list[StepRow] = []
        self.preempted: list[Preempted] = []
        self._handler = self._on_event
        self.hooks.subscribe(self._handler, StepEnd, Preempted)

    def _on_event(self, event) -> None:
        if isinstance(event, StepEnd):
            self.rows.append(step_row(event))
        else:
            self.preempted.append(event)

    def detach(self) -> None:
        self.hooks.unsubscribe(self._handler)

    def __enter__(self) -> "StepRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    @property
    def num_tokens(self) -> int:
        """Tokens whose K/V the model computed over the recorded steps."""
        return sum(row.num_tokens for row in self.rows)

    @property
    def seconds(self) -> float:
        return sum(row.step_s for row in self.rows)


class BreakdownRecorder:
    """Accumulates ``kv.breakdown.snapshot_slots`` as pool shares over every ``StepEnd`` while attached;
    ``breakdown()`` is their average over the steps seen (a ``PoolBreakdown``)."""

    def __init__(self, engine) -> None:
        self.hooks = hooks_of(engine)
        self.sums = dict.fromkeys(PARTS, 0.0)
        self.num_steps = 0
        self.running_sum = 0
        self._handler = self._on_step
        self.hooks.subscribe(self._handler, StepEnd)

    def _on_step(self, event: StepEnd) -> None:
        pool = event.block_map.num_blocks * event.block_map.block_size
        for part, slots in snapshot_slots(event.block_map, event.stats.kv_external_frag_perc).items():
            self.sums[part] += 100.0 * slots / pool
        self.num_steps += 1
        self.running_sum += event.stats.num_requests_running

    def detach(self) -> None:
        self.hooks.unsubscribe(self._handler)

    def breakdown(self) -> PoolBreakdown:
        n = max(self.num_steps, 1)
        return PoolBreakdown(**{part: total / n for part, total in self.sums.items()})
