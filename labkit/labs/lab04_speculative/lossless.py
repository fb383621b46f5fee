"""Is speculative sampling lossless? Sample the same prompt many times with and without it.

Each sample is its own request with its own seed, ``temperature`` > 0. With speculation the second
output token is the first one a verification step emits: an accepted draft (probability
min(1, p/q)), a token resampled from normalise(max(0, p − q)), or a bonus token from p. If the
rejection sampler is exact, that token has the same distribution as plain sampling gives it
(Leviathan et al. 2023, Appendix A.1). The two samples are compared with Pearson's chi-square test
of homogeneity; tokens seen fewer than ``min_count`` times in both samples together are pooled
into one "other" column so every expected count stays large enough for the test.

Seeds differ between the two samples (plain: 0 .. n−1, speculative: n .. 2n−1) so they are
independent: with the same seed the first token would be the same draw in both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

OTHER = -1


@dataclass(frozen=True)
class SampleTest:
    categories: tuple[int, ...]        # token ids (OTHER = pooled rare tokens)
    plain_counts: tuple[int, ...]
    spec_counts: tuple[int, ...]
    chi2: float
    dof: int
    p_value: float

    @property
    def n(self) -> int:
        return sum(self.plain_counts)


def sample_tokens(llm, prompt_ids: list[int], n: int, first_seed: int, temperature: float,
                  max_tokens: int, position: int = 1) -> list[int]:
    """Token ``position`` of ``n`` seeded samples (all in flight together). The prompt is served once
    first, so its full KV blocks are in the prefix cache before the ``n`` requests arrive: requests
    admitted in the same step cannot share blocks none of them has computed yet."""
    from labkit import SamplingParams

    llm.generate([prompt_ids], SamplingParams(temperature=0.0, max_tokens=1))
    params = [SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=first_seed + i, ignore_eos=True)
              for i in range(n)]
    return [o.token_ids[position] for o in llm.generate([prompt_ids] * n, params)]


def chi_square_p_value(chi2: float, dof: int) -> float:
    """P(X >= chi2) for X ~ chi-square(dof): the regularised upper incomplete gamma Q(dof/2, chi2/2)."""
    if dof < 1:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(chi2 / 2, dtype=torch.float64)))


def homogeneity_test(plain: list[int], spec: list[int], min_count: int = 10) -> SampleTest:
    """Pearson's chi-square test that two samples of tokens come from the same distribution."""
    if not plain or not spec:
        raise ValueError("both samples must be non-empty")
    both = Counter(plain) + Counter(spec)
    keep = sorted((t for t, c in both.items() if c >= min_count), key=lambda t: -both[t])
    def column(x: int) -> int:
        return x if x in keep else OTHER
    cats = keep + ([OTHER] if any(t not in keep for t in both) else [])
    a, b = Counter(map(column, plain)), Counter(map(column, spec))
    na, nb = len(plain), len(spec)
    chi2 = 0.0
    for cat in cats:
        total = a[cat] + b[cat]
        for observed, n in ((a[cat], na), (b[cat], nb)):
            expected = total * n / (na + nb)
            chi2 += (observed - expected) ** 2 / expected
    dof = len(cats) - 1
    return SampleTest(tuple(cats), tuple(a[c] for c in cats), tuple(b[c] for c in cats), chi2, dof,
                      chi_square_p_value(chi2, dof))


# A story opening whose second token is spread over a few words (' named', ' called', ...), so the
# histogram has several columns; no chat template (a raw continuation).
STORY_PROMPT = "Once upon a time, there was a little"
# Blocks of 8 tokens, so the 9-token story prompt has a full block to share: each of the n requests then
# prefills one token instead of nine (prefill was two thirds of the test's time).
SAMPLING_CONFIG = {"device": "auto", "dtype": "auto", "block_size": 8, "num_blocks": 256, "enable_prefix_caching": True,
                   "max_num_seqs": 64, "max_num_batched_tokens": 2048}


def sampling_test(n: int, temperature: float = 1.0, k: int = 2, prompt: str = STORY_PROMPT,
                  model: str | None = None) -> tuple[SampleTest, object]:
    """n plain samples vs n samples with the draft model and rejection sampling; (test, tokenizer).

    ``max_tokens = k + 2`` leaves room for k drafts plus the bonus token after the first token.
    Prefix caching shares the prompt's full blocks between the n requests (``sample_tokens``).
    """
    from labkit import SpecConfig
    from labkit.labs.lab04_speculative.speedup import make_llm

    plain = make_llm(model, None, SAMPLING_CONFIG)
    spec = make_llm(model, SpecConfig(method="draft", num_speculative_tokens=k), SAMPLING_CONFIG)
    ids = plain.tokenizer.encode_prompt(prompt, chat=False)
    a = sample_tokens(plain, ids, n, 0, temperature, k + 2)
    b = sample_tokens(spec, ids, n, n, temperature, k + 2)
    return homogeneity_test(a, b), plain.tokenizer
