"""A request's life: its tokens, how many have K/V computed, and its timestamps.

    prompt tokens              output tokens       draft (spec) tokens
    |p p p p p p p p p p p p|o o o o o o o|        |d d d|
    |<---- num_computed_tokens ---->|               only while being verified
    |<----------- num_tokens ------------>|

Every step the scheduler gives a request some of the tokens it has not computed yet
(``num_tokens_with_spec - num_computed_tokens``): a prefill chunk, one decode token, or the last
output token plus k drafts to verify. One rule covers all three (vLLM v1).

Plain bookkeeping (no tensors, no torch import): the scheduler is the one writer of a request's
state; random generators and draft probabilities live on the sampler side, keyed by request id.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from labkit.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"        # this request alone could not go on (vLLM v1's FINISHED_ERROR)

    def __init__(self, value: str) -> None:
        # A plain attribute: read for every request every step (an Enum's ``value`` is a slow descriptor).
        # The finished statuses' values are the finish reasons (``StepOutput.finish_reason``).
        self.finished = self.name.startswith("FINISHED_")


@dataclass(frozen=True)
class RequestTimings:
    """A request's timestamps (the engine's clock, seconds) and the latencies read from them."""

    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None
    num_output_tokens: int
    num_preemptions: int

    @property
    def ttft_s(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def e2e_s(self) -> float | None:
        if self.finished_time is None:
            return None
        return self.finished_time - self.arrival_time

    @property
    def queue_s(self) -> float | None:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.finished_time is None or self.first_token_time is None or self.num_output_tokens < 2:
            return None
        return (self.finished_time - self.first_token_time) / (self.num_output_tokens - 1)


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    eos_token_ids: tuple[int, ...] = ()
    output_token_ids: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)   # drafts awaiting verification
    num_computed_tokens: int = 0
    # Scheduled but not yet applied (update_from_output): tokens whose K/V a step in flight computes, and
    # the output tokens those steps will append. Both are 0 between steps of a synchronous engine; with
    # async scheduling the next step is planned from num_computed_tokens + num_inflight_tokens.
    num_inflight_tokens: int = 0
    num_output_placeholders: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    finished_time: float | None = None
    token_times: list[float] = field(default_factory=list)     # when each output token was appended
    parent_id: str | None = None             # set on forked children (parallel sampling)
    child_ids: tuple[str, ...] = ()          # n > 1: the ids its n - 1 children will have
    forked: bool = False                     # the children exist (forked when the prompt is done)

    def __post_init__(self) -> None:
        self.all_token_ids = list(self.prompt_token_ids) + list(self.output_token_ids)
        # Checked after every appended token: one set lookup for EOS and the caller's stop tokens.
        self.stop_token_ids = frozenset(self.eos_token_ids) | frozenset(self.sampling_params.stop_token_ids)
        # Its last output token: max_tokens, or sooner where the scheduler's max_model_len ends the sequence
        # (``ContinuousScheduler.add`` lowers it).
        self.max_output_tokens = self.sampling_params.max_tokens

    @property
    def first_token_time(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def num_forks_pending(self) -> int:
        """Children still to fork from this request (n > 1); each will take a batch slot."""
        return 0 if self.forked else len(self.child_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self.all_token_ids) + len(self.spec_token_ids)

    @property
    def num_scheduled_end(self) -> int:
        """Where the next step's tokens start: computed plus in flight."""
        return self.num_computed_tokens + self.num_inflight_tokens

    @property
    def num_tokens_planned(self) -> int:
        """Known tokens plus the ones steps in flight will append (placeholders until then)."""
        return len(self.all_token_ids) + self.num_output_placeholders

    @property
    def max_total_tokens(self) -> int:
        return self.num_prompt_tokens + self.sampling_params.max_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``start:end`` of prompt + output + drafts, without copying the whole sequence."""
        n = len(self.all_token_ids)
        if end <= n:
            return self.all_token_ids[start:end]
        return self.all_token_ids[start:] + self.spec_token_ids[max(0, start - n):end - n]

    def append_output(self, token_id: int, now: float) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
        self.token_times.append(now)

    def timings(self) -> RequestTimings:
        return RequestTimings(
            arrival_time=self.arrival_time, first_scheduled_time=self.first_scheduled_time,
            first_token_time=self.first_token_time, finished_time=self.finished_time,
            num_output_tokens=len(self.output_token_ids), num_preemptions=self.num_preemptions)
