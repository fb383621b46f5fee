"""What one engine step tells its observers, assembled from the step's values: its ``StepStats``, the events
its decision implies, and its batch as ``BatchEntry`` rows (the values are defined in ``events.py``).

``LLMEngine`` only calls these at the end of a step, once the state is consistent::

    step_stats(...)          -> StepStats      counts, KV usage and waste, budget use, host and model seconds
    scheduling_events(...)   -> [Preempted, BlocksFreed, PrefixHit, BlocksAllocated, RequestScheduled ...]
    batch_entries(decision)  -> (BatchEntry ...)   the rows, then the idle slots of static batching
"""

from __future__ import annotations

from labkit import events as ev
from labkit.scheduler_output import IDLE, SchedulerOutput


def step_stats(step: int, decision: SchedulerOutput, scheduler, kv, config, host: dict[str, float],
               model_s: float, wait_s: float | None, simulated: bool) -> ev.StepStats:
    """``host``: seconds per host phase (``HostTimer.seconds``); ``host_s`` is their sum, the host's whole
    step but the forward pass (and, async, the wait for it: ``wait_s``)."""
    host_s = host["schedule"] + host["sample"] + host["update"] + host["propose"]
    waste = kv.waste(num_computed(scheduler), next_waiting_need(scheduler))
    return ev.StepStats(
        step=step, num_requests_running=len(scheduler.running),
        num_requests_waiting=len(scheduler.waiting), num_scheduled_tokens=decision.num_scheduled_tokens,
        kv_cache_usage_perc=100.0 * kv.usage(), kv_waste_perc=100.0 * waste.waste,
        kv_reserved_unused_perc=100.0 * waste.reserved_unused,
        kv_internal_frag_perc=100.0 * waste.internal, kv_external_frag_perc=100.0 * waste.external,
        batch_occupancy_perc=100.0 * decision.num_rows / config.max_num_seqs,
        token_budget_perc=100.0 * decision.num_scheduled_tokens / config.max_num_batched_tokens,
        num_preemptions=scheduler.num_preemptions, host_s=host_s, model_s=model_s,
        step_s=host_s + (model_s if wait_s is None else wait_s), simulated=simulated,
        schedule_s=host["schedule"], sample_s=host["sample"], propose_s=host["propose"])


def num_computed(scheduler) -> dict[str, int]:
    """Each running request's computed tokens (what the KV manager's waste and snapshot count as filled)."""
    return {r.request_id: r.num_computed_tokens for r in scheduler.running}


def next_waiting_need(scheduler) -> int:
    """Slots the first waiting request needs (what contiguous reservation must find free)."""
    if not scheduler.waiting:
        return 0
    req = scheduler.waiting[0]
    return min(req.max_total_tokens, scheduler.max_model_len)


def scheduling_events(decision: SchedulerOutput, step: int) -> list:
    """What the decision did to the KV cache and the queues, then one ``RequestScheduled`` per row."""
    events: list = []
    for rid, lost in decision.lost_tokens.items():
        events.append(ev.Preempted(rid, lost))
        events.append(ev.BlocksFreed(rid, tuple(decision.freed_blocks.get(rid, ()))))
    for rid, n in decision.prefix_hits.items():
        events.append(ev.PrefixHit(rid, n))
    for rid, blocks in decision.new_blocks.items():
        events.append(ev.BlocksAllocated(rid, tuple(blocks)))
    events += [ev.RequestScheduled(rid, step, n, kind)
               for rid, n, kind in zip(decision.request_ids, decision.num_tokens, decision.kinds)]
    return events


def batch_entries(decision: SchedulerOutput) -> tuple[ev.BatchEntry, ...]:
    """The step's batch, slot by slot: its rows, then the slots static batching holds idle."""
    entries = [ev.BatchEntry(rid, i, n, kind)
               for i, (rid, n, kind) in enumerate(zip(decision.request_ids, decision.num_tokens, decision.kinds))]
    entries += [ev.BatchEntry(rid, len(entries) + i, 0, IDLE) for i, rid in enumerate(decision.idle)]
    return tuple(entries)
