"""Lab 03 reference solution: one continuous-batching scheduling step under a token budget."""

from __future__ import annotations

from labkit.labs.lab03_batching.exercises import RequestState


def schedule_step(running: list[RequestState], waiting: list[RequestState],
                  max_num_batched_tokens: int, max_num_seqs: int) -> dict[str, int]:
    """Tokens to compute this step per request id (vLLM v1's ``num_scheduled_tokens``).

    Running requests first, in order, then waiting ones first-come first-served; each gets
    ``min(tokens it still needs, budget left)``, so a long prompt is prefilled in chunks. A waiting
    request is admitted only while running + admitted < ``max_num_seqs`` and budget remains.
    """
    budget, scheduled = max_num_batched_tokens, {}
    for request in running:
        if budget == 0:
            break
        scheduled[request.request_id] = min(request.num_tokens - request.num_computed_tokens, budget)
        budget -= scheduled[request.request_id]
    admitted = 0
    for request in waiting:
        if budget == 0 or len(running) + admitted >= max_num_seqs:
            break
        scheduled[request.request_id] = min(request.num_tokens - request.num_computed_tokens, budget)
        budget -= scheduled[request.request_id]
        admitted += 1
    return scheduled


def static_decode_occupancy(output_lens: list[int], max_num_seqs: int) -> float:
    """Busy decode slot-steps / all decode slot-steps, in percent, for static batches of ``max_num_seqs``
    in arrival order, each decoding until its longest request ends (the engine's own prediction:
    ``labkit.replay.static_decode_occupancy``)."""
    busy = total = 0
    for i in range(0, len(output_lens), max_num_seqs):
        batch = output_lens[i:i + max_num_seqs]
        busy += sum(o - 1 for o in batch)
        total += max_num_seqs * (max(batch) - 1)
    return 100.0 * busy / total if total else 0.0


def preemption_victims(running: list[tuple[str, int, int]], free_blocks: int,
                       blocks_needed: int) -> tuple[list[str], int]:
    """Preempt the most recently admitted first until ``blocks_needed`` blocks are free (recompute policy)."""
    victims, recompute = [], 0
    for request_id, num_computed, num_blocks in reversed(running):
        if free_blocks >= blocks_needed:
            break
        victims.append(request_id)
        recompute += num_computed
        free_blocks += num_blocks
    return victims, recompute
