"""How much speculative decoding should buy: the formulas of Leviathan et al. 2023, Section 3.

Notation (the paper's gamma is our k):

- alpha: expected acceptance rate, the probability that one draft token passes the accept test
  (Definition 3.1). Section 3.1 assumes it is the same at every position (i.i.d.).
- k: draft tokens per step.
- c: cost coefficient, time of one draft-model step / time of one target-model step
  (Definition 3.7). n-gram lookup has c close to 0; a draft model 10x smaller, maybe 0.05-0.2.

These are idealised: they ignore the verification pass being slower than a plain decode step, the
proposer's own overhead beyond c, and batching. Lab 04 compares them with measured step times.
"""

from __future__ import annotations

import torch


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E[tokens emitted per verification step] = (1 - alpha^(k+1)) / (1 - alpha).

    Section 3.1, Equation (1). The step emits token i+1 iff the first i drafts were accepted,
    probability alpha^i, so the expectation is 1 + alpha + ... + alpha^k: the sum is computed
    directly, which also gives the alpha = 1 limit k + 1 without dividing 0 by 0.
    """
    _check_alpha(alpha)
    _check_k(k)
    return float(sum(alpha ** i for i in range(k + 1)))


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Expected wall-time improvement = (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)).

    Section 3.3, Theorem 3.8: a step costs k draft runs plus one target run, (k c + 1) target-step
    units, and yields ``expected_tokens_per_step`` tokens where plain decoding yields 1 per unit.
    Below 1 means speculation slows decoding down (e.g. alpha = 0 gives 1 / (k c + 1)).
    """
    _check_c(c)
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def optimal_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in [0, k_max] with the largest ``expected_speedup`` (smallest k on ties).

    Section 3.5 (choosing gamma). k = 0 means "do not speculate": it wins exactly when no k >= 1
    beats plain decoding, which happens iff alpha <= c (Corollary 3.9: alpha > c suffices for a
    gain; conversely 1 + alpha + ... + alpha^k <= 1 + k c when alpha <= c).
    """
    _check_alpha(alpha)
    _check_c(c)
    _check_k(k_max, "k_max")
    return max(range(k_max + 1), key=lambda k: (expected_speedup(alpha, k, c), -k))


def acceptance_rate_from_probs(p, q) -> float | torch.Tensor:
    """alpha at one position = sum_x min(p(x), q(x)) = 1 - TV(p, q).

    Section 3.2, Corollary 3.6 (alpha = 1 - E[D_LK(p, q)], D_LK = total variation distance).
    p, q: target and draft distributions of the same shape [..., vocab]; returns a float for 1-D
    inputs, else a tensor with the vocab dimension summed out.
    """
    p, q = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    if p.shape != q.shape or p.dim() == 0:
        raise ValueError(f"p and q must have the same shape [..., vocab], got {tuple(p.shape)} "
                         f"and {tuple(q.shape)}")
    alpha = torch.minimum(p, q).sum(dim=-1)
    return float(alpha) if alpha.dim() == 0 else alpha


def _check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")


def _check_c(c: float) -> None:
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.0 <= c < float("inf"):
        raise ValueError(f"c must be a finite number >= 0, got {c!r}")


def _check_k(k: int, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"{name} must be an int >= 0, got {k!r}")
