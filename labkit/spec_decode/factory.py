"""Engine-side proposers: give each decoding request up to k draft tokens for the next step.

A proposer's ``propose(requests)`` sets ``request.spec_token_ids`` (and ``spec_probs`` when it has
draft probabilities). k is capped so drafts never run past ``max_tokens`` or ``max_model_len``:
if all drafts are accepted the bonus token must still fit.
"""

from __future__ import annotations

from labkit.config import SpecConfig
from labkit.request import Request
from labkit.spec_decode.ngram import NgramProposer


def draft_budget(req: Request, k: int, max_model_len: int) -> int:
    """How many drafts are worth proposing: room for the drafts plus the bonus token."""
    remaining = min(req.sampling_params.max_tokens - len(req.output_token_ids), max_model_len - req.num_tokens)
    return max(0, min(k, remaining - 1))


class NgramSpecProposer:
    """Prompt lookup: drafts are copied from the request's own history (no model, no probabilities,
    so the rejection sampler treats them as point masses)."""

    def __init__(self, spec: SpecConfig, max_model_len: int):
        self.k = spec.num_speculative_tokens
        self.max_model_len = max_model_len
        self.ngram = NgramProposer.from_config(spec)

    def propose(self, requests: list[Request]) -> None:
        for req in requests:
            k = draft_budget(req, self.k, self.max_model_len)
            req.spec_token_ids = self.ngram.propose(req.all_token_ids)[:k] if k else []
            req.spec_probs = None

    def forget(self, request_id: str) -> None:
        """Nothing per request to release."""


def make_proposer(spec: SpecConfig, engine):
    if spec.method == "ngram":
        return NgramSpecProposer(spec, engine.max_model_len)
    from labkit.spec_decode.draft_model import DraftModelProposer
    return DraftModelProposer(spec, engine)
