"""Build the engine's proposer from a SpecConfig: n-gram lookup, or a draft model.

Drafts are capped so they never run past ``max_tokens`` or ``max_model_len`` (``draft_budget``):
if all are accepted, the bonus token must still fit.
"""

from __future__ import annotations

from labkit.config import EngineConfig, SpecConfig
from labkit.spec_decode.draft_model import DraftModelProposer
from labkit.spec_decode.ngram import NgramSpecProposer
from labkit.spec_decode.proposer import Proposer


def make_proposer(spec: SpecConfig, config: EngineConfig, max_model_len: int, *, runner=None,
                  kv_manager=None, sampler=None, vocab_size: int | None = None) -> Proposer:
    """``runner`` (the target's ModelRunner), ``kv_manager``, ``sampler`` and ``vocab_size`` are
    needed by a draft model (it runs beside the target, samples with the requests' generators)."""
    if spec.method == "ngram":
        return NgramSpecProposer(spec, max_model_len)
    if runner is None or not hasattr(runner, "model"):
        raise ValueError("speculative method 'draft' needs a real target model (not model='sim')")
    return DraftModelProposer(spec, config, runner, kv_manager, sampler, max_model_len, vocab_size)
