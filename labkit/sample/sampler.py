"""Turn logits into tokens: greedy, temperature, top-k, top-p, each request with its own generator.

The same ``to_probs`` transform produces the target distribution p that speculative decoding's
rejection sampler compares with the draft's q, so sampling and verification agree exactly.
"""

from __future__ import annotations

import torch

from labkit.sampling_params import SamplingParams


def to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits: [n, vocab] -> probabilities [n, vocab] after temperature, top-k and top-p.

    Greedy params give a one-hot distribution on the argmax.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already cover top_p (keeps at least one).
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits.softmax(-1)


def sample_tokens(logits: torch.Tensor, params: list[SamplingParams],
                  generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of logits [n, vocab]; greedy rows share a single argmax call."""
    tokens = logits.argmax(-1).tolist()
    for i, (p, gen) in enumerate(zip(params, generators)):
        if not p.greedy:
            probs = to_probs(logits[i:i + 1], p)
            tokens[i] = int(torch.multinomial(probs[0].cpu(), 1, generator=gen).item())
    return tokens
