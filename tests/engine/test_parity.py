"""Greedy output equals transformers' generate(do_sample=False), token for token, fp32 on CPU.

transformers' outputs are read from the committed ``tests/data/parity_reference.json``: the entry made with
the same weights (sha256), prompts, token count and settings (``tests/reference_cache.py``). A test run
never writes it; ``scripts/regenerate_parity_reference.py`` does, by hand, when the question changes.

Versions. The installed transformers does not matter here: it computed the stored answer, and labkit's
tokens do not depend on it. torch does: labkit computes with it, and another torch minor version may
reorder a float reduction, which can flip a near-tie between the two most likely tokens. So a stored
answer is used only when it was made under the same torch major.minor; otherwise (or when none is
stored) transformers computes the answer here, under the installed torch, and it is not written back.
The comparison is exact either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams
from tests.prompts import PARITY_PROMPTS
from tests.reference_cache import cached_reference, find_reference, key_id, reference_key

NEW_TOKENS = 48
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "parity_reference.json"
HF_SETTINGS = {"dtype": "float32", "attn_implementation": "sdpa", "device": "cpu"}   # as conftest.hf_model


@pytest.fixture(scope="module")
def prompt_ids(tokenizer):
    return [tokenizer.encode_prompt(p) for p in PARITY_PROMPTS]


def hf_greedy(model, prompt_ids: list[list[int]], new_tokens: int) -> list[list[int]]:
    """transformers' greedy continuation of each prompt, alone (batch 1)."""
    out = []
    for ids in prompt_ids:
        x = torch.tensor([ids])
        # An explicit mask matters: SmolLM2's pad id equals <|im_end|>, which the chat template puts in
        # every prompt; without a mask transformers would treat those tokens as padding.
        with torch.inference_mode():
            seq = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                 do_sample=False)
        out.append(seq[0, len(ids):].tolist())
    return out


def torch_minor(version: str) -> tuple[str, ...]:
    """``"2.13.0+cpu"`` -> ``("2", "13")``: the part of torch's version that may change labkit's numerics."""
    return tuple(version.split("+")[0].split(".")[:2])


@pytest.fixture(scope="module")
def hf_tokens(request, model_dir, prompt_ids) -> list[list[int]]:
    """transformers' tokens: the committed answer made under this torch major.minor, else computed here."""
    key = reference_key(model_dir, prompt_ids, NEW_TOKENS, **HF_SETTINGS)
    entry = find_reference(REFERENCE, key)
    if entry is not None and torch_minor(entry["key"]["torch"]) == torch_minor(key["torch"]):
        out = entry["outputs"]
        print(f"\ntransformers reference: stored, made with torch {entry['key']['torch']}, "
              f"transformers {entry['key']['transformers']}")
    else:
        out = hf_greedy(request.getfixturevalue("hf_model"), prompt_ids, NEW_TOKENS)
        print(f"\ntransformers reference: computed here under torch {key['torch']} (no stored answer for this torch; "
              "scripts/regenerate_parity_reference.py stores one)")
    assert len(out) == len(prompt_ids) and all(len(t) == NEW_TOKENS for t in out)
    return out


def _generate(config: EngineConfig, prompt_ids, batch: int) -> list[list[int]]:
    llm = LLM(config=config, progress=False)
    tokens = []
    for i in range(0, len(prompt_ids), batch):
        tokens += [o.token_ids for o in llm.generate(prompt_ids[i:i + batch], GREEDY)]
    return tokens, llm


# Batch 8 (7 s) stays in `make test-fast`; batch 1 (384 sequential steps) and the two stress variants
# (~15-40 s each on 2 busy cores) run in `make test`.
# async_scheduling=True (the forward on a worker thread, the next step planned meanwhile) and the
# persistent batch (inputs from columns kept across steps) must give the same tokens in every setting.
HOST_PATHS = {"sync, lists": {}, "async": {"async_scheduling": True}, "persistent batch": {"persistent_batch": True},
              "async, persistent batch": {"async_scheduling": True, "persistent_batch": True}}
ASYNC = pytest.mark.parametrize("host_path", list(HOST_PATHS))


# Batch 1 (384 sequential steps, 1-2 minutes each on 2 busy cores) runs the list-built synchronous path and
# both switches together; each switch alone is held to the same tokens at batch 8 and under the stress variants.
BATCH_1_PATHS = ("sync, lists", "async, persistent batch")


@pytest.mark.parametrize("batch, host_path",
                         [pytest.param(1, p, marks=pytest.mark.slow) for p in BATCH_1_PATHS] + [(8, p) for p in HOST_PATHS])
def test_greedy_matches_transformers(prompt_ids, hf_tokens, batch, host_path):
    tokens, _ = _generate(EngineConfig(**HOST_PATHS[host_path]), prompt_ids, batch)
    assert tokens == hf_tokens


