"""Iteration-level (continuous) batching, vLLM v1 style.

Every step hands out a token budget (``max_num_batched_tokens``). Running requests come first, each
asking for ``num_tokens_with_spec - num_computed_tokens`` tokens (a prefill chunk, one decode token or
a verification run); then waiting requests join as long as there is budget, a free sequence slot and
KV space. A request finishing frees its slot for a new one at the very next step (Yu et al., Orca,
OSDI'22). When the pool runs dry, the most recently admitted running request is preempted: its blocks
are freed and it is recomputed later (its generated tokens are kept).

The scheduler owns the requests and the KV manager: ``schedule()`` decides and allocates;
``update_from_output()`` applies what the model and sampler produced (accepted tokens, rollback of
rejected drafts, prefix-cache registration, forks of parallel samples, finishing). Nothing else
writes either.

Async scheduling (``EngineConfig(async_scheduling=True)``) plans step N+1 before step N's tokens are
applied. Each row is counted in flight when it is scheduled (``Request.num_inflight_tokens``, and one
``num_output_placeholders`` when it yields a token) and moved to ``num_computed_tokens`` when applied,
so the next row starts at ``num_computed_tokens + num_inflight_tokens``::

    prompt ......... | o o o | t          t: step N's token, not applied yet (a placeholder)
    computed ......... |N row| N+1 row    N+1's decode row computes t's K/V; its token id is filled in
                                          from step N's sampled tokens before the forward starts

The decision is one shape whatever the runner does with it (``SchedulerOutput``: columns, a row per
scheduled request); the persistent batch (``EngineConfig(persistent_batch=True)``) is the runner's
business (``labkit/model/input_batch.py``), told by the decision how each table changed (admitted,
appended, replaced, truncated).

A request whose last token (``max_tokens``, ``max_model_len``) is in flight gets no row; one that stops
on a stop token in step N has already a row in step N+1: that forward is wasted, its token dropped.
"""

from __future__ import annotations

import itertools
from collections import deque

from labkit import events as ev
from labkit.config import EngineConfig
from labkit.request import Request, RequestStatus
from labkit.scheduler_output import (
    DECODE,
    PLACEHOLDER,
    PREFILL,
    VERIFY,
    SampledTokens,
    SchedulerOutput,
    StepKind,
    StepUpdate,
)

_PREEMPTED = RequestStatus.PREEMPTED
FINISHED_STOPPED, FINISHED_LENGTH = RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH


def step_kind(req: Request, start: int, num_new: int, num_spec: int, num_planned: int) -> StepKind:
    """``num_planned``: the request's known tokens plus those in flight, before this row."""
    if num_spec:
        return VERIFY
    if num_new == 1 and start == num_planned - 1 and num_planned > req.num_prompt_tokens:
        return DECODE
    return PREFILL


