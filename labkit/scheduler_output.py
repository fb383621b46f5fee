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
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.kv import slots
from labkit.outputs import StepOutputs
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


@dataclass(slots=True)
class ScheduledRequest:
    """One row of a step, read as an object (``SchedulerOutput.row(i)`` / ``.scheduled``). The runner
    needs nothing else to compute it.

        positions  start ........... start + len(token_ids) - 1
        token_ids  the tokens whose K/V this step computes (prefill chunk, 1 decode token, or the
                   last output token followed by num_spec_tokens drafts to verify)
        slot_mapping[i]  where token i's K/V is written; block_table  where the context is read
    """

    request_id: str
    token_ids: tuple[int, ...]
    start: int                     # num_computed_tokens (and tokens in flight) before this step
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
class SchedulerOutput:
    """One step's whole decision, one entry per row in each column (row i is ``request_ids[i]``'s share)::

        request_ids   a        b        c            (running requests first, then admitted ones)
        starts        41       17       0            first position computed
        num_tokens    1        1        3            decode, decode, a prefill chunk
        token_ids     t41 t17 p0 p1 p2               every row's tokens back to back (the forward's input)
        block_tables  [7, 2]   [4]      [9]          the KV manager's tables (references, never copied)
        num_logits    1        1        0            logits rows wanted (1 + k when verifying k drafts)
        kinds         DECODE   DECODE   PREFILL

    ``num_spec``: the verification rows (row -> how many of its tokens are drafts). Columns, not an
    object per row: a step of 256 decode rows extends seven lists, and the runner's persistent
    batch reads them as they are. Every write (``add_row``, ``add_decode_rows``) leaves the columns whole.
    ``row(i)`` and ``scheduled`` give rows as ``ScheduledRequest`` objects for whoever reads them one by one."""

    block_size: int = 1          # of the layout the tables address (the KV manager's meta_block_size)
    request_ids: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    block_tables: list[Sequence[int]] = field(default_factory=list)
    num_logits: list[int] = field(default_factory=list)
    kinds: list[StepKind] = field(default_factory=list)
    num_spec: dict[int, int] = field(default_factory=dict)
    block_copies: list[tuple[int, int]] = field(default_factory=list)   # (src, dst): copy-on-write, before the step
    preempted: list[str] = field(default_factory=list)
    new_blocks: dict[str, list[int]] = field(default_factory=dict)
    prefix_hits: dict[str, int] = field(default_factory=dict)
    # How block tables changed since the last decision, named (``kv.table_changes``): the runner's persistent
    # batch applies exactly these to the copies it keeps (``model/input_batch.py``), as vLLM v1's runner applies
    # ``new_block_ids`` and ``resumed_from_preemption``.
    # ``admitted``: requests admitted from the waiting queue this step (new, or resumed after preemption):
    # their block table is new in full, whatever the runner remembers of an earlier one. The preempting step
    # may have had no rows, so no runner saw it.
    admitted: list[str] = field(default_factory=list)
    appended: dict[str, int] = field(default_factory=dict)    # rid -> j: table[j:] are blocks new at its end
    replaced: dict[str, int] = field(default_factory=dict)    # rid -> j: copy-on-write made table[j] a copy
    truncated: dict[str, int] = field(default_factory=dict)   # rid -> n: drafts rolled back, the table kept n
    idle: list[str] = field(default_factory=list)        # static batching: slots held by finished requests
    freed_blocks: dict[str, list[int]] = field(default_factory=dict)   # by preemption
    lost_tokens: dict[str, int] = field(default_factory=dict)          # computed tokens preemption dropped
    num_scheduled_tokens: int = 0      # len(token_ids): counted as the budget is spent

    # -- writing (the scheduler) -----------------------------------------------------------------
    def add_row(self, request_id: str, token_ids: Sequence[int], start: int, block_table: Sequence[int],
                kind: StepKind, num_logits: int, num_spec: int = 0) -> None:
        """One row, every column."""
        if num_spec:
            self.num_spec[len(self.request_ids)] = num_spec
        self.request_ids.append(request_id)
        self.starts.append(start)
        self.num_tokens.append(len(token_ids))
        self.token_ids += token_ids
        self.block_tables.append(block_table)
        self.num_logits.append(num_logits)
        self.kinds.append(kind)

    def add_decode_rows(self, request_ids: list[str], starts: list[int], token_ids: list[int],
                        block_tables: list[Sequence[int]]) -> None:
        """Steady decode rows in bulk, every column: row i is ``add_row(request_ids[i], (token_ids[i],),
        starts[i], block_tables[i], DECODE, 1)``. The fast scheduler gathers a run of them in plain lists
        and writes them here in one go (seven ``extend`` calls instead of seven appends per row)."""
        n = len(request_ids)
        self.request_ids += request_ids
        self.starts += starts
        self.num_tokens += [1] * n
        self.token_ids += token_ids
        self.block_tables += block_tables
        self.num_logits += [1] * n
        self.kinds += [DECODE] * n

    def close(self, num_scheduled_tokens: int) -> None:
        """The scheduler is done writing."""
        self.num_scheduled_tokens = num_scheduled_tokens

    # -- reading --------------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        return len(self.request_ids)

    @property
    def token_offsets(self) -> list[int]:
        """Where each row's tokens start in ``token_ids``, and the end (the forward's query_start_loc)."""
        return [0, *itertools.accumulate(self.num_tokens)]

    @property
    def logits_request_ids(self) -> list[str]:
        """Whose each logits row is, in the order the runner returns them."""
        return [rid for rid, k in zip(self.request_ids, self.num_logits) for _ in range(k)]

    def slot_mapping(self, i: int) -> list[int]:
        """Where row i's tokens' K/V go (``kv.slots.slot_mapping``)."""
        start = self.starts[i]
        return slots.slot_mapping(self.block_tables[i], start, start + self.num_tokens[i], self.block_size)

    def row(self, i: int, offset: int | None = None) -> ScheduledRequest:
        if offset is None:
            offset = sum(self.num_tokens[:i])
        return ScheduledRequest(self.request_ids[i], tuple(self.token_ids[offset:offset + self.num_tokens[i]]),
                                self.starts[i], self.num_spec.get(i, 0), self.kinds[i], self.block_tables[i],
                                self.slot_mapping(i), self.num_logits[i])

    @property
    def scheduled(self) -> list[ScheduledRequest]:
        """The rows as objects, in order (built when read)."""
        offsets = self.token_offsets
        return [self.row(i, offsets[i]) for i in range(self.num_rows)]

    @classmethod
    def from_rows(cls, rows: Sequence[ScheduledRequest], block_size: int = 1) -> "SchedulerOutput":
        """A decision holding ``rows`` (tests and tools that build rows by hand)."""
        out = cls(block_size)
        for s in rows:
            out.add_row(s.request_id, s.token_ids, s.start, s.block_table, s.kind, s.num_logits, s.num_spec_tokens)
        out.num_scheduled_tokens = len(out.token_ids)
        return out

    def fill_placeholders(self, sampled: "SampledTokens") -> None:
        """Async scheduling: put the previous step's sampled tokens into the decode rows planned before
        they existed (a ``PLACEHOLDER`` token, a decode row's only one: its request's last sampled token).
        Called once, before the runner sees the decision; afterwards it is complete, as a synchronous one."""
        tokens = self.token_ids
        num_placeholders = tokens.count(PLACEHOLDER)
        if not num_placeholders:
            return
        if num_placeholders == len(tokens) and self.request_ids == sampled.request_ids:
            tokens[:] = [t[-1] for t in sampled.token_ids]   # steady async decode: same requests, same order
        else:
            last, offsets = sampled.last_tokens(), self.token_offsets
            for i in range(self.num_rows):
                if tokens[offsets[i]] == PLACEHOLDER:
                    tokens[offsets[i]] = last[self.request_ids[i]]


