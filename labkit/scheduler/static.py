"""Request-level (static) batching: the baseline continuous batching replaced.

A batch is formed from the first ``max_num_seqs`` waiting requests. It runs until its *longest*
request ends; a request that finishes early keeps its slot, idle, and nobody joins mid-batch.
Those idle slot-steps are reported (``BatchEntry(kind="idle")``), not hidden — they are exactly
the throughput continuous batching wins back.

Prompts are not padded (attention is ragged), so the comparison isolates the scheduling policy.
"""

from __future__ import annotations

from labkit.request import Request
from labkit.scheduler.continuous import ContinuousScheduler, SchedulerOutput


class StaticScheduler(ContinuousScheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch: list[Request] = []

    def schedule(self) -> SchedulerOutput:
        if self.batch and all(r.is_finished for r in self.batch):
            self.batch = []
        if not self.batch:
            self.batch = list(self.waiting)[:self.config.max_num_seqs]
        out = super().schedule()
        out.idle = [r for r in self.batch if r.is_finished]
        return out

    def _may_admit(self, req: Request) -> bool:
        return any(req is member for member in self.batch)