class ContinuousScheduler:
    def __init__(self, config: EngineConfig, kv_manager, max_model_len: int):
        self.config = config
        self.kv = kv_manager
        self.max_model_len = max_model_len
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.caching = config.enable_prefix_caching

    # -- queue management -------------------------------------------------------------------
    def add(self, req: Request) -> None:
        # Its last output token: max_tokens, or where max_model_len ends the sequence (prompt + output).
        req.max_output_tokens = min(req.sampling_params.max_tokens, self.max_model_len - req.num_prompt_tokens)
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def drop(self, request_id: str) -> None:
        """Forget a finished request (its output has been delivered)."""
        req = self.requests.get(request_id)
        if req is not None and req.is_finished:
            del self.requests[request_id]

    def set_drafts(self, drafts: dict[str, list[int]]) -> None:
        """Draft tokens the proposer made for running requests, verified at the next step."""
        for rid, token_ids in drafts.items():
            self.requests[rid].spec_token_ids = list(token_ids)

    def finish_request(self, req: Request, status: RequestStatus, now: float, update: StepUpdate) -> None:
        """End a request (stopped, length or aborted): free its slot and KV, record it in ``update``."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._finish(req, status, now, update)

    def _finish(self, req: Request, status: RequestStatus, now: float, update: StepUpdate) -> None:
        """All of finishing but leaving the queue: ``update_from_output`` drops the step's finished
        requests from ``running`` in one pass (a ``remove`` each would cost O(running) per request)."""
        req.status, req.finished_time, req.spec_token_ids = status, now, []
        freed = self.kv.free(req.request_id)
        if freed:
            update.events.append(ev.BlocksFreed(req.request_id, tuple(freed)))
        update.events.append(ev.RequestFinished(req.request_id, status.value, req.timings()))
        update.finished.append(req)

    # -- one step: decide ---------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        """This step's decision (``now``: the engine's clock, stamped on first-scheduled requests)."""
        out = SchedulerOutput(self.kv.meta_block_size)
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted and self.waiting:
            budget = self._schedule_waiting(out, budget, now)
        out.close(self.config.max_num_batched_tokens - budget)
        out.block_copies = self.kv.take_pending_copies()
        out.appended, out.replaced, out.truncated = self.kv.take_table_changes()
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Running requests first, in the order they were admitted: the first loop of
        ``ReferenceScheduler.schedule`` (``scheduler/reference.py``, the rule in one path), with a shortcut
        for the row of most steps. Each request asks for the tokens it knows (or has in flight) but has
        not computed (nor has in flight), within the budget and ``max_model_len``; when the pool cannot
        give a row its blocks, the newest running request is preempted (perhaps this one).

        Steady decode rows (one token, a slot left in the last block) skip the allocation call and
        ``_add_row``: they gather in four plain lists and reach ``out`` in one ``add_decode_rows``, before
        any other row and at the end, so the decision's columns are whole at every write. The decision is
        the reference's, row for row (``tests/engine/test_scheduler_reference.py``)."""
        running, max_model_len, decode_table = self.running, self.max_model_len, self.kv.decode_table
        ids, starts, tokens, tables = [], [], [], []      # steady decode rows not yet written to out
        add_id, add_start, add_token, add_table = ids.append, starts.append, tokens.append, tables.append
        for req in running:                   # preemption pops from the end: the loop stops before those
            if budget <= 0:
                break
            start = req.num_computed_tokens + req.num_inflight_tokens     # num_scheduled_end, inlined (hot)
            known, placeholders = req.all_token_ids, req.num_output_placeholders
            num_planned = len(known) + placeholders              # known, or to be appended by a step in flight
            if placeholders and len(req.output_token_ids) + placeholders >= req.max_output_tokens:
                continue                      # its last token is in flight: it ends when that is applied
            # Here start < max_model_len (a request whose sequence reached it has finished, or has its last
            # token in flight, above) and num_left >= 1 (a running request always knows a token it has not
            # computed nor has in flight: its last sampled one, or a placeholder for it).
            num_left = num_planned - start    # known or in flight, not computed nor in flight
            if (num_left == 1 and not req.spec_token_ids and (placeholders or req.output_token_ids)
                    and (table := decode_table(req.request_id, start)) is not None):
                # Steady decode: the last output token, for the next one, with a slot left in its last block.
                # Async: that token may be the one the step in flight is sampling (a placeholder, filled in
                # before launch).
                req.num_inflight_tokens += 1
                req.num_output_placeholders = placeholders + 1
                add_id(req.request_id)
                add_start(start)
                add_token(known[start] if start < len(known) else PLACEHOLDER)
                add_table(table)
                budget -= 1
                continue
            # So every row has at least one token (the budget is positive too); tests/sim_oracle.py checks it.
            num_new = min(num_left + len(req.spec_token_ids), budget, max_model_len - start)
            table = self._allocate_or_preempt(req, start, num_new, out)
            if table is None:
                break                         # req itself was preempted (it was the newest)
            if ids:                           # the decode rows before this one, in order
                out.add_decode_rows(ids, starts, tokens, tables)
                for column in (ids, starts, tokens, tables):
                    column.clear()
            self._add_row(out, req, start, num_new, table)
            budget -= num_new
        if ids:
            out.add_decode_rows(ids, starts, tokens, tables)
        return budget

    def _add_row(self, out: SchedulerOutput, req: Request, start: int, num_new: int, table) -> None:
        """This step's share of ``req`` (tokens ``start:start + num_new``), counted in flight."""
        num_spec = self._trim_spec(req, num_new) if req.spec_token_ids else 0
        planned = req.num_tokens_planned
        end = start + num_new
        req.num_inflight_tokens += num_new
        num_logits = 1 + num_spec if end == planned + len(req.spec_token_ids) else 0
        if num_logits:
            req.num_output_placeholders += 1
        kind = step_kind(req, start, num_new, num_spec, planned)
        if kind is DECODE and start >= req.num_tokens:     # async: the token the step in flight samples
            out.add_row(req.request_id, (PLACEHOLDER,), start, table, kind, num_logits)
        else:
            out.add_row(req.request_id, req.token_slice(start, end), start, table, kind, num_logits, num_spec)

    def _allocate_or_preempt(self, req: Request, start: int, num_new: int, out: SchedulerOutput):
        """Slots for tokens ``start:start + num_new`` of ``req``; returns its block table, or None when
        ``req`` itself had to be preempted. Newest-first preemption frees blocks until they fit."""
        rid = req.request_id
        while True:
            blocks = self.kv.allocate_slots(rid, start, num_new)
            if blocks is not None:
                if blocks:
                    out.new_blocks.setdefault(rid, []).extend(blocks)
                # The manager's own list: it never changes once handed out, so a step in flight (async)
                # may read it while the next is planned.
                return self.kv.block_table(rid)
            victim = self.running.pop()
            self._preempt(victim, out)
            if victim is req:
                return None

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        # A victim has no new blocks in this step: running requests are planned from the front and victims
        # taken from the back, so a victim is either not planned yet or the request whose allocation failed.
        out.freed_blocks[req.request_id] = self.kv.free(req.request_id)
        out.lost_tokens[req.request_id] = req.num_computed_tokens
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = req.num_inflight_tokens = 0   # a row in flight still brings its token
        req.spec_token_ids = []
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        out.preempted.append(req.request_id)

    @staticmethod
    def _trim_spec(req: Request, num_new: int) -> int:
        """If the budget cut into the drafts, verify only the drafts that fit (``req`` has drafts)."""
        num_spec = max(0, num_new - (req.num_tokens - req.num_computed_tokens))
        del req.spec_token_ids[num_spec:]
        return num_spec

    def _may_admit(self, req: Request, num_seqs: int) -> bool:
        """A request with n > 1 needs a slot for each sequence it will fork into."""
        return num_seqs + 1 + req.num_forks_pending <= self.config.max_num_seqs

    def _schedule_waiting(self, out: SchedulerOutput, budget: int, now: float) -> int:
        """Admit waiting requests in order while budget, sequence slots and KV space last; returns
        the budget left."""
        if len(self.running) >= self.config.max_num_seqs:
            return budget             # every sequence slot is taken (a busy server's usual step)
        num_seqs = sum(1 + r.num_forks_pending for r in self.running)   # slots taken, counted once
        while self.waiting and budget > 0 and self._may_admit(self.waiting[0], num_seqs):
            req = self.waiting[0]
            hits, num_cached = self.kv.get_computed_blocks(req.request_id, req.all_token_ids)
            num_new = req.num_tokens - num_cached
            if num_new > budget and not self.config.enable_chunked_prefill:
                break
            num_new = min(num_new, budget)
            blocks = self.kv.allocate_slots(req.request_id, num_cached, num_new, hits,
                                            num_reserve_tokens=min(req.max_total_tokens, self.max_model_len))
            if blocks is None:
                break
            self._admit(req, num_cached, num_new, blocks, now, out)
            num_seqs += 1 + req.num_forks_pending
            budget -= num_new
        return budget

    def _admit(self, req: Request, num_cached: int, num_new: int, blocks: list[int], now: float,
               out: SchedulerOutput) -> None:
        """Move the first waiting request to running, its first row tokens ``num_cached:num_cached + num_new``
        (``blocks``: the ones just allocated for it; ``num_cached``: its prefix-cache hit)."""
        self.waiting.popleft()
        self.kv.record_prefix_lookup(req.num_tokens, num_cached)
        req.num_computed_tokens = num_cached
        req.status = RequestStatus.RUNNING
        if req.first_scheduled_time is None:      # a preempted request keeps its first stamp
            req.first_scheduled_time = now
        self.running.append(req)
        out.admitted.append(req.request_id)
        if blocks:
            out.new_blocks.setdefault(req.request_id, []).extend(blocks)
        if num_cached:
            out.prefix_hits[req.request_id] = num_cached
        self._add_row(out, req, num_cached, num_new, self.kv.block_table(req.request_id))

    # -- one step: apply what the model produced ----------------------------------------------
    def update_from_output(self, out: SchedulerOutput, sampled: SampledTokens, now: float,
                           token_events: bool = True) -> StepUpdate:
        """The single place requests and KV change after the forward pass, row by row: count the
        computed tokens; roll back rejected drafts (and trim their blocks); fork the children of an
        n > 1 request; append tokens up to a stop; register full blocks in the prefix cache; finish
        what stopped. ``sampled``: the tokens of each row of ``out``, in order. ``token_events``: record
        a ``TokensAppended`` per request (the engine asks only when someone subscribes to them).

        Forked children come after the decision's rows, as rows of their own (their first token, no
        computed tokens to count), through the same loop: one place appends tokens and tests for a stop."""
        update = StepUpdate(token_events=token_events)
        outputs, events, finished = update.outputs, update.events, update.finished
        output_ids, output_tokens = outputs.request_ids.append, outputs.token_ids.append
        requests, forks = self.requests, sampled.fork_token_ids
        num_spec = {out.request_ids[i]: k for i, k in out.num_spec.items()}    # verification rows
        caching = self.caching
        rows = zip(out.request_ids, sampled.token_ids, out.num_tokens, out.num_logits)
        children: list = []                  # (child id, (first token,), 0, 0), added as parents fork
        if forks:
            rows = itertools.chain(rows, children)
        for rid, tokens, num_new, num_logits in rows:
            req = requests.get(rid)
            if req is None:
                continue                     # finished and released while this row was in flight (async)
            if num_logits:
                req.num_output_placeholders -= 1
            status = req.status
            if status is not _PREEMPTED:     # preempted meanwhile (async): its K/V is gone
                req.num_inflight_tokens -= num_new
                req.num_computed_tokens += num_new
            if not tokens or status.finished:
                continue                     # a mid-prompt chunk, or the wasted row after a stop (async)
            num_draft = self._verify(req, num_spec[rid], len(tokens) - 1, update) if rid in num_spec else 0
            if forks and rid in forks:
                children += self._fork(req, forks[rid], update)
            # Append tokens up to a stop: EOS or a stop token (finished, stopped), or its last output token
            # (max_output_tokens: max_tokens, or where max_model_len ends it; finished, length).
            output, known, stops = req.output_token_ids, req.all_token_ids, req.stop_token_ids
            max_output = req.max_output_tokens
            stop, before = None, len(output)
            for token in tokens:             # one, but for verification rows
                output.append(token)
                known.append(token)
                req.token_times.append(now)
                if token in stops:
                    stop = FINISHED_STOPPED
                elif len(output) >= max_output:
                    stop = FINISHED_LENGTH
                else:
                    continue
                tokens = tokens[:len(output) - before]
                break
            if token_events:
                events.append(ev.TokensAppended(rid, tuple(tokens), min(num_draft, len(tokens))))
            if caching:                      # before finishing frees them: full blocks stay reusable
                self.kv.cache_blocks(rid, known, req.num_computed_tokens)
            if stop is not None:
                self._finish(req, stop, now, update)     # still in running until the loop ends
                outputs.finish_reasons[len(outputs.request_ids)] = stop.value
            output_ids(rid)
            output_tokens(tokens)
        if finished:
            self.running = [r for r in self.running if not r.is_finished]
            if any(r.is_finished for r in self.waiting):     # async: preempted while its last row ran
                self.waiting = deque(r for r in self.waiting if not r.is_finished)
        return update

    def _verify(self, req: Request, num_spec: int, num_accepted: int, update: StepUpdate) -> int:
        """Roll back the rejected drafts: their K/V was computed, but they are not the sequence.
        Returns how many drafts were accepted (they lead the tokens appended this step)."""
        req.num_computed_tokens -= num_spec - num_accepted
        drafts, req.spec_token_ids = tuple(req.spec_token_ids[:num_spec]), []
        dropped = self.kv.trim(req.request_id, req.num_computed_tokens)
        if dropped:
            update.events.append(ev.BlocksFreed(req.request_id, tuple(dropped)))
        flags = tuple(i < num_accepted for i in range(num_spec))
        update.events.append(ev.SpecVerified(req.request_id, num_spec, num_accepted, flags, drafts))
        return num_accepted

    def _fork(self, parent: Request, first_tokens: list[int], update: StepUpdate) -> list[tuple]:
        """Parallel sampling: children share the parent's blocks (copy-on-write when one writes a
        shared block) and start from their own first token, sampled from the parent's last row. Returns
        the children's rows for ``update_from_output``: each child's first token, nothing computed."""
        # Async: the parent may have been preempted while its last prompt chunk ran; then the children
        # have no blocks to share and wait, like their parent, to be recomputed.
        preempted, rows = parent.status is RequestStatus.PREEMPTED, []
        for child_id, token in zip(parent.child_ids, first_tokens):
            child = Request(child_id, parent.prompt_token_ids, parent.sampling_params, parent.arrival_time,
                            eos_token_ids=parent.eos_token_ids,
                            status=RequestStatus.PREEMPTED if preempted else RequestStatus.RUNNING,
                            parent_id=parent.request_id,
                            num_computed_tokens=parent.num_computed_tokens,     # 0 if preempted (_preempt)
                            first_scheduled_time=parent.first_scheduled_time)
            child.max_output_tokens = parent.max_output_tokens
            self.requests[child_id] = child
            if preempted:
                self.waiting.appendleft(child)
            else:
                self.kv.fork(parent.request_id, child_id)
                self.running.append(child)
            update.forked.append(child)
            rows.append((child_id, (token,), 0, 0))
        parent.forked = True
        return rows
