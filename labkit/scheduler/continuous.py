"""Iteration-level (continuous) batching, vLLM v1 style.

Every step hands out a token budget (``max_num_batched_tokens``). Running requests come first, each
asking for ``num_tokens_with_spec - num_computed_tokens`` tokens (a prefill chunk, one decode token or
a verification run); then waiting requests join as long as there is budget, a free sequence slot and
KV space. A request finishing frees its slot for a new one at the very next step (Yu et al., Orca,
OSDI'22). When the pool runs dry, the most recently admitted running request is preempted: its blocks
are freed and it is recomputed later (its generated tokens are kept).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from labkit.config import EngineConfig
from labkit.request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    num_new_tokens: int       # tokens whose K/V this step computes (drafts included)
    num_spec_tokens: int      # how many of them are draft tokens being verified
    kind: str                 # prefill | decode | verify


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    new_blocks: dict[str, list[int]] = field(default_factory=dict)
    prefix_hits: dict[str, int] = field(default_factory=dict)
    idle: list[Request] = field(default_factory=list)   # static batching: slots held by finished requests
    freed_blocks: dict[str, list[int]] = field(default_factory=dict)   # by preemption
    lost_tokens: dict[str, int] = field(default_factory=dict)          # computed tokens preemption dropped

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)


def step_kind(req: Request, num_new: int, num_spec: int) -> str:
    if num_spec:
        return "verify"
    if num_new == 1 and req.output_token_ids and req.num_computed_tokens == req.num_tokens - 1:
        return "decode"
    return "prefill"


class ContinuousScheduler:
    def __init__(self, config: EngineConfig, kv_manager, max_model_len: int):
        self.config = config
        self.kv = kv_manager
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    # -- queue management -------------------------------------------------------------------
    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, req: Request) -> list[int]:
        """Remove a finished/aborted request and free its KV; returns the freed block ids."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        return self.kv.free(req.request_id)

    # -- one step ---------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted:
            self._schedule_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.num_tokens_with_spec - req.num_computed_tokens, budget,
                          self.max_model_len - req.num_computed_tokens)
            if num_new <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(req, num_new, out):
                break                         # req itself was preempted (it was the last one)
            num_spec = self._trim_spec(req, num_new)
            out.scheduled.append(ScheduledRequest(req, num_new, num_spec, step_kind(req, num_new, num_spec)))
            budget -= num_new
            i += 1
        return budget

    def _allocate_or_preempt(self, req: Request, num_new: int, out: SchedulerOutput) -> bool:
        while True:
            blocks = self.kv.allocate_slots(req.request_id, req.num_computed_tokens, num_new)
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
        req.num_computed_tokens = 0
        req.spec_token_ids, req.spec_probs = [], None
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        out.preempted.append(req)

    @staticmethod
    def _trim_spec(req: Request, num_new: int) -> int:
        """If the budget cut into the drafts, verify only the drafts that fit."""
        num_spec = max(0, num_new - (req.num_tokens - req.num_computed_tokens))
        if num_spec < len(req.spec_token_ids):
            req.spec_token_ids = req.spec_token_ids[:num_spec]
            if req.spec_probs is not None:
                req.spec_probs = req.spec_probs[:num_spec]
        return num_spec

    def _may_admit(self, req: Request) -> bool:
        """A request with n > 1 needs a slot for each sequence it will fork into."""
        num_seqs = sum(1 + r.num_forks_pending for r in self.running)
        return num_seqs + 1 + req.num_forks_pending <= self.config.max_num_seqs

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and self._may_admit(self.waiting[0]):
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
            self.running.append(req)
            if blocks:
                out.new_blocks.setdefault(req.request_id, []).extend(blocks)
            if num_cached:
                out.prefix_hits[req.request_id] = num_cached
            out.scheduled.append(ScheduledRequest(req, num_new, 0, step_kind(req, num_new, 0)))
            budget -= num_new
