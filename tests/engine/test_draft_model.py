"""Specification of labkit.spec_decode.draft_model: a small draft model proposes, the target verifies.

Whatever the draft, greedy speculative decoding must return exactly the plain greedy output, the
draft's own KV pool must be empty once requests finish, and a draft identical to the target must
never be rejected (which pins down the draft's catch-up and rollback after rejections).
"""

from __future__ import annotations

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.spec_decode.draft_model import DEFAULT_DRAFT, draft_from_target_layers, load_draft, save_draft
from tests.prompts import PARITY_PROMPTS

MAX_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
GREEDY_BATCH = SamplingParams(temperature=0.0, max_tokens=16)      # 8 prompts: keep the file fast


@pytest.fixture(scope="session")
def draft_path(llm, tmp_path_factory):
    """The shipped draft; without it, a 1-layer draft copied from the target's first layer with
    a head over the first 8192 token ids (low acceptance, which must not matter for equality)."""
    if DEFAULT_DRAFT.is_file():
        return str(DEFAULT_DRAFT)
    path = tmp_path_factory.mktemp("draft") / "tiny.safetensors"
    save_draft(path, draft_from_target_layers(llm.engine.runner.model, [0], torch.arange(8192)), {})
    return str(path)


@pytest.fixture(scope="session")
def plain_greedy(llm):
    """Plain greedy output of all prompts decoded together (batch 8)."""
    return [o.token_ids for o in llm.generate(PARITY_PROMPTS, GREEDY_BATCH)]


@pytest.fixture(scope="session")
def plain_greedy_alone(llm):
    """Plain greedy output of the first prompt decoded alone (batch 1)."""
    return llm.generate(PARITY_PROMPTS[0], GREEDY)[0].token_ids


def draft_llm(path: str, k: int, **config) -> LLM:
    spec = SpecConfig(method="draft", num_speculative_tokens=k, draft_model=path,
                      draft_num_blocks=config.pop("draft_num_blocks", None))
    return LLM(progress=False, config=EngineConfig(speculative=spec, **config))


def spec_stats(llm: LLM) -> dict:
    return llm.engine.stats()


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_output_equals_plain_greedy_at_batch_1(draft_path, plain_greedy_alone, k):
    llm = draft_llm(draft_path, k)
    assert llm.generate(PARITY_PROMPTS[0], GREEDY)[0].token_ids == plain_greedy_alone
    assert spec_stats(llm)["spec_decode_num_draft_tokens"] > 0


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_output_equals_plain_greedy_at_batch_8(draft_path, plain_greedy, k):
    llm = draft_llm(draft_path, k)
    assert [o.token_ids for o in llm.generate(PARITY_PROMPTS, GREEDY_BATCH)] == plain_greedy


def test_draft_blocks_are_all_freed_after_generate(draft_path):
    llm = draft_llm(draft_path, 4)
    llm.generate(PARITY_PROMPTS[:2], SamplingParams(max_tokens=12))
    proposer = llm.engine.proposer
    assert proposer.kv.usage() == 0.0 and proposer.num_computed == {}
    proposer.kv.check_invariants()


def test_preempting_the_target_with_drafts_in_flight_keeps_greedy_output(draft_path, plain_greedy):
    llm = draft_llm(draft_path, 4, num_blocks=24)      # 8 requests of ~5 blocks each cannot all fit
    outs = llm.generate(PARITY_PROMPTS, GREEDY_BATCH)
    assert llm.engine.stats()["num_preemptions"] > 0
    assert [o.token_ids for o in outs] == plain_greedy
    assert llm.engine.proposer.kv.usage() == 0.0


def test_a_full_draft_pool_proposes_nothing_instead_of_failing(draft_path, plain_greedy):
    llm = draft_llm(draft_path, 4, draft_num_blocks=6)  # room for about one request's context
    assert [o.token_ids for o in llm.generate(PARITY_PROMPTS, GREEDY_BATCH)] == plain_greedy
    assert llm.engine.proposer.kv.usage() == 0.0


def test_a_draft_identical_to_the_target_is_never_rejected(llm, plain_greedy_alone):
    same = draft_llm(str(llm.engine.model_dir), 3)          # the target's own weights as the draft
    out = same.generate(PARITY_PROMPTS[0], SamplingParams(max_tokens=12))[0].token_ids
    assert out == plain_greedy_alone[:12]
    stats = spec_stats(same)
    assert stats["spec_decode_num_draft_tokens"] > 0
    assert stats["spec_decode_num_accepted_tokens"] == stats["spec_decode_num_draft_tokens"]


