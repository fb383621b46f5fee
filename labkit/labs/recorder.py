"""``StepRecorder``: one row per engine step, built from ``StepEnd`` events only.

    with StepRecorder(llm) as rec:
        llm.generate(prompts, params)
    rec.rows[0].prefill_tokens, rec.rows[0].step_s

A row says how many tokens the step processed and of which kind (``BatchEntry.kind``: prefill,
decode, verify), how long it took, and how many requests ran. Labs plot these; they never read the
engine's internals (STYLE: observers receive events).
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.hooks import EventBus, Preempted, StepEnd


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
    tokens = {"prefill": 0, "decode": 0, "verify": 0}
    for entry in event.batch:
        if entry.kind in tokens:
            tokens[entry.kind] += entry.num_tokens
    busy = sum(entry.kind != "idle" for entry in event.batch)
    stats = event.stats
    return StepRow(event.step, tokens["prefill"], tokens["decode"], tokens["verify"], busy,
                   stats.model_s, stats.step_s, stats.simulated)


def hooks_of(engine) -> EventBus:
    """The event bus of an ``LLMEngine`` or of an ``LLM`` (its ``.engine``)."""
    return engine.hooks if hasattr(engine, "hooks") else engine.engine.hooks


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
