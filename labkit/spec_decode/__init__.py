"""Speculative decoding: proposers draft, the rejection sampler verifies, theory predicts the gain.

Engine-independent pieces (no model, no KV cache); the engine wires them into its step.
"""

from labkit.sample.rejection_sampler import (
    greedy_verify,
    greedy_verify_batch,
    rejection_sample,
    rejection_sample_batch,
)
from labkit.spec_decode.ngram import NgramProposer
from labkit.spec_decode.proposer import Proposal, Proposer
from labkit.spec_decode.theory import (
    acceptance_rate_from_probs,
    expected_speedup,
    expected_tokens_per_step,
    optimal_k,
)

__all__ = [
    "NgramProposer", "Proposal", "Proposer",
    "rejection_sample", "rejection_sample_batch", "greedy_verify", "greedy_verify_batch",
    "expected_tokens_per_step", "expected_speedup", "optimal_k", "acceptance_rate_from_probs",
]