@pytest.mark.slow
@ASYNC
def test_greedy_matches_transformers_under_forced_preemption(prompt_ids, hf_tokens, host_path):
    # 8 requests of up to ~100 tokens in 16 blocks of 16 slots: they cannot all stay resident.
    tokens, llm = _generate(EngineConfig(num_blocks=16, block_size=16, **HOST_PATHS[host_path]),
                            prompt_ids, 8)
    assert llm.engine.stats()["num_preemptions"] > 0
    assert tokens == hf_tokens


@pytest.mark.slow
@ASYNC
def test_greedy_matches_transformers_with_chunked_prefill(prompt_ids, hf_tokens, host_path):
    tokens, llm = _generate(EngineConfig(max_num_batched_tokens=16, **HOST_PATHS[host_path]),
                            prompt_ids, 8)
    assert max(len(p) for p in prompt_ids) > 16          # every prompt needs several chunks
    assert tokens == hf_tokens


@pytest.mark.slow
def test_async_scheduling_gives_the_synchronous_tokens_with_parallel_sampling_and_an_abort(prompt_ids):
    """n > 1 (seeded sampling: each sequence's generator draws once per token either way) and a request
    aborted once it has 6 tokens (async: its row in flight is dropped, not appended)."""
    params = [SamplingParams(max_tokens=16, n=2, temperature=0.8, seed=i) if i % 2 else
              SamplingParams(max_tokens=16, ignore_eos=True) for i in range(4)]

    def run(async_scheduling: bool) -> list[list[int]]:
        engine = LLM(config=EngineConfig(async_scheduling=async_scheduling), progress=False).engine
        ids = [engine.add_request(p, sp) for p, sp in zip(prompt_ids[:4], params)]
        victim = engine.get_request(ids[2])
        while engine.has_unfinished_requests():
            engine.step()
            if len(victim.output_token_ids) >= 6 and not victim.is_finished:
                engine.abort(ids[2])
        reqs = [engine.get_request(rid) for rid in ids]
        return [r.output_token_ids for req in reqs for r in (req, *(engine.get_request(c) for c in req.child_ids))]

    sync_tokens, async_tokens = run(False), run(True)
    assert async_tokens == sync_tokens and len(sync_tokens[3]) == 6


def test_the_reference_cache_answers_only_the_question_it_stored(tmp_path):
    """On a tiny random Llama: generated on a miss (and equal to transformers), reused on a hit,
    regenerated when the token count or the weights change."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    def tiny(seed: int) -> tuple[Path, LlamaForCausalLM]:
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = LlamaForCausalLM(cfg).eval()
        model.generation_config.eos_token_id = None
        model.save_pretrained(tmp_path / f"tiny-{seed}")
        return tmp_path / f"tiny-{seed}", model

    path, model = tiny(0)
    prompts, cache = [[1, 5, 9, 14], [3, 3, 70]], tmp_path / "reference.json"
    key = reference_key(path, prompts, 6, dtype="float32")
    calls = []

    def compute(m=model, n=6):
        calls.append(n)
        return hf_greedy(m, prompts, n)

    first, hit = cached_reference(cache, key, compute)
    assert not hit and calls == [6] and first == hf_greedy(model, prompts, 6) and cache.exists()
    again, hit = cached_reference(cache, key, compute)
    assert hit and again == first and calls == [6]

    longer, hit = cached_reference(cache, reference_key(path, prompts, 7, dtype="float32"), lambda: compute(n=7))
    assert not hit and calls == [6, 7] and [t[:6] for t in longer] == first
    other_path, other = tiny(1)
    assert reference_key(other_path, prompts, 6, dtype="float32") != key        # other weights, other key
    _, hit = cached_reference(cache, reference_key(other_path, prompts, 6, dtype="float32"), lambda: compute(other))
    assert not hit and calls == [6, 7, 6]
    assert cached_reference(cache, key, compute) == (first, True)             # earlier entries are kept


def test_a_reference_is_found_read_only_for_the_same_question_under_other_versions(tmp_path):
    question = {"model_sha256": "ab", "prompts_sha256": "cd", "max_new_tokens": 4, "dtype": "float32"}
    made = {**question, "torch": "2.13.0+cpu", "transformers": "5.24.0"}
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({key_id(made): {"key": made, "outputs": [[1, 2, 3, 4]]}}))
    before = path.read_bytes()
    assert find_reference(path, made)["outputs"] == [[1, 2, 3, 4]]
    assert find_reference(path, {**made, "torch": "2.14.1", "transformers": "5.25.0"})["key"] == made
    assert find_reference(path, {**made, "max_new_tokens": 5}) is None            # another question
    assert find_reference(path, {**made, "model_sha256": "ef"}) is None
    assert path.read_bytes() == before
    assert torch_minor("2.13.0+cpu") == torch_minor("2.13.1") != torch_minor("2.14.0")