def test_sampled_drafts_carry_q_over_the_full_vocabulary(draft_path):
    llm = draft_llm(draft_path, 4)
    engine = llm.engine
    rid = engine.add_request(PARITY_PROMPTS[3], SamplingParams(temperature=1.0, seed=7, max_tokens=8))
    for _ in range(3):                       # prefill, then the first proposal
        if engine.get_request(rid).spec_token_ids:
            break
        engine.step()
    req = engine.get_request(rid)
    q = engine.sampler.draft_probs(rid)                               # [k, vocab]
    assert q.shape == (len(req.spec_token_ids), engine.vocab_size)
    assert torch.allclose(q.sum(-1), torch.ones(len(q)), atol=1e-4)
    assert all(q[i, t] > 0 for i, t in enumerate(req.spec_token_ids))
    vocab_ids = engine.proposer.vocab_ids
    if vocab_ids is not None:
        outside = torch.ones(engine.vocab_size, dtype=torch.bool)
        outside[vocab_ids] = False
        assert float(q[:, outside].abs().max()) == 0.0
    engine.abort(rid)


def test_sampling_from_a_point_mass_target_through_rejection_sampling_gives_the_greedy_output(draft_path, plain_greedy):
    """top_k=1 makes the target distribution p a point mass on its argmax, so rejection sampling (accept x
    with min(1, p(x)/q(x)), else draw from normalise(max(0, p - q))) must emit exactly the greedy tokens,
    whatever the draft proposed and whatever the random draws."""
    llm = draft_llm(draft_path, 4)
    params = SamplingParams(temperature=1.0, top_k=1, seed=3, max_tokens=GREEDY_BATCH.max_tokens)
    assert [o.token_ids for o in llm.generate(PARITY_PROMPTS[:2], params)] == plain_greedy[:2]
    stats = spec_stats(llm)
    assert stats["spec_decode_num_draft_tokens"] > 0
    assert 0 <= stats["spec_decode_num_accepted_tokens"] <= stats["spec_decode_num_draft_tokens"]
    assert llm.engine.proposer.kv.usage() == 0.0


def test_same_seed_gives_the_same_sampled_output(draft_path):
    params = SamplingParams(temperature=1.0, seed=11, max_tokens=12)
    first = draft_llm(draft_path, 2).generate(PARITY_PROMPTS[0], params)[0].token_ids
    assert draft_llm(draft_path, 2).generate(PARITY_PROMPTS[0], params)[0].token_ids == first


def test_saved_draft_loads_back_with_the_same_weights(llm, tmp_path):
    target = llm.engine.runner.model
    draft = draft_from_target_layers(target, [3], torch.tensor([2, 5, 7, 100]))
    save_draft(tmp_path / "d.safetensors", draft, {"note": "test"})
    loaded = load_draft(tmp_path / "d.safetensors", target)
    assert loaded.vocab_ids.tolist() == [2, 5, 7, 100]
    assert loaded.embed_tokens is target.embed_tokens                  # shared, not copied
    assert torch.equal(loaded.lm_head, target.embed_tokens[[2, 5, 7, 100]])
    expected = target.layers[3].qkv_proj.half().to(target.embed_tokens.dtype)
    assert torch.equal(loaded.layers[0].qkv_proj, expected)


def test_missing_or_foreign_draft_files_raise_clear_errors(llm, tmp_path):
    from safetensors.torch import save_file

    target = llm.engine.runner.model
    with pytest.raises(FileNotFoundError):
        load_draft(tmp_path / "nope.safetensors", target)
    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a labkit draft"):
        load_draft(tmp_path / "other.safetensors", target)


# ------------------------------------------------------------------ the 4-bit copy of the target

@pytest.mark.parametrize("k", [2, 4])
def test_the_4bit_copy_of_the_target_drafts_losslessly_and_is_mostly_accepted(plain_greedy, k):
    llm = draft_llm("target-int4", k)
    assert [o.token_ids for o in llm.generate(PARITY_PROMPTS, GREEDY_BATCH)] == plain_greedy
    stats = spec_stats(llm)
    # The copy is the target up to 4-bit rounding: far closer than any trained small draft.
    assert stats["spec_decode_acceptance_rate"] > 0.5, stats["spec_decode_acceptance_rate"]
    assert llm.engine.proposer.kv.usage() == 0.0


def test_the_4bit_copy_reads_a_fraction_of_the_targets_weight_bytes(llm):
    from labkit.model.llama import decode_weight_bytes
    from labkit.model.quant import Int4Linear

    copy = load_draft("target-int4", llm.engine.runner.model)
    assert isinstance(copy.layers[0].qkv_proj, Int4Linear) and isinstance(copy.lm_head, Int4Linear)
    assert decode_weight_bytes(copy) < decode_weight_bytes(llm.engine.runner.model) / 5
