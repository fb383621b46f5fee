"""One request decoded step by step, every drafted token labelled with what verification did to it.

Each engine step after the prefill verifies the drafts the proposer made at the end of the step
before. Per step we keep the drafts (read from the request, ``Request.spec_token_ids``, before the
step runs: the events carry only counts) and the step's ``SpecVerified`` / ``TokensAppended``
events, and label every token::

    drafts       d0  d1  d2  d3              k = 4
    verify       ok  ok  no  --              accepted = 2
    labels       accepted accepted rejected rejected  + resampled (the target's token at position 2)
    all k pass   accepted x4                           + bonus (the extra row the target computed)
    no drafts    plain (the target's own next token; e.g. n-gram found no match)

A "rejected" token was drafted and thrown away: its K/V slot is rolled back. Greedy decoding calls
the resampled token the target's argmax; vLLM names it the recovered token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from labkit.events import SpecVerified, TokensAppended

KINDS = ("accepted", "rejected", "resampled", "bonus", "plain")


@dataclass(frozen=True)
class LabelledToken:
    token_id: int
    kind: str               # one of KINDS
    position: int | None    # draft position 0..k-1 for drafted tokens, else None


@dataclass(frozen=True)
class SpecStep:
    """What one engine step did for the request: drafted tokens (kept or not) and emitted tokens."""

    step: int
    drafted: int
    accepted: int
    tokens: tuple[LabelledToken, ...]

    @property
    def emitted(self) -> list[int]:
        return [t.token_id for t in self.tokens if t.kind != "rejected"]


def label_step(step: int, drafts: list[int], verified: SpecVerified | None,
               appended: tuple[int, ...]) -> SpecStep:
    """Label one step's tokens (see the module docstring). ``appended`` may be cut short by a stop."""
    if verified is None or verified.drafted == 0:
        return SpecStep(step, 0, 0, tuple(LabelledToken(t, "plain", None) for t in appended))
    n, a = verified.drafted, verified.accepted
    tokens = [LabelledToken(t, "accepted", i) for i, t in enumerate(appended[:a])]
    tokens += [LabelledToken(d, "rejected", a + i) for i, d in enumerate(drafts[a:n])]
    if len(appended) > a:
        tokens.append(LabelledToken(appended[a], "bonus" if a == n else "resampled", None))
    return SpecStep(step, n, a, tuple(tokens))


class _StepEvents:
    """The request's events of the current step."""

    def __init__(self, request_id: str):
        self.request_id, self.verified, self.appended = request_id, None, ()

    def __call__(self, event) -> None:
        if event.request_id != self.request_id:
            return
        if isinstance(event, SpecVerified):
            self.verified = event
        else:
            self.appended = self.appended + tuple(event.token_ids)


def trace_request(llm, prompt, params, on_step: Callable[[SpecStep], None] | None = None) -> list[SpecStep]:
    """Serve one prompt alone, step by step; return (and hand to ``on_step``) each labelled step."""
    engine = llm.engine
    rid = engine.add_request(prompt, params)
    req = engine.get_request(rid)
    events = _StepEvents(rid)
    engine.hooks.subscribe(events, SpecVerified, TokensAppended)
    steps: list[SpecStep] = []
    try:
        while not req.is_finished:
            drafts = list(req.spec_token_ids)       # proposed at the end of the previous step
            events.verified, events.appended = None, ()
            engine.step()
            if events.appended or events.verified:
                steps.append(label_step(len(steps), drafts, events.verified, events.appended))
                if on_step is not None:
                    on_step(steps[-1])
    finally:
        engine.hooks.unsubscribe(events)
        if not req.is_finished:
            engine.abort(rid)
    return steps


@dataclass(frozen=True)
class TraceSummary:
    steps: int                   # decode steps (after the prefill step)
    tokens: int                  # tokens emitted by those steps
    counts: dict                 # kind -> number of tokens
    per_position: list[float]    # acceptance rate at draft position i (accepted / drafted there)

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0


def summarize(steps: list[SpecStep]) -> TraceSummary:
    decode = steps[1:]                   # step 0 is the prefill: its token is the target's own
    counts = {kind: sum(t.kind == kind for s in decode for t in s.tokens) for kind in KINDS}
    drafted_at: list[int] = []
    accepted_at: list[int] = []
    for s in decode:
        for i in range(s.drafted):
            if i == len(drafted_at):
                drafted_at.append(0)
                accepted_at.append(0)
            drafted_at[i] += 1
            accepted_at[i] += i < s.accepted
    rates = [a / d for a, d in zip(accepted_at, drafted_at)]
    return TraceSummary(len(decode), sum(len(s.emitted) for s in decode), counts, rates)
