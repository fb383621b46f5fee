"""Bad input gets a clear error naming the field and the allowed range; the engine stays usable."""

from __future__ import annotations

import pytest

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig

SAMPLING_CASES = [
    (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature="hot"), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=True), "max_tokens"),
    (dict(n=0), "n"),
    (dict(seed=-1), "seed"),
    (dict(ignore_eos="yes"), "ignore_eos"),
    (dict(stop_token_ids=(-3,)), "stop_token_ids"),
]

CONFIG_CASES = [
    (dict(block_size=0), "block_size"),
    (dict(num_blocks=0), "num_blocks"),
    (dict(num_blocks=8, kv_cache_bytes=1 << 20), "not both"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(max_model_len=1), "max_model_len"),
    (dict(scheduler="fifo"), "scheduler"),
    (dict(kv_cache="virtual"), "kv_cache"),
    (dict(contiguous_reserve="half"), "contiguous_reserve"),
    (dict(device="tpu"), "device"),
    (dict(dtype="int8"), "dtype"),
    (dict(attention_backend="flash"), "attention_backend"),
    (dict(kv_cache="contiguous", enable_prefix_caching=True), "enable_prefix_caching"),
    (dict(speculative="ngram"), "speculative"),
]

SPEC_CASES = [
    (dict(method="medusa"), "method"),
    (dict(num_speculative_tokens=0), "num_speculative_tokens"),
    (dict(prompt_lookup_min=3, prompt_lookup_max=2), "prompt_lookup_max"),
]


@pytest.mark.parametrize("kwargs, field", SAMPLING_CASES)
def test_invalid_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("kwargs, field", CONFIG_CASES)
def test_invalid_engine_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**kwargs)


@pytest.mark.parametrize("kwargs, field", SPEC_CASES)
def test_invalid_spec_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SpecConfig(**kwargs)


@pytest.mark.parametrize("prompt, match", [
    ("", "empty"),
    ([], "empty"),
    ([1, -5], r"\[0, 49152\)"),
    ([1, 10 ** 6], r"\[0, 49152\)"),
    (3.14, "str or a list of token ids"),
    ([1, "a"], "str or a list of token ids"),
    (None, "str or a list of token ids"),
])
def test_bad_prompts_are_refused_and_the_engine_stays_usable(llm, prompt, match):
    with pytest.raises(ValueError, match=match):
        llm.engine.add_request(prompt, SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished_requests()
    assert len(llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2))[0].token_ids) == 2


def test_params_of_the_wrong_type_are_refused(llm):
    with pytest.raises(ValueError, match="SamplingParams"):
        llm.engine.add_request("hi", {"max_tokens": 3})


def test_prompt_longer_than_max_model_len_is_refused():
    llm = LLM(config=EngineConfig(max_model_len=32), progress=False)
    with pytest.raises(ValueError, match="max_model_len is 32"):
        llm.generate([[5] * 40], SamplingParams(max_tokens=1))
    assert llm.engine.kv.pool.num_used_blocks() == 0


def test_request_larger_than_the_whole_kv_pool_is_refused_with_the_sizes():
    llm = LLM(config=EngineConfig(num_blocks=4, block_size=8), progress=False)
    with pytest.raises(ValueError, match=r"needs 38 KV slots.*\(32 slots\)"):
        llm.generate([[5] * 30], SamplingParams(max_tokens=8))
    assert llm.generate([[5] * 20], SamplingParams(max_tokens=4))[0].token_ids   # still usable


def test_duplicate_request_id_is_refused(llm):
    llm.engine.add_request([1, 2], SamplingParams(max_tokens=1), request_id="dup")
    try:
        with pytest.raises(ValueError, match="already in use"):
            llm.engine.add_request([1, 2], SamplingParams(max_tokens=1), request_id="dup")
    finally:
        llm.engine.abort("dup")
    assert llm.engine.kv.pool.num_used_blocks() == 0


def test_max_model_len_above_the_model_limit_is_refused():
    with pytest.raises(ValueError, match="max_model_len must be <= the model's limit 8192"):
        LLM(config=EngineConfig(max_model_len=10_000), progress=False)


def test_unknown_model_path_is_a_file_not_found_error():
    with pytest.raises(FileNotFoundError, match="never\\s+downloads"):
        LLM(model="/nonexistent/llama-7b", progress=False)


def test_parallel_sampling_with_contiguous_layout_is_refused():
    llm = LLM(config=EngineConfig(kv_cache="contiguous", num_blocks=64, max_model_len=256), progress=False)
    with pytest.raises(ValueError, match="kv_cache='paged'"):
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, n=2, temperature=1.0))


def test_mismatched_params_list_is_refused(llm):
    with pytest.raises(ValueError, match="2 SamplingParams for 1 prompts"):
        llm.generate(["a"], [SamplingParams(), SamplingParams()])
