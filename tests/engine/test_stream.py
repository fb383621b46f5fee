"""Streaming yields the same tokens (and text) as generate, as they are produced."""

from __future__ import annotations

from labkit import SamplingParams

PARAMS = SamplingParams(max_tokens=20)


def test_stream_yields_the_same_tokens_and_text_as_generate(llm):
    for prompt in ["Name three colours.", "用中文写一句问候语。"]:
        expected = llm.generate([prompt], PARAMS)[0]
        pieces = list(llm.stream(prompt, PARAMS))
        assert [t for p in pieces for t in p.token_ids] == expected.token_ids
        assert "".join(p.text for p in pieces) == expected.text
        assert pieces[-1].finished and not any(p.finished for p in pieces[:-1])


def test_closing_a_stream_early_aborts_and_frees_the_request(llm):
    stream = llm.stream("Tell me a long story.", SamplingParams(max_tokens=50, ignore_eos=True))
    next(stream), next(stream)
    stream.close()
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.kv.pool.num_used_blocks() == 0


def test_seeded_sampling_is_reproducible_whatever_the_batch(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=12, seed=7)
    alone = llm.generate(["Say something."], params)[0].token_ids
    batched = llm.generate(["Say something.", "Another prompt"], [params, SamplingParams(max_tokens=12)])
    assert batched[0].token_ids == alone
