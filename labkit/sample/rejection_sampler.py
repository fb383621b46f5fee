"""Verify draft tokens against the target model: speculative rejection sampling.

Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1 and Appendix A.1; the same rule is Chen et al. 2023, "Accelerating Large Language Model
Decoding with Speculative Sampling", Algorithm 2. vLLM: ``vllm/v1/sample/rejection_sampler.py``.

One verification step for one request with k draft tokens::

    draft tokens (proposer):   x_0   x_1   x_2   x_3           x_i ~ q_i      k = 4
    target rows (one pass):    p_0   p_1   p_2   p_3   p_4     k + 1 rows of the target model
    accept test:               ok    ok    no                  stop at the first rejection
    output:                    x_0   x_1   y_2                 2 accepted + 1 recovered token
    ...or, all accepted:       x_0   x_1   x_2   x_3   b       4 accepted + 1 bonus token

Definitions (vLLM's names):

- **accepted token**: draft token x_i kept because u_i < p_i(x_i) / q_i(x_i), u_i ~ U[0, 1), i.e.
  with probability min(1, p_i(x_i) / q_i(x_i)), and every earlier draft token was accepted too.
- **recovered token**: at the first rejection i, y_i ~ r_i = normalise(max(0, p_i - q_i)); it
  replaces x_i and the step ends (the drafts after i were conditioned on x_i, so they are void).
- **bonus token**: when all k drafts are accepted, b ~ p_k, drawn from the extra target row that
  the verification pass computed anyway.

So each step emits between 1 and k + 1 tokens, never fewer than plain decoding.

Why the output is distributed exactly as p (Appendix A.1). Let alpha = sum_x min(p(x), q(x)),
the probability that a draft x ~ q is accepted. Then sum_x max(0, p(x) - q(x)) = 1 - alpha, and

    P(emit x) = q(x) * min(1, p(x)/q(x))  +  (1 - alpha) * max(0, p(x) - q(x)) / (1 - alpha)
              = min(p(x), q(x))           +  max(0, p(x) - q(x))                =  p(x).

Accepting a token leaves the next position in the same situation (x_{i+1} ~ q_{i+1} given the
accepted prefix, and p_{i+1} is the target's row for that prefix), so by induction every emitted
token has the target's distribution, whatever the draft model. Its quality only changes alpha,
i.e. how many tokens a step yields (see ``labkit.spec_decode.theory``). p and q must be the *processed*
distributions (after temperature, top-k, top-p), the ones plain sampling would draw from.

Greedy decoding (temperature 0) is the limit where p_i is one-hot at argmax p_i: x_i is accepted
iff it equals the argmax, and the recovered or bonus token is the argmax (``greedy_verify``).

Edge cases, defined here:

- ``draft_probs=None`` (n-gram and other deterministic proposers): q_i is one-hot at x_i, so x_i is
  accepted with probability p_i(x_i) and the recovered token is drawn from p_i with x_i removed.
- q_i(x_i) = 0 with ``draft_probs`` given cannot happen when x_i ~ q_i (a proposer bug). Such a
  token is rejected, as vLLM does. Likewise p_i(x_i) = 0 is never accepted.
- max(0, p_i - q_i) all zero after a rejection (only reachable through the bug above or rounding
  when p_i == q_i): the recovered token is drawn from p_i itself.

Randomness contract: a request draws exactly k + 1 uniforms, ``torch.rand(k + 1, dtype=float64,
generator=g)`` on the generator's device (CPU's default generator when g is None), whatever the
outcome: u_0 .. u_{k-1} decide the accept tests and u_k picks the recovered or bonus token by
inverse-CDF sampling. ``rejection_sample_batch`` draws the same numbers request by request, so it
returns exactly what calling ``rejection_sample`` on each request in order would return.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

TokenIds = Sequence[int] | torch.Tensor
Generators = torch.Generator | Sequence[torch.Generator | None] | None


# --- one request: the readable reference -------------------------------------------------------

def rejection_sample(draft_token_ids: TokenIds, draft_probs: torch.Tensor | None,
                     target_probs: torch.Tensor,
                     generator: torch.Generator | None = None) -> list[int]:
    """Accepted draft tokens followed by one recovered or bonus token (length 1 .. k+1).

    draft_token_ids: [k]; draft_probs: [k, vocab] or None (point masses); target_probs: [k+1, vocab].
    """
    drafts = _as_token_list(draft_token_ids, "draft_token_ids")
    k = len(drafts)
    vocab_size = _check_shapes(k, draft_probs, target_probs)
    _check_token_range(drafts, vocab_size)
    uniforms = draw_uniforms(k + 1, generator)  # [k+1]: k accept tests, then the final token
    accept_u, final_u = uniforms[:k].tolist(), uniforms[k:]
    output: list[int] = []
    for i, x in enumerate(drafts):
        p_x = float(target_probs[i, x])
        q_x = 1.0 if draft_probs is None else float(draft_probs[i, x])
        if _is_accepted(p_x, q_x, accept_u[i]):
            output.append(x)
            continue
        q_row = _one_hot(x, vocab_size, target_probs) if draft_probs is None else draft_probs[i]
        residual = residual_probs(target_probs[i:i + 1], q_row[None])  # [1, vocab]
        return output + inverse_cdf_sample(residual, final_u).tolist()  # recovered token
    bonus_row = target_probs[k:k + 1].double()  # [1, vocab]
    return output + inverse_cdf_sample(bonus_row, final_u).tolist()  # bonus token


def greedy_verify(draft_token_ids: TokenIds, target_probs_or_logits: torch.Tensor) -> list[int]:
    """Accept drafts while they equal the target argmax; then append the target argmax.

    target_probs_or_logits: [k+1, vocab] (argmax is the same for probabilities and logits; ties go
    to the lowest token id, as ``torch.argmax``).
    """
    drafts = _as_token_list(draft_token_ids, "draft_token_ids")
    vocab_size = _check_shapes(len(drafts), None, target_probs_or_logits, "target_probs_or_logits")
    _check_token_range(drafts, vocab_size)
    return _greedy_walk(drafts, target_probs_or_logits.argmax(dim=-1).tolist())


# --- many requests in one call: what the engine uses -----------------------------------------

def rejection_sample_batch(draft_token_ids: Sequence[TokenIds], draft_probs: torch.Tensor | None,
                           target_probs: torch.Tensor,
                           generators: Generators = None) -> list[list[int]]:
    """``rejection_sample`` for n requests at once, on flat tensors (vLLM's layout).

    draft_token_ids: n lists, request r has k_r drafts (k_r may be 0);
    draft_probs:  [sum k_r, vocab] rows in request order, or None (point masses for all);
    target_probs: [sum (k_r + 1), vocab], request r's k_r + 1 rows back to back;
    generators: one shared generator (or None) drawn from request by request, or one per request.
    """
    drafts = [_as_token_list(d, f"draft_token_ids[{r}]") for r, d in enumerate(draft_token_ids)]
    layout = _BatchLayout([len(d) for d in drafts], target_probs.device)
    vocab_size = _check_batch_shapes(layout, draft_probs, target_probs)
    flat_drafts = [x for d in drafts for x in d]
    _check_token_range(flat_drafts, vocab_size)
    accept_u, final_u = _draw_batch_uniforms(layout, generators, target_probs.device)
    draft_ids = torch.tensor(flat_drafts, dtype=torch.long, device=target_probs.device)
    num_accepted = _count_accepted(layout, draft_ids, draft_probs, target_probs, accept_u)
    final_tokens = _sample_final_tokens(layout, draft_ids, draft_probs, target_probs,
                                        num_accepted, final_u)
    return [d[:a] + [t] for d, a, t in zip(drafts, num_accepted.tolist(), final_tokens.tolist())]


def greedy_verify_batch(draft_token_ids: Sequence[TokenIds],
                        target_probs_or_logits: torch.Tensor) -> list[list[int]]:
    """``greedy_verify`` for n requests; target rows laid out as in ``rejection_sample_batch``."""
    drafts = [_as_token_list(d, f"draft_token_ids[{r}]") for r, d in enumerate(draft_token_ids)]
    layout = _BatchLayout([len(d) for d in drafts], target_probs_or_logits.device)
    vocab_size = _check_batch_shapes(layout, None, target_probs_or_logits, "target_probs_or_logits")
    _check_token_range([x for d in drafts for x in d], vocab_size)
    argmax = target_probs_or_logits.argmax(dim=-1).tolist()
    starts = layout.target_start.tolist()
    return [_greedy_walk(d, argmax[s:s + len(d) + 1]) for d, s in zip(drafts, starts)]


# --- shared pieces -----------------------------------------------------------------------------

def draw_uniforms(num: int, generator: torch.Generator | None) -> torch.Tensor:
    """The randomness of one request: ``num`` float64 uniforms in [0, 1)."""
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(num, dtype=torch.float64, device=device, generator=generator)


def residual_probs(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Unnormalised max(0, p - q) per row, in float64; rows where it is all zero fall back to p."""
    p, q = p.double(), q.double()  # [m, vocab] each
    residual = (p - q).clamp_min(0.0)
    empty = residual.sum(dim=-1, keepdim=True) <= 0.0
    return torch.where(empty, p, residual)


def inverse_cdf_sample(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row r's token: the first t with cumsum(weights[r])[t] > u[r] * sum(weights[r]).

    weights: [m, vocab], non-negative, need not sum to 1; u: [m] uniforms in [0, 1). Zero-weight
    tokens are never returned (the cumulative sum does not rise there). Computed in float64, where
    u * total < total for every u < 1 (in float32 a u near 1 rounds to 1.0, and the search would run
    past the last token that has weight). A row with no weight at all, which no caller passes
    (``residual_probs`` falls back to p), gives the last token.
    """
    cdf = weights.double().cumsum(dim=-1)  # [m, vocab]
    threshold = u.double() * cdf[:, -1]  # [m]
    token = torch.searchsorted(cdf, threshold[:, None], right=True).squeeze(-1)
    return token.clamp_max(weights.shape[-1] - 1)


def _is_accepted(p_x: float, q_x: float, u: float) -> bool:
    return q_x > 0.0 and u < p_x / q_x


def _greedy_walk(drafts: list[int], argmax: list[int]) -> list[int]:
    for i, x in enumerate(drafts):
        if x != argmax[i]:
            return drafts[:i] + [argmax[i]]
    return drafts + [argmax[len(drafts)]]


def _one_hot(token: int, vocab_size: int, like: torch.Tensor) -> torch.Tensor:
    row = torch.zeros(vocab_size, dtype=torch.float64, device=like.device)
    row[token] = 1.0
    return row


class _BatchLayout:
    """Where each request's rows sit in the flat tensors (vLLM: target/bonus logits indices).

    For k = [2, 0, 1]:   draft rows   0 1 | - | 2          target rows  0 1 2 | 3 | 4 5
                         draft_start  0,   2,  2            target_start 0,     3,  4
    """

    def __init__(self, num_draft: list[int], device: torch.device) -> None:
        self.num_requests = len(num_draft)
        self.num_draft = torch.tensor(num_draft, dtype=torch.long, device=device)  # [n]
        self.draft_start = torch.cumsum(self.num_draft, 0) - self.num_draft  # [n]
        self.target_start = self.draft_start + torch.arange(len(num_draft), device=device)  # [n]
        self.request_of_draft = torch.repeat_interleave(  # [sum k]
            torch.arange(len(num_draft), device=device), self.num_draft)
        self.total_draft = sum(num_draft)
        self.pos_of_draft = (torch.arange(self.total_draft, device=device)  # [sum k]
                             - self.draft_start[self.request_of_draft])
        self.target_row_of_draft = self.target_start[self.request_of_draft] + self.pos_of_draft


def _draw_batch_uniforms(layout: _BatchLayout, generators: Generators,
                         device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per request k_r + 1 uniforms, as ``rejection_sample`` draws them: accept tests + final.

    Laid out like the target rows, so request r's accept uniforms sit at its drafts' target rows
    and its final uniform at row target_start + k_r.
    """
    per_request = _per_request_generators(generators, layout.num_requests)
    draws = [draw_uniforms(k + 1, g).to(device)
             for k, g in zip(layout.num_draft.tolist(), per_request)]
    uniforms = torch.cat(draws) if draws else torch.empty(0, dtype=torch.float64, device=device)
    accept_u = uniforms[layout.target_row_of_draft]  # [sum k]
    final_u = uniforms[layout.target_start + layout.num_draft]  # [n]
    return accept_u, final_u


def _count_accepted(layout: _BatchLayout, draft_ids: torch.Tensor,
                    draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                    accept_u: torch.Tensor) -> torch.Tensor:
    """[n] number of leading accepted drafts per request (its first rejection position, or k)."""
    p_x = target_probs[layout.target_row_of_draft, draft_ids].double()  # [sum k]
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    else:
        q_x = draft_probs[torch.arange(layout.total_draft, device=draft_ids.device),
                          draft_ids].double()
    safe_q = torch.where(q_x > 0.0, q_x, torch.ones_like(q_x))
    accepted = (q_x > 0.0) & (accept_u < p_x / safe_q)  # same test as _is_accepted
    rejected = ~accepted
    return layout.num_draft.clone().scatter_reduce_(
        0, layout.request_of_draft[rejected], layout.pos_of_draft[rejected], reduce="amin")


def _sample_final_tokens(layout: _BatchLayout, draft_ids: torch.Tensor,
                         draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                         num_accepted: torch.Tensor, final_u: torch.Tensor) -> torch.Tensor:
    """[n] recovered token (request stopped at a rejection) or bonus token (all accepted).

    A bonus request keeps q = 0, so its residual max(0, p - 0) is p itself.
    """
    p = target_probs[layout.target_start + num_accepted]  # [n, vocab]
    q = torch.zeros(p.shape, dtype=torch.float64, device=p.device)  # [n, vocab]
    stopped = num_accepted < layout.num_draft  # [n]
    rejected_row = (layout.draft_start + num_accepted)[stopped]  # draft row of the rejected token
    if draft_probs is None:
        q[stopped.nonzero().squeeze(-1), draft_ids[rejected_row]] = 1.0
    else:
        q[stopped] = draft_probs[rejected_row].double()
    return inverse_cdf_sample(residual_probs(p, q), final_u)


def _per_request_generators(generators: Generators, n: int) -> list[torch.Generator | None]:
    if generators is None or isinstance(generators, torch.Generator):
        return [generators] * n
    generators = list(generators)
    if len(generators) != n:
        raise ValueError(f"generators must be one generator, None, or one per request "
                         f"({n}), got {len(generators)}")
    return generators


# --- validation --------------------------------------------------------------------------------

def _as_token_list(ids: TokenIds, name: str) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise ValueError(f"{name} must be a 1-D integer tensor [k], got shape "
                             f"{tuple(ids.shape)} dtype {ids.dtype}")
        return ids.tolist()
    if isinstance(ids, list) and all(type(x) is int for x in ids):
        return ids  # the common case, already clean
    try:
        return [operator.index(x) for x in ids]
    except TypeError:
        raise ValueError(f"{name} must be a flat list of int token ids, got {ids!r}") from None


def _check_shapes(k: int, draft_probs: torch.Tensor | None, target: torch.Tensor,
                  target_name: str = "target_probs") -> int:
    """Single-request shapes; returns vocab size."""
    if target.dim() != 2 or target.shape[0] != k + 1:
        raise ValueError(f"{target_name} must have shape [k+1, vocab] = [{k + 1}, vocab] for "
                         f"k={k} draft tokens, got {tuple(target.shape)}")
    _check_draft_probs(k, draft_probs, target.shape[1], "k")
    return target.shape[1]


def _check_batch_shapes(layout: _BatchLayout, draft_probs: torch.Tensor | None,
                        target: torch.Tensor, target_name: str = "target_probs") -> int:
    rows = layout.total_draft + layout.num_requests
    if target.dim() != 2 or target.shape[0] != rows:
        raise ValueError(f"{target_name} must have shape [sum(k)+n, vocab] = [{rows}, vocab], "
                         f"got {tuple(target.shape)}")
    _check_draft_probs(layout.total_draft, draft_probs, target.shape[1], "sum(k)")
    return target.shape[1]


def _check_draft_probs(rows: int, draft_probs: torch.Tensor | None, vocab_size: int,
                       rows_name: str) -> None:
    if draft_probs is None:
        return
    if draft_probs.dim() != 2 or tuple(draft_probs.shape) != (rows, vocab_size):
        raise ValueError(f"draft_probs must have shape [{rows_name}, vocab] = [{rows}, "
                         f"{vocab_size}] (vocab as in the target), got {tuple(draft_probs.shape)}")


def _check_token_range(token_ids: list[int], vocab_size: int) -> None:
    bad = [x for x in token_ids if not 0 <= x < vocab_size]
    if bad:
        raise ValueError(f"draft token ids must be in [0, {vocab_size}), got {bad[:5]}")
