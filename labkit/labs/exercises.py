"""The exercises the labs use, by name. Each call builds a fresh ``Exercise`` (its own hint count).

    from labkit.labs.exercises import exercise
    ex = exercise("kv_bytes_per_token")

Each lab package holds its exercises' hidden checks (``exercises.py``) and reference solutions
(``solutions.py``); this registry names them. It sits above ``labkit.assess`` (the machinery), so
the machinery never imports lab content.
"""

from __future__ import annotations

from typing import Callable

from labkit.assess.exercise import Exercise
from labkit.labs.lab01_kv_cache import exercises as kv_cache
from labkit.labs.lab02_paged_attention import exercises as paged
from labkit.labs.lab03_batching import exercises as batching
from labkit.labs.lab04_speculative import exercises as speculative
from labkit.labs.lab05_engine_choice import exercises as engine_choice

EXERCISES: dict[str, Callable[[], Exercise]] = {
    "kv_bytes_per_token": kv_cache.kv_bytes_per_token_exercise,      # lab 01
    "first_fit_allocator": kv_cache.first_fit_allocator_exercise,    # lab 01
    "block_allocator": paged.block_allocator_exercise,               # lab 02
    "slot_mapping": paged.slot_mapping_exercise,                     # lab 02
    "prefix_hash": paged.prefix_hash_exercise,                       # lab 02
    "schedule_step": batching.schedule_step_exercise,                # lab 03
    "static_occupancy": batching.static_occupancy_exercise,          # lab 03
    "preemption_victims": batching.preemption_victims_exercise,      # lab 03
    "greedy_verify": speculative.greedy_verify_exercise,             # lab 04
    "rejection_verify": speculative.rejection_verify_exercise,       # lab 04
    "expected_tokens_per_step": speculative.expected_tokens_exercise,  # lab 04
    "best_k": speculative.best_k_exercise,                           # lab 04
    "ngram_propose": speculative.ngram_propose_exercise,             # lab 04 (optional)
    "goodput_p99": engine_choice.goodput_exercise,                   # lab 05 (result_path=...)
    "pick_config": engine_choice.pick_config_exercise,               # lab 05 (table=...)
}


def exercise(name: str, **inputs) -> Exercise:
    """``inputs`` hand the learner's own data to exercises that check against it (lab 05)."""
    if name not in EXERCISES:
        raise ValueError(f"exercise must be one of {sorted(EXERCISES)}, got {name!r}")
    return EXERCISES[name](**inputs)


def checked_or_reference(result, learner_cls, exercise) -> tuple[type, bool]:
    """(the learner's class, True) if ``exercise.check`` passed, else (the reference, False).

    Learner code that has not passed its checks is never run outside the sandbox: it could loop
    forever and hang the kernel, which the checks' time limit would have caught.
    """
    if result.passed:
        return learner_cls, True
    return exercise.reference_solution(), False
