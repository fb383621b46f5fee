"""What ``generate``/``stream``/``step`` hand back."""

from __future__ import annotations

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
    """What one engine step produced for one request (a delta)."""

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
