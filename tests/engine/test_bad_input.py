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


# --------------------------------------------------------------- every argument of the entry points

def serves_a_good_request_after(llm) -> None:
    assert llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2))[0].token_ids
    assert llm.engine.kv.usage() == 0.0 and not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize("kwargs, exc, field", [
    (dict(arrival_time="now"), ValueError, "arrival_time"),
    (dict(arrival_time=float("nan")), ValueError, "arrival_time"),
    (dict(arrival_time=float("inf")), ValueError, "arrival_time"),
    (dict(arrival_time=True), ValueError, "arrival_time"),
    (dict(request_id=["a"]), ValueError, "request_id"),
    (dict(request_id=""), ValueError, "request_id"),
    (dict(chat="yes"), ValueError, "chat"),
    (dict(params={"max_tokens": 3}), ValueError, "SamplingParams"),
    (dict(prompt="bad \ud800 surrogate"), ValueError, "prompt"),
    (dict(prompt=[1, True]), ValueError, "prompt"),
    (dict(prompt=(1, 2.0)), ValueError, "prompt"),
])
def test_add_request_checks_every_argument_and_the_engine_stays_usable(llm, kwargs, exc, field):
    args = dict(prompt="hi", params=SamplingParams(max_tokens=2))
    args.update(kwargs)
    with pytest.raises(exc, match=field):
        llm.engine.add_request(args.pop("prompt"), args.pop("params"), **args)
    serves_a_good_request_after(llm)


@pytest.mark.parametrize("prompts, field", [(None, "prompts"), (123, "prompts"), ([None], "prompt"),
                                            ([[]], "empty"), ({"a": 1}, "prompts")])
def test_generate_checks_its_prompts(llm, prompts, field):
    with pytest.raises(ValueError, match=field):
        llm.generate(prompts, SamplingParams(max_tokens=2))
    serves_a_good_request_after(llm)


@pytest.mark.parametrize("params, field", [({"max_tokens": 3}, "SamplingParams"), (5, "SamplingParams"),
                                           ([SamplingParams()], "SamplingParams")])
def test_stream_checks_its_params(llm, params, field):
    with pytest.raises(ValueError, match=field):
        next(llm.stream("hi", params))
    serves_a_good_request_after(llm)


@pytest.mark.parametrize("kwargs, field", [
    (dict(stop_token_ids=5), "stop_token_ids"),
    (dict(stop_token_ids="7"), "stop_token_ids"),
    (dict(n=1.5), "n"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(seed=2.0), "seed"),
])
def test_more_invalid_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_a_tiny_positive_temperature_is_greedy(llm):
    greedy = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4))[0].token_ids
    tiny = llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=1e-39, seed=1))[0].token_ids
    assert tiny == greedy and SamplingParams(temperature=1e-39).greedy


@pytest.mark.parametrize("value", [float("nan"), "0.9", -0.5, 0.0, 5.0, 500, True])
def test_gpu_memory_utilization_is_checked_before_anything_is_built(value):
    with pytest.raises(ValueError, match=r"gpu_memory_utilization must be .*\(0, 1\]"):
        LLM(model="sim", gpu_memory_utilization=value, progress=False)


@pytest.mark.parametrize("model, exc", [(123, TypeError), (["a"], TypeError), (1.5, TypeError)])
def test_a_model_that_is_not_a_path_is_refused(model, exc):
    with pytest.raises(exc, match="model"):
        LLM(model=model, progress=False)


@pytest.mark.parametrize("kwargs, field", [(dict(method="draft", draft_model=123), "draft_model"),
                                           (dict(method="ngram", draft_model="x"), "draft_model"),
                                           (dict(num_speculative_tokens=2.0), "num_speculative_tokens")])
def test_more_invalid_spec_configs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SpecConfig(**kwargs)


def broken_model_dir(tmp_path, model_dir, config_text: str | None, weights: bytes | None):
    import shutil

    path = tmp_path / "broken"
    path.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model_dir / name, path / name)
    (path / "config.json").write_text(config_text if config_text is not None else
                                      (model_dir / "config.json").read_text())
    (path / "model.safetensors").write_bytes(weights if weights is not None else b"")
    return path


@pytest.mark.parametrize("config_text, weights, match", [
    ("{not json", b"x", "config.json"),
    ('{"model_type": "llama"}', b"x", "config.json.*hidden_size"),
    ("[1, 2]", b"x", "config.json"),
    (None, b"garbage, not safetensors", "model.safetensors"),
])
def test_a_broken_model_directory_names_the_file(tmp_path, model_dir, config_text, weights, match):
    path = broken_model_dir(tmp_path, model_dir, config_text, weights)
    with pytest.raises(ValueError, match=match):
        LLM(model=str(path), progress=False)
