"""What ``generate``/``stream``/``step`` hand back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RequestMetrics:
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    queue_s: float | None
    num_preemptions: int
    num_output_tokens: int


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    metrics: RequestMetrics | None = None


@dataclass
class RequestOutput:
    """One prompt's result. ``text``/``token_ids``/``metrics`` are the first completion's; with
    ``SamplingParams(n>1)`` every completion is in ``outputs``."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def metrics(self) -> RequestMetrics | None:
        return self.outputs[0].metrics

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason


@dataclass(slots=True)     # one per running request per step: slotted, not frozen (a frozen
class StepOutput:          # dataclass's __init__ costs ~4x as much); read it, never change it
    """What one engine step produced for one request (a delta). ``error``: why a request that
    finished with ``finish_reason="error"`` could not go on."""

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    error: str | None = None


class StepOutputs(Sequence):
    """One step's outputs as columns: request ``request_ids[i]`` gained ``token_ids[i]``;
    ``finish_reasons`` holds the rows that finished. Reads like a list of ``StepOutput``; each one is
    built when it is read, so a caller that reads none (``generate`` collects from the requests)
    builds none."""

    __slots__ = ("request_ids", "token_ids", "finish_reasons")

    def __init__(self, request_ids: list[str] | None = None, token_ids: list[tuple[int, ...]] | None = None,
                 finish_reasons: dict[int, str] | None = None):
        self.request_ids = [] if request_ids is None else request_ids
        self.token_ids = [] if token_ids is None else token_ids
        self.finish_reasons = {} if finish_reasons is None else finish_reasons

    def append(self, request_id: str, token_ids: tuple[int, ...], finish_reason: str | None = None) -> None:
        if finish_reason is not None:
            self.finish_reasons[len(self.request_ids)] = finish_reason
        self.request_ids.append(request_id)
        self.token_ids.append(token_ids)

    def __len__(self) -> int:
        return len(self.request_ids)

    def _output(self, i: int) -> StepOutput:
        reason = self.finish_reasons.get(i)
        return StepOutput(self.request_ids[i], tuple(self.token_ids[i]), reason is not None, reason)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._output(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("StepOutputs index out of range")
        return self._output(i)

    def __iter__(self):
        for i in range(len(self.request_ids)):
            yield self._output(i)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"StepOutputs({list(self)!r})"
