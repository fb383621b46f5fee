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
