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

With the persistent batch (``EngineConfig(persistent_batch=True)``) a step whose rows are all steady decode
rows is handed over as columns (``DecodeColumns``) and applied from columns (``_update_decode``): the
common decode step builds no object per request. The same decision, read as rows, is ``out.scheduled``.

A request whose last token (``max_tokens``, ``max_model_len``) is in flight gets no row; one that stops
on a stop token in step N has already a row in step N+1: that forward is wasted, its token dropped.
"""

from __future__ import annotations

from collections import deque

from labkit import events as ev
from labkit.config import EngineConfig
from labkit.outputs import DecodeOutputs, StepOutput
from labkit.request import Request, RequestStatus
from labkit.scheduler_output import (
    DECODE,
    PLACEHOLDER,
    PREFILL,
    VERIFY,
    DecodeColumns,
    SampledTokens,
    ScheduledRequest,
    SchedulerOutput,
    StepKind,
    StepUpdate,
)

_PREEMPTED = RequestStatus.PREEMPTED
_RUNNING = RequestStatus.RUNNING


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
        # Persistent batch: a step of steady decode rows is handed over as columns (DecodeColumns), with
        # no row object per request; the first other row turns it into a list of rows.
        self.columnar = config.persistent_batch

    # -- queue management -------------------------------------------------------------------
    def add(self, req: Request) -> None:
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
        out = SchedulerOutput(columns=DecodeColumns(self.kv.meta_block_size) if self.columnar else None)
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted and self.waiting:
            budget = self._schedule_waiting(out, budget, now)
        out.num_scheduled_tokens = self.config.max_num_batched_tokens - budget
        out.block_copies = self.kv.take_pending_copies()
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            if out.columns is not None:       # persistent batch: runs of steady decode rows in one tight loop
                i, budget = self._schedule_decode_rows(out, i, budget)
                if i >= len(self.running) or budget <= 0:
                    break
            req = self.running[i]
            # Inline (every running request, every step): tokens known or in flight, less those computed
            # or in flight; capped by the budget and max_model_len.
            start = req.num_computed_tokens + req.num_inflight_tokens
            num_new = min(len(req.all_token_ids) + len(req.spec_token_ids) + req.num_output_placeholders - start,
                          budget, self.max_model_len - start)
            if req.num_output_placeholders and self._last_token_in_flight(req):
                num_new = 0                   # it ends when that token is applied: no wasted row
            if num_new <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(req, num_new, out):
                break                         # req itself was preempted (it was the last one)
            self._add_row(out, req, num_new, self._trim_spec(req, num_new) if req.spec_token_ids else 0, start)
            budget -= num_new
            i += 1
        return budget

    def _schedule_decode_rows(self, out: SchedulerOutput, i: int, budget: int) -> tuple[int, int]:
        """The common case of ``_schedule_running`` with the persistent batch, in one loop with no call per
        request (but ``decode_table``): running requests from ``i`` on whose next row is a steady decode
        row go into the columns exactly as ``_allocate_or_preempt`` + ``_add_row`` would put them (the
        same row, blocks and in-flight counts). Returns (the first request it leaves to the general path,
        the budget left): one that prefills, verifies drafts, or needs a block the pool cannot give."""
        running, max_model_len, decode_table = self.running, self.max_model_len, self.kv.decode_table
        cols = out.columns
        rids, tokens, starts, tables = cols.request_ids, cols.token_ids, cols.starts, cols.block_tables
        n = len(running)
        while i < n and budget > 0:
            req = running[i]
            start = req.num_computed_tokens + req.num_inflight_tokens
            known = req.all_token_ids
            num_known, placeholders = len(known), req.num_output_placeholders
            # Steady decode: one token to compute (the last one known or in flight), no drafts, room in
            # max_model_len, past the prompt (an output token, or one in flight).
            if (num_known + placeholders - start != 1 or req.spec_token_ids or start >= max_model_len
                    or not (placeholders or req.output_token_ids)):
                break
            if placeholders and (len(req.output_token_ids) + placeholders >= req.sampling_params.max_tokens
                                 or num_known + placeholders >= max_model_len):
                i += 1                        # _last_token_in_flight: it ends when that token is applied
                continue
            rid = req.request_id
            table = decode_table(rid, start)
            if table is None:                 # a new block (or a copy): _allocate_or_preempt's success path
                blocks = self.kv.allocate_slots(rid, start, 1)
                if blocks is None:
                    break                     # the pool is dry: preemption, in the general path
                if blocks:
                    out.new_blocks.setdefault(rid, []).extend(blocks)
                table = self.kv.block_table(rid)
            req.num_inflight_tokens += 1
            req.num_output_placeholders = placeholders + 1
            if start < num_known:
                tokens.append(known[start])
            else:                             # async: the token the step in flight is sampling
                out.placeholder_rows.append(len(rids))
                tokens.append(PLACEHOLDER)
            rids.append(rid)
            starts.append(start)
            tables.append(table)
            budget -= 1
            i += 1
        return i, budget

    def _last_token_in_flight(self, req: Request) -> bool:
        return (len(req.output_token_ids) + req.num_output_placeholders >= req.sampling_params.max_tokens
                or req.num_tokens_planned >= self.max_model_len)

    def _add_row(self, out: SchedulerOutput, req: Request, num_new: int, num_spec: int, start: int | None = None) -> None:
        """This step's share of ``req``, with everything the runner needs to compute it; counted in flight.
        ``start``: ``num_computed_tokens + num_inflight_tokens``, when the caller has it already."""
        if start is None:
            start = req.num_computed_tokens + req.num_inflight_tokens
        rid = req.request_id
        planned = len(req.all_token_ids) + req.num_output_placeholders     # num_tokens_planned
        # The manager's own list: it never changes once handed out, so a step in flight (async) may read
        # it while the next is planned.
        table = self.kv.block_table(rid)
        req.num_inflight_tokens += num_new
        if num_new == 1 and not num_spec and start == planned - 1 and (req.output_token_ids or req.num_output_placeholders):
            # Steady decode, most rows of most steps: the last output token, one K/V slot, one logits row.
            # Async: that token may be the one the step in flight is sampling (filled in before launch).
            req.num_output_placeholders += 1
            if start < len(req.all_token_ids):
                token = req.all_token_ids[start]
            else:
                token = PLACEHOLDER
                out.placeholder_rows.append(out.num_rows)
            cols = out.columns
            if cols is not None:
                cols.request_ids.append(rid)
                cols.token_ids.append(token)
                cols.starts.append(start)
                cols.block_tables.append(table)
            else:
                out.rows.append(ScheduledRequest(rid, (token,), start, 0, DECODE, table,
                                                 (self.kv.slot(rid, start),), 1))
            return
        end = start + num_new
        tokens = req.token_slice(start, end)
        num_logits = 1 + num_spec if end == planned + len(req.spec_token_ids) else 0
        if num_logits:
            req.num_output_placeholders += 1
        out.add_row(ScheduledRequest(rid, tuple(tokens), start, num_spec,
                                     step_kind(req, start, num_new, num_spec, planned), table,
                                     self.kv.slot_mapping(rid, start, end), num_logits))

    def _allocate_or_preempt(self, req: Request, num_new: int, out: SchedulerOutput) -> bool:
        while True:
            blocks = self.kv.allocate_slots(req.request_id, req.num_computed_tokens + req.num_inflight_tokens, num_new)
            if blocks is not None:
                if blocks:
                    out.new_blocks.setdefault(req.request_id, []).extend(blocks)
                return True
            victim = self.running.pop()
            self._preempt(victim, out)
            if victim is req:
                return False

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        out.freed_blocks[req.request_id] = self.kv.free(req.request_id)
        out.new_blocks.pop(req.request_id, None)
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
        """If the budget cut into the drafts, verify only the drafts that fit."""
        if not req.spec_token_ids:
            return 0
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
            self.waiting.popleft()
            self.kv.record_prefix_lookup(req.num_tokens, num_cached)
            req.num_computed_tokens = num_cached
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_time is None:      # a preempted request keeps its first stamp
                req.first_scheduled_time = now
            self.running.append(req)
            out.admitted.append(req.request_id)
            num_seqs += 1 + req.num_forks_pending
            if blocks:
                out.new_blocks.setdefault(req.request_id, []).extend(blocks)
            if num_cached:
                out.prefix_hits[req.request_id] = num_cached
            self._add_row(out, req, num_new, 0)
            budget -= num_new
        return budget

    # -- one step: apply what the model produced ----------------------------------------------
    def update_from_output(self, out: SchedulerOutput, sampled: SampledTokens, now: float,
                           token_events: bool = True) -> StepUpdate:
        """The single place requests and KV change after the forward pass, request by request:
        count the computed tokens; roll back rejected drafts (and trim their blocks); fork the
        children of an n > 1 request; append tokens up to a stop; register full blocks in the
        prefix cache; finish what stopped. ``token_events``: record a ``TokensAppended`` per
        request (the engine asks only when someone subscribes to them)."""
        update = StepUpdate(token_events=token_events)
        if out.columns is not None and sampled.row_tokens is not None:
            self._update_decode(out.columns, sampled.row_tokens, now, update)
            return update
        for s in out.scheduled:
            req = self.requests.get(s.request_id)
            if req is None:
                continue                     # finished and released while this row was in flight (async)
            if s.num_logits:
                req.num_output_placeholders -= 1
            if req.status is not _PREEMPTED:     # preempted meanwhile (async): its K/V is gone
                num_new = len(s.token_ids)
                req.num_inflight_tokens -= num_new
                req.num_computed_tokens += num_new
            tokens = sampled.token_ids.get(s.request_id)
            if tokens is None or req.is_finished:
                continue                     # a mid-prompt chunk, or the wasted row after a stop (async)
            num_draft = self._verify(req, s.num_spec_tokens, len(tokens) - 1, update) if s.num_spec_tokens else 0
            if s.request_id in sampled.fork_token_ids:
                self._fork(req, sampled.fork_token_ids[s.request_id], now, update)
            update.outputs.append(self._append(req, tokens, now, num_draft, update))
        if update.finished:
            self.running = [r for r in self.running if not r.is_finished]
            if any(r.is_finished for r in self.waiting):     # async: preempted while its last row ran
                self.waiting = deque(r for r in self.waiting if not r.is_finished)
        return update

    def _update_decode(self, cols: DecodeColumns, tokens: list[int], now: float, update: StepUpdate) -> None:
        """``update_from_output`` for a columnar step of steady decode rows (one token each): the same
        changes, with no row object, token tuple or ``StepOutput`` per request (``DecodeOutputs``)."""
        requests, max_model_len = self.requests, self.max_model_len
        caching, token_events = self.config.enable_prefix_caching, update.token_events
        reasons: dict[int, str] = {}
        skipped: list[int] = []
        for i, (rid, token) in enumerate(zip(cols.request_ids, tokens)):
            req = requests.get(rid)
            if req is None:
                skipped.append(i)            # finished and released while this row was in flight (async)
                continue
            req.num_output_placeholders -= 1
            status = req.status
            if status is _RUNNING:           # most rows: one test instead of two
                req.num_inflight_tokens -= 1
                req.num_computed_tokens += 1
            else:
                if status is not _PREEMPTED:
                    req.num_inflight_tokens -= 1
                    req.num_computed_tokens += 1
                if status.finished:
                    skipped.append(i)        # the wasted row after a stop (async)
                    continue
            output = req.output_token_ids
            output.append(token)
            req.all_token_ids.append(token)
            req.token_times.append(now)
            if req.first_token_time is None:
                req.first_token_time = now
            if token_events:
                update.events.append(ev.TokensAppended(rid, (token,), 0))
            if caching:                      # before finishing frees them: full blocks stay reusable
                self.kv.cache_blocks(rid, req.all_token_ids, req.num_computed_tokens)
            if token in req.stop_token_ids:
                status = RequestStatus.FINISHED_STOPPED
            elif len(output) >= req.sampling_params.max_tokens or len(req.all_token_ids) >= max_model_len:
                status = RequestStatus.FINISHED_LENGTH
            else:
                continue
            self._finish(req, status, now, update)
            reasons[i] = status.value
        outputs = DecodeOutputs(cols.request_ids, tokens, reasons)
        if skipped:
            gone = set(skipped)
            update.outputs = [out for i, out in enumerate(outputs) if i not in gone]
        else:
            update.outputs = outputs
        if update.finished:
            self.running = [r for r in self.running if not r.is_finished]
            if any(r.is_finished for r in self.waiting):
                self.waiting = deque(r for r in self.waiting if not r.is_finished)

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

    def _fork(self, parent: Request, first_tokens: list[int], now: float, update: StepUpdate) -> None:
        """Parallel sampling: children share the parent's blocks (copy-on-write when one writes a
        shared block) and start from their own first token, sampled from the parent's last row."""
        # Async: the parent may have been preempted while its last prompt chunk ran; then the children
        # have no blocks to share and wait, like their parent, to be recomputed.
        preempted = parent.status is RequestStatus.PREEMPTED
        for child_id, token in zip(parent.child_ids, first_tokens):
            child = Request(child_id, parent.prompt_token_ids, parent.sampling_params, parent.arrival_time,
                            eos_token_ids=parent.eos_token_ids,
                            status=RequestStatus.PREEMPTED if preempted else RequestStatus.RUNNING,
                            parent_id=parent.request_id,
                            num_computed_tokens=0 if preempted else parent.num_computed_tokens,
                            first_scheduled_time=parent.first_scheduled_time)
            self.requests[child_id] = child
            if preempted:
                self.waiting.appendleft(child)
            else:
                self.kv.fork(parent.request_id, child_id)
                self.running.append(child)
            update.forked.append(child)
            update.outputs.append(self._append(child, [token], now, 0, update))
        parent.forked = True

    def _append(self, req: Request, tokens: list[int], now: float, num_draft: int,
                update: StepUpdate) -> StepOutput:
        """Append tokens, stopping at EOS / stop tokens / max_tokens / max_model_len."""
        status = None
        for i, token in enumerate(tokens):
            req.append_output(token, now)
            status = self._stop_status(req, token)
            if status is not None:
                tokens = tokens[:i + 1]
                break
        added = tuple(tokens)
        if update.token_events:
            update.events.append(ev.TokensAppended(req.request_id, added, min(num_draft, len(added))))
        if self.config.enable_prefix_caching:   # before finishing frees them: full blocks stay reusable
            self.kv.cache_blocks(req.request_id, req.all_token_ids, req.num_computed_tokens)
        if status is None:
            return StepOutput(req.request_id, added, False, None)
        self._finish(req, status, now, update)      # still in running until update_from_output ends
        return StepOutput(req.request_id, added, True, status.value)

    def _stop_status(self, req: Request, token: int) -> RequestStatus | None:
        if token in req.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if len(req.output_token_ids) >= req.sampling_params.max_tokens or len(req.all_token_ids) >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None
