"""N-gram proposer: prompt lookup decoding (Saxena 2023; vLLM's ``method="ngram"``).

No draft model: the request's own tokens are the draft. If the last n tokens appeared earlier,
guess that what followed them then follows them again (code edits, quoting, summaries of the
prompt, repeated boilerplate)::

    token_ids:  ... A B C D E ...................... A B C | ?      suffix "A B C" (n = 3)
                    └ match ┘ └─┬─┘                  └ suffix ┘
                                propose "D E" (up to k tokens that followed the match)

Rule: take the longest n in [min_n, max_n] whose suffix occurs earlier; among its occurrences take
the most recent one; propose up to k tokens that followed it (fewer when the sequence ends first;
``[]`` when no n matches). Proposals are point masses (``Proposal.probs is None``).

Cost per call: O(L * max_n) vectorised numpy comparisons and O(L) memory for L tokens (one pass
over the sequence per suffix position, all n at once), plus O(L) to convert a Python list to an
array. At L = 4096, max_n = 4 that is well under a millisecond on a 2-core CPU (dominated by the
list conversion; pass a numpy array to skip it), small next to a model step, so no incremental
index is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from labkit.config import SpecConfig
from labkit.request import Request
from labkit.spec_decode.proposer import Proposal, draft_budget


class NgramProposer:
    """Prompt lookup: propose the continuation of the most recent earlier match of the suffix."""

    def __init__(self, k: int, min_n: int = 2, max_n: int = 4) -> None:
        for name, value in (("k", k), ("min_n", min_n), ("max_n", max_n)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if max_n < min_n:
            raise ValueError(f"max_n must be >= min_n, got {max_n} < {min_n}")
        self.k, self.min_n, self.max_n = k, min_n, max_n

    @classmethod
    def from_config(cls, spec: SpecConfig) -> NgramProposer:
        return cls(spec.num_speculative_tokens, spec.prompt_lookup_min, spec.prompt_lookup_max)

    def propose(self, token_ids: Sequence[int]) -> list[int]:
        """Up to k draft tokens for a request whose tokens so far are ``token_ids``."""
        tokens = np.asarray(token_ids, dtype=np.int64)
        match_len = suffix_match_lengths(tokens, self.max_n)
        if match_len.size == 0 or match_len.max() < self.min_n:
            return []
        end = int(np.flatnonzero(match_len == match_len.max())[-1])  # most recent longest match
        return tokens[end + 1:end + 1 + self.k].tolist()



def suffix_match_lengths(tokens: np.ndarray, max_n: int) -> np.ndarray:
    """For each earlier end position e in [0, L-2]: how many of the last tokens match there.

    ``match[e]`` is the largest n <= max_n with ``tokens[e-n+1 : e+1] == tokens[L-n : L]``
    (0 if ``tokens[e] != tokens[L-1]``). Ends stop at L-2 so a match always has a continuation.
    """
    num_ends = len(tokens) - 1
    match = np.zeros(max(num_ends, 0), dtype=np.int64)
    still_matching = np.ones(max(num_ends, 0), dtype=bool)
    for t in range(min(max_n, max(num_ends, 0))):
        # Compare the token t places back from every candidate end e with the token t places back
        # from the sequence end. Ends e < t have no token there, so they stop matching.
        still_matching[:t] = False
        still_matching[t:] &= tokens[:num_ends - t] == tokens[num_ends - t]
        if not still_matching.any():
            break
        match += still_matching
    return match


class NgramSpecProposer:
    """The engine's n-gram proposer (the ``Proposer`` protocol): drafts are copied from each
    request's own history (no model, no probabilities: point masses for the rejection sampler)."""

    def __init__(self, spec: SpecConfig, max_model_len: int):
        self.k = spec.num_speculative_tokens
        self.max_model_len = max_model_len
        self.ngram = NgramProposer.from_config(spec)

    def propose(self, requests: Sequence[Request]) -> dict[str, Proposal]:
        proposals = {}
        for req in requests:
            k = draft_budget(req, self.k, self.max_model_len)
            proposals[req.request_id] = Proposal(self.ngram.propose(req.all_token_ids)[:k] if k else [])
        return proposals

    def forget(self, request_id: str) -> None:
        """Nothing per request to release."""
