"""How closely one engine's greedy output follows a reference's: the measure behind every
"approximation of the fp32 reference" statement (``weights="q4_1"``, bf16).

Greedy decoding is a chain: once one token differs, everything after it is conditioned on a
different text, so the useful numbers are whether a continuation is identical and where it first
leaves the reference.
"""

from __future__ import annotations

from dataclasses import dataclass


def first_divergence(reference: list[int], candidate: list[int]) -> int | None:
    """Index of the first token where ``candidate`` differs from ``reference``; None if identical."""
    for i, (a, b) in enumerate(zip(reference, candidate)):
        if a != b:
            return i
    return None if len(reference) == len(candidate) else min(len(reference), len(candidate))


@dataclass(frozen=True)
class Agreement:
    num_prompts: int
    num_identical: int
    mean_first_divergence: float   # over all prompts; an identical one counts as its full length
    divergences: tuple             # per prompt: first differing index, or None

    @property
    def identical_share(self) -> float:
        return self.num_identical / self.num_prompts if self.num_prompts else float("nan")

    def summary(self, tokens: int) -> str:
        return (f"{self.num_identical}/{self.num_prompts} prompts identical over {tokens} new tokens; "
                f"first differing token at position {self.mean_first_divergence:.1f} on average "
                f"(identical prompts count as {tokens})")


def greedy_agreement(references: list[list[int]], candidates: list[list[int]]) -> Agreement:
    """Compare per-prompt greedy continuations (same prompts, same order, same token budget)."""
    if len(references) != len(candidates):
        raise ValueError(f"references and candidates must pair up, got {len(references)} and {len(candidates)}")
    divs = tuple(first_divergence(r, c) for r, c in zip(references, candidates))
    positions = [len(r) if d is None else d for r, d in zip(references, divs)]
    mean = sum(positions) / len(positions) if positions else float("nan")
    return Agreement(len(divs), sum(d is None for d in divs), mean, divs)
