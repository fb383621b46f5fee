"""Request-level (static) batching: the baseline continuous batching replaced.

A batch is formed from the first ``max_num_seqs`` waiting requests. It runs until its *longest*
request ends; a request that finishes early keeps its slot, idle, and nobody joins mid-batch.
Those idle slot-steps are reported (``BatchEntry(kind="idle")``), not hidden — they are exactly
the throughput continuous batching wins back.

Prompts are not padded (attention is ragged), so the comparison isolates the scheduling policy.
"""

from __future__ import annotations

from labkit.config import EngineConfig
from labkit.request import Request
from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler_output import SchedulerOutput


class StaticScheduler(ContinuousScheduler):
    def __init__(self, config: EngineConfig, kv_manager, max_model_len: int):
        super().__init__(config, kv_manager, max_model_len)
        self.batch: list[Request] = []

    def schedule(self, now: float) -> SchedulerOutput:
        self._adopt_forks()
        if self.batch and all(r.is_finished for r in self.batch):
            self.batch = []
        if not self.batch:
            self.batch = self._next_batch()
        out = super().schedule(now)
        out.idle = [r.request_id for r in self.batch if r.is_finished]
        return out

    def _next_batch(self) -> list[Request]:
        """Waiting requests in arrival order while their sequences (n each) fit ``max_num_seqs``."""
        batch, num_seqs = [], 0
        for req in self.waiting:
            num_seqs += 1 + req.num_forks_pending
            if num_seqs > self.config.max_num_seqs:
                break
            batch.append(req)
        return batch

    def _adopt_forks(self) -> None:
        """Parallel-sampling children belong to their parent's batch (they hold its slots)."""
        members = {r.request_id for r in self.batch}
        for req in [*self.running, *self.waiting]:
            if req.parent_id in members and req.request_id not in members:
                self.batch.append(req)
                members.add(req.request_id)

    def _may_admit(self, req: Request, num_seqs: int) -> bool:
        return any(req is member for member in self.batch)
