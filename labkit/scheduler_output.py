"""What crosses the boundaries of one engine step, as small typed values (vLLM v1's split).

    scheduler.schedule(now)        -> SchedulerOutput   the whole decision: who runs which tokens,
                                                        where their K/V go, which blocks to copy
    runner.execute(SchedulerOutput) -> logits           computed from that value alone
    sampler.sample(...)            -> SampledTokens     plain token ids per request
    scheduler.update_from_output(SchedulerOutput, SampledTokens, now) -> StepUpdate
                                                        the one place that changes requests and KV
                                                        after the model ran

All of it is plain Python (ints, lists, tuples): importable and testable without torch.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.outputs import StepOutput
from labkit.request import Request

PLACEHOLDER = -1    # async scheduling: a decode row's token that the step in flight is still sampling


class StepKind(str, enum.Enum):
    """What a request's row does in a step (``scheduler.continuous.step_kind`` decides). A ``str``, so
    events keep reading as text in widgets, JSON and comparisons (``StepKind.DECODE == "decode"``)."""

    PREFILL = "prefill"     # prompt tokens (a whole prompt, a chunk of one, or a recomputed one)
    DECODE = "decode"       # the last output token, for the next one
    VERIFY = "verify"       # the last output token and k drafts (speculative decoding)
    IDLE = "idle"           # static batching: a finished request's slot, held without work (StepEnd.batch)

    def __str__(self) -> str:
        return self.value


# The members, read once: an Enum class attribute costs about 0.1 µs a read in Python 3.11 (a plain name
# 0.01), and the scheduler names one for every running request every step (bench.scheduler_overhead).
PREFILL, DECODE, VERIFY, IDLE = StepKind.PREFILL, StepKind.DECODE, StepKind.VERIFY, StepKind.IDLE


@dataclass(slots=True)      # built for every running request every step: kept light
class ScheduledRequest:
    """One request's share of a step. The runner needs nothing else to compute it.

        positions  start ........... start + len(token_ids) - 1
        token_ids  the tokens whose K/V this step computes (prefill chunk, 1 decode token, or the
                   last output token followed by num_spec_tokens drafts to verify)
        slot_mapping[i]  where token i's K/V is written; block_table  where the context is read
    """

    request_id: str
    token_ids: tuple[int, ...]
    start: int                     # num_computed_tokens before this step
    num_spec_tokens: int           # how many of token_ids are draft tokens being verified
    kind: StepKind                 # PREFILL | DECODE | VERIFY
    block_table: Sequence[int]     # the KV manager's table, valid until update_from_output
    slot_mapping: Sequence[int]
    num_logits: int                # logits rows wanted: 0 mid-prompt, 1 at the end, 1 + k when verifying

    @property
    def num_new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)


@dataclass
class DecodeColumns:
    """A step whose every row is a steady decode row, kept as columns (``EngineConfig(persistent_batch=True)``):
    row i computes ``token_ids[i]`` at position ``starts[i]`` of ``request_ids[i]``, reads its context
    through ``block_tables[i]``, writes its K/V to ``slots[i]`` and wants one logits row. Nothing is
    built per request; ``SchedulerOutput.scheduled`` turns the columns into ``ScheduledRequest`` rows
    for whoever asks (the same values).

    ``slots`` is computed when read, from the tables and positions (``table[p // bs] * bs + p % bs``, the
    KV manager's ``slot``): a table handed out never changes, and the persistent batch computes the
    slots itself, vectorised, so the common decode step does not compute them one by one."""

    block_size: int = 1                 # of the layout the tables address (the KV manager's meta_block_size)
    request_ids: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    block_tables: list[Sequence[int]] = field(default_factory=list)

    @property
    def slots(self) -> list[int]:
        bs = self.block_size
        return [table[p // bs] * bs + p % bs for table, p in zip(self.block_tables, self.starts)]

    def rows(self) -> list[ScheduledRequest]:
        columns = zip(self.request_ids, self.token_ids, self.starts, self.slots, self.block_tables)
        return [ScheduledRequest(rid, (token,), start, 0, DECODE, table, (slot,), 1)
                for rid, token, start, slot, table in columns]


@dataclass
class SchedulerOutput:
    """``scheduled``: the step's rows in order. A columnar decision (``columns`` set) holds them as
    ``DecodeColumns`` and builds the row objects only when ``scheduled`` is read."""

    rows: list[ScheduledRequest] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)   # (src, dst): copy-on-write, before the step
    preempted: list[str] = field(default_factory=list)
    new_blocks: dict[str, list[int]] = field(default_factory=dict)
    prefix_hits: dict[str, int] = field(default_factory=dict)
    # Requests admitted from the waiting queue this step (new, or resumed after preemption): their block
    # table is new in full, whatever the runner remembers of an earlier one (vLLM v1's
    # ``resumed_from_preemption``). The preempting step may have had no rows, so no runner saw it.
    admitted: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)        # static batching: slots held by finished requests
    freed_blocks: dict[str, list[int]] = field(default_factory=dict)   # by preemption
    lost_tokens: dict[str, int] = field(default_factory=dict)          # computed tokens preemption dropped
    num_scheduled_tokens: int = 0      # sum of num_new_tokens over scheduled (counted as the budget is spent)
    placeholder_rows: list[int] = field(default_factory=list)   # async: rows whose token is PLACEHOLDER
    columns: DecodeColumns | None = None     # every row a steady decode row, as columns (persistent batch)

    @property
    def scheduled(self) -> list[ScheduledRequest]:
        if self.columns is not None and len(self.rows) != len(self.columns.request_ids):
            self.rows = self.columns.rows()
        return self.rows

    @property
    def num_rows(self) -> int:
        return len(self.columns.request_ids) if self.columns is not None else len(self.rows)

    def add_row(self, row: ScheduledRequest) -> None:
        """A row that is not a steady decode one: from here on the step is a list of row objects."""
        if self.columns is not None:
            self.rows = self.scheduled
            self.columns = None
        self.rows.append(row)

    def fill_placeholders(self, sampled: "SampledTokens") -> None:
        """Async scheduling: put the previous step's sampled tokens into the decode rows planned before
        they existed (each such row's token is its request's last sampled token). Called once, before
        the runner sees the decision; afterwards the decision is complete, as a synchronous one."""
        if not self.placeholder_rows:
            return
        if self.columns is not None:
            ids, tokens = self.columns.request_ids, self.columns.token_ids
            if len(self.placeholder_rows) == len(ids) and ids == sampled.row_ids:
                tokens[:] = sampled.row_tokens      # steady async decode: the same requests, in the same order
            else:
                last = sampled.last_tokens()
                for i in self.placeholder_rows:
                    tokens[i] = last[ids[i]]
            self.rows = []                  # rebuilt from the filled columns if asked for
        else:
            last, rows = sampled.last_tokens(), self.rows
            for i in self.placeholder_rows:
                rows[i].token_ids = (last[rows[i].request_id],)
        self.placeholder_rows = []


@dataclass(frozen=True)
class SampledTokens:
    """What the sampler / verifier decided, as plain token ids.

    ``token_ids[rid]``: the tokens request rid gains this step (1 sampled token; or the accepted
    drafts followed by one recovered or bonus token). ``fork_token_ids[rid]``: for a request with
    n > 1 that reached the end of its prompt, the first token of each child it forks, sampled from
    the same logits row with the child's own generator.
    """

    token_ids: dict[str, Sequence[int]] = field(default_factory=dict)   # a plain row's: a 1-tuple, kept as the StepOutput's
    fork_token_ids: dict[str, list[int]] = field(default_factory=dict)
    # A columnar decode step (``DecodeColumns``): one token per row, in row order; ``token_ids`` stays empty.
    row_tokens: list[int] | None = None
    row_ids: list[str] | None = None

    def last_tokens(self) -> dict[str, int]:
        """Each request's last token this step (async scheduling fills placeholders with them)."""
        if self.row_tokens is not None:
            return dict(zip(self.row_ids, self.row_tokens))
        return {rid: tokens[-1] for rid, tokens in self.token_ids.items()}


@dataclass
class StepUpdate:
    """What ``update_from_output`` changed: outputs for the caller, events for observers, the
    requests that finished and the children that were forked (in order)."""

    outputs: Sequence[StepOutput] = field(default_factory=list)   # a columnar decode step: DecodeOutputs
    events: list = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    forked: list[Request] = field(default_factory=list)
    token_events: bool = True      # record TokensAppended events (False: nobody subscribes to them)
