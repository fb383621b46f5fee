"""The continuous scheduler's decision in one plain path: the rule to read (lab 03 shows it).

The engine runs ``ContinuousScheduler`` (``continuous.py``), which decides the same thing faster: its
running loop gathers steady decode rows (one token, a slot left in the last block) without asking the
KV manager to allocate, and writes them in bulk. Everything else (preemption, admission, the update
after the forward pass) is the same code, inherited. ``tests/engine/test_scheduler_reference.py`` holds the two
equal on random traces: every step's decision, column by column, and every request's tokens.
"""

from __future__ import annotations

from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler_output import SchedulerOutput


class ReferenceScheduler(ContinuousScheduler):
    def schedule(self, now: float) -> SchedulerOutput:
        """One step's decision, within a budget of ``max_num_batched_tokens`` tokens::

            running   oldest first: each gets the tokens it knows (or has in flight) but has not computed,
                      up to the budget and max_model_len; no blocks for them -> preempt the newest running
                      request (perhaps this one)
            waiting   in order, unless someone was preempted: while budget, a sequence slot and KV space
                      last, admit the next one, its prompt less its prefix-cache hit, up to the budget
        """
        out = SchedulerOutput(self.kv.meta_block_size)
        budget = self.config.max_num_batched_tokens
        for req in self.running:              # preemption pops from the end: the loop stops before those
            if budget <= 0:
                break
            num_output_planned = len(req.output_token_ids) + req.num_output_placeholders
            if req.num_output_placeholders and num_output_planned >= req.max_output_tokens:
                continue                      # async: its last token is in flight, it ends when applied
            start = req.num_scheduled_end     # computed, or computed by a step in flight
            num_new = min(req.num_tokens_planned + len(req.spec_token_ids) - start, budget,
                          self.max_model_len - start)
            table = self._allocate_or_preempt(req, start, num_new, out)
            if table is None:
                break                         # req itself was preempted (it was the newest)
            self._add_row(out, req, start, num_new, table)
            budget -= num_new
        num_seqs = sum(1 + r.num_forks_pending for r in self.running)     # n > 1: a slot per sequence
        while not out.preempted and self.waiting and budget > 0 and self._may_admit(self.waiting[0], num_seqs):
            req = self.waiting[0]
            hits, num_cached = self.kv.get_computed_blocks(req.request_id, req.all_token_ids)
            num_new = req.num_tokens - num_cached
            if num_new > budget and not self.config.enable_chunked_prefill:
                break                         # the whole prompt must fit one step
            num_new = min(num_new, budget)
            blocks = self.kv.allocate_slots(req.request_id, num_cached, num_new, hits,
                                            num_reserve_tokens=min(req.max_total_tokens, self.max_model_len))
            if blocks is None:
                break                         # no KV space: it keeps waiting
            self._admit(req, num_cached, num_new, blocks, now, out)
            num_seqs += 1 + req.num_forks_pending
            budget -= num_new
        out.close(self.config.max_num_batched_tokens - budget)
        out.block_copies = self.kv.take_pending_copies()
        out.appended, out.replaced, out.truncated = self.kv.take_table_changes()
        return out
