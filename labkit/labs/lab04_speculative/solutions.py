"""Lab 04 reference solutions: the verify step of speculative decoding (greedy and sampled)."""

from __future__ import annotations

import random


def greedy_verify(draft_token_ids: list[int], target_token_ids: list[int]) -> list[int]:
    """Accept drafts while they equal the target's argmax; then add the target's own token.

    ``target_token_ids`` has k + 1 entries: the target's argmax after each draft prefix, the
    last one after all k drafts. The result has 1 to k + 1 tokens: the accepted drafts plus
    either the target's token at the first mismatch (recovered) or after all k (bonus).
    """
    output = []
    for draft, target in zip(draft_token_ids, target_token_ids):
        if draft != target:
            break
        output.append(draft)
    output.append(target_token_ids[len(output)])
    return output


def _sample(probs: list[float], rng: random.Random) -> int:
    return rng.choices(range(len(probs)), weights=probs)[0]


def rejection_verify(draft_token_ids: list[int], draft_probs: list[list[float]],
                     target_probs: list[list[float]], rng: random.Random) -> list[int]:
    """Speculative sampling (Leviathan et al. 2023, §2.3): output tokens are distributed as p.

    At position i accept draft x with probability min(1, p_i(x) / q_i(x)); at the first rejection
    emit a token from normalise(max(0, p_i − q_i)) and stop; if all k are accepted emit a bonus
    token from p_k. ``draft_probs`` has k rows (q), ``target_probs`` k + 1 rows (p).
    """
    output = []
    for i, x in enumerate(draft_token_ids):
        p, q = target_probs[i], draft_probs[i]
        if rng.random() < min(1.0, p[x] / q[x]):
            output.append(x)
            continue
        residual = [max(0.0, pi - qi) for pi, qi in zip(p, q)]
        output.append(_sample(residual, rng))
        return output
    output.append(_sample(target_probs[len(draft_token_ids)], rng))
    return output


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Leviathan et al. 2023, Eq. (1): 1 + α + α² + … + α^k = (1 − α^(k+1)) / (1 − α).

    Token i + 1 of a step is emitted iff the first i drafts were all accepted (probability α^i);
    the sum form also covers α = 1 (k + 1 tokens) without dividing by zero.
    """
    return sum(alpha ** i for i in range(k + 1))


def best_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in 0..k_max with the largest expected speed-up E[tokens] / (k·c + 1) (Theorem 3.8);
    the smallest such k on ties. k = 0 means: do not speculate."""
    return max(range(k_max + 1), key=lambda k: (expected_tokens_per_step(alpha, k) / (k * c + 1), -k))


def ngram_propose(token_ids: list[int], k: int, n: int) -> list[int]:
    """Prompt lookup: if the last n tokens occurred earlier, propose up to k tokens that followed
    their most recent earlier occurrence; else []."""
    if len(token_ids) <= n:
        return []
    suffix = token_ids[-n:]
    for start in range(len(token_ids) - n - 1, -1, -1):    # most recent first, never the suffix itself
        if token_ids[start:start + n] == suffix:
            return token_ids[start + n:start + n + k]
    return []