_NONE: tuple[int, ...] = ()


@dataclass(frozen=True)
class SampledTokens:
    """What the sampler / verifier decided, as plain token ids, row by row of the decision it sampled.

    ``token_ids[i]``: the tokens row i's request gains this step (1 sampled token; or the accepted
    drafts followed by one recovered or bonus token; none for a mid-prompt chunk).
    ``fork_token_ids[rid]``: for a request with n > 1 that reached the end of its prompt, the first token
    of each child it forks, sampled from the same logits row with the child's own generator.
    """

    request_ids: list[str] = field(default_factory=list)
    token_ids: list[Sequence[int]] = field(default_factory=list)
    fork_token_ids: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, decision: SchedulerOutput, tokens: dict[str, Sequence[int]],
           forks: dict[str, list[int]] | None = None) -> "SampledTokens":
        """By request id (tests, and the engine dropping failed rows): rows not in ``tokens`` gain none."""
        return cls(decision.request_ids, [tuple(tokens.get(rid, _NONE)) for rid in decision.request_ids],
                   dict(forks or {}))

    def as_dict(self) -> dict[str, tuple[int, ...]]:
        return {rid: tuple(t) for rid, t in zip(self.request_ids, self.token_ids) if t}

    def last_tokens(self) -> dict[str, int]:
        """Each request's last token this step (async scheduling fills placeholders with them)."""
        return {rid: t[-1] for rid, t in zip(self.request_ids, self.token_ids) if t}


@dataclass
class StepUpdate:
    """What ``update_from_output`` changed: outputs for the caller, events for observers, the
    requests that finished and the children that were forked (in order)."""

    outputs: StepOutputs = field(default_factory=StepOutputs)
    events: list = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    forked: list[Request] = field(default_factory=list)
    token_events: bool = True      # record TokensAppended events (False: nobody subscribes to them)
