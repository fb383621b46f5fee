"""Greedy output equals transformers' generate(do_sample=False), token for token, fp32 on CPU."""

from __future__ import annotations

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams
from tests.prompts import PARITY_PROMPTS

NEW_TOKENS = 48
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def prompt_ids(tokenizer):
    return [tokenizer.encode_prompt(p) for p in PARITY_PROMPTS]


@pytest.fixture(scope="module")
def hf_tokens(hf_model, prompt_ids):
    out = []
    for ids in prompt_ids:
        x = torch.tensor([ids])
        # An explicit mask matters: SmolLM2's pad id equals <|im_end|>, which the chat template puts in
        # every prompt; without a mask transformers would treat those tokens as padding.
        with torch.inference_mode():
            seq = hf_model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                                    do_sample=False)
        out.append(seq[0, len(ids):].tolist())
    assert all(len(t) == NEW_TOKENS for t in out)
    return out


def _generate(config: EngineConfig, prompt_ids, batch: int) -> list[list[int]]:
    llm = LLM(config=config, progress=False)
    tokens = []
    for i in range(0, len(prompt_ids), batch):
        tokens += [o.token_ids for o in llm.generate(prompt_ids[i:i + batch], GREEDY)]
    return tokens, llm


@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_matches_transformers(prompt_ids, hf_tokens, batch):
    tokens, _ = _generate(EngineConfig(), prompt_ids, batch)
    assert tokens == hf_tokens


def test_greedy_matches_transformers_under_forced_preemption(prompt_ids, hf_tokens):
    # 8 requests of up to ~100 tokens in 16 blocks of 16 slots: they cannot all stay resident.
    tokens, llm = _generate(EngineConfig(num_blocks=16, block_size=16), prompt_ids, 8)
    assert llm.engine.stats()["num_preemptions"] > 0
    assert tokens == hf_tokens


def test_greedy_matches_transformers_with_chunked_prefill(prompt_ids, hf_tokens):
    tokens, llm = _generate(EngineConfig(max_num_batched_tokens=16), prompt_ids, 8)
    assert max(len(p) for p in prompt_ids) > 16          # every prompt needs several chunks
    assert tokens == hf_tokens
