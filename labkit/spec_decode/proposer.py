"""What a speculative proposer hands to the verifier.

A proposer guesses the next k tokens of a request cheaply; the target model then scores all of them
in one forward pass and the rejection sampler (``rejection_sampler.py``) keeps the longest prefix it
agrees with. Both proposers in labkit return the same small value:

    Proposal(token_ids=[x_0, ..., x_{k-1}], probs=q)     q: [k, vocab] or None

``probs`` is the draft distribution q_i each x_i was sampled from (the draft model's processed
softmax). A deterministic proposer such as n-gram lookup has no distribution; ``probs=None`` means
"point masses": q_i is one-hot at x_i, so the verifier accepts x_i with probability p_i(x_i).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from labkit.request import Request


@dataclass(frozen=True)
class Proposal:
    """Draft tokens for one request, and the distributions they were drawn from (if any)."""

    token_ids: list[int]
    probs: torch.Tensor | None = None  # [len(token_ids), vocab] or None (point masses)

    def __post_init__(self) -> None:
        if self.probs is None:
            return
        if self.probs.dim() != 2 or self.probs.shape[0] != len(self.token_ids):
            raise ValueError(f"probs must have shape [{len(self.token_ids)}, vocab] "
                             f"(one row per draft token), got {tuple(self.probs.shape)}")

    def __len__(self) -> int:
        return len(self.token_ids)


@runtime_checkable
class Proposer(Protocol):
    """What the engine asks of a proposer, once per step for every request in decode.

    ``propose`` returns one ``Proposal`` per request id it drafted for (a request it has no guess
    for may be left out); it never writes the requests: the scheduler stores the token ids, the
    sampler keeps the probabilities for verification. ``forget`` releases a request's state
    (finished, aborted or preempted).
    """

    def propose(self, requests: Sequence[Request]) -> dict[str, Proposal]: ...

    def forget(self, request_id: str) -> None: ...


def draft_budget(req: Request, k: int, max_model_len: int) -> int:
    """How many drafts are worth proposing: room for the drafts plus the bonus token, within
    ``max_tokens`` and ``max_model_len``."""
    remaining = min(req.sampling_params.max_tokens - len(req.output_token_ids), max_model_len - req.num_tokens)
    return max(0, min(k, remaining - 1))
