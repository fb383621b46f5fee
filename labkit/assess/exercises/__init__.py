"""The exercises the labs use, by name. Each call builds a fresh ``Exercise`` (its own hint count).

    from labkit.assess import exercise
    ex = exercise("kv_bytes_per_token")

Hidden checks live in the modules beside this file, one per lab; reference solutions in
``labkit/assess/solutions/``.
"""

from __future__ import annotations

from typing import Callable

from labkit.assess.exercise import Exercise
from labkit.assess.exercises import batching, kv_cache, paged, speculative

EXERCISES: dict[str, Callable[[], Exercise]] = {
    "kv_bytes_per_token": kv_cache.kv_bytes_per_token_exercise,      # lab 01
    "first_fit_allocator": kv_cache.first_fit_allocator_exercise,    # lab 01
    "block_allocator": paged.block_allocator_exercise,               # lab 02
    "schedule_step": batching.schedule_step_exercise,                # lab 03
    "greedy_verify": speculative.greedy_verify_exercise,             # lab 04
    "rejection_verify": speculative.rejection_verify_exercise,       # lab 04
}


def exercise(name: str) -> Exercise:
    if name not in EXERCISES:
        raise ValueError(f"exercise must be one of {sorted(EXERCISES)}, got {name!r}")
    return EXERCISES[name]()
