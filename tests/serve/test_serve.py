"""labkit serve, driven by the official ``openai`` client and raw HTTP over loopback.

Servers bind 127.0.0.1 on a free port and stop when their fixture ends. The tiny random Llama and
the simulated model keep the suite fast; one test uses the real SmolLM2 model.
"""

from __future__ import annotations

import argparse
import asyncio

import httpx
import openai
import pytest

from bench.common import tiny_model_dir
from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.serve.cli import add_serve_args, engine_config, served_model_name
from labkit.serve.detokenize import SequenceText
from labkit.sim.simulator import SimTokenizer
from tests.serve_util import scrape, serving, sim_llm, wait_until

TINY = "tiny-llama"
pytestmark = pytest.mark.timeout(180)     # a stuck server fails its test with every thread's stack


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


def tiny_engine_llm(path) -> LLM:
    return LLM(model=str(path), config=EngineConfig(num_blocks=512, max_num_seqs=64), progress=False)


@pytest.fixture(scope="module")
def tiny_llm(tiny_dir):
    """For expected outputs. A served engine belongs to its server's loop thread alone, so the server
    gets its own engine over the same (shared, read-only) weights."""
    return tiny_engine_llm(tiny_dir)


@pytest.fixture(scope="module")
def tiny_server(tiny_dir):
    with serving(tiny_engine_llm(tiny_dir), TINY) as server:
        yield server


@pytest.fixture(scope="module")
def sim_server():
    # 64 blocks x 16 = 1024 KV slots, max_model_len 4096: prompts can overflow either limit.
    with serving(sim_llm(num_blocks=64, max_num_seqs=8), "sim") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)


# ------------------------------------------------------------------------------ the OpenAI API

def test_completions_with_and_without_streaming_match_generate_and_count_usage(tiny_server, tiny_llm):
    prompt = "The capital of France is"
    expected = tiny_llm.generate(prompt, SamplingParams(max_tokens=12, ignore_eos=True), chat=False)[0]
    c = client(tiny_server)
    done = c.completions.create(model=TINY, prompt=prompt, max_tokens=12, temperature=0,
                                extra_body={"ignore_eos": True})
    assert done.choices[0].text == expected.text and done.choices[0].finish_reason == "length"
    assert done.usage.completion_tokens == 12 == len(expected.token_ids)
    assert done.usage.prompt_tokens == len(expected.prompt_token_ids)
    chunks = list(c.completions.create(model=TINY, prompt=prompt, max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == expected.text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"


def test_chat_with_and_without_streaming_applies_the_chat_template_like_generate(tiny_server, tiny_llm):
    question = "What is a KV cache?"
    expected = tiny_llm.generate(question, SamplingParams(max_tokens=10, ignore_eos=True))[0]
    c = client(tiny_server)
    messages = [{"role": "user", "content": question}]
    done = c.chat.completions.create(model=TINY, messages=messages, max_tokens=10, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert done.choices[0].message.content == expected.text and done.choices[0].message.role == "assistant"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (len(expected.prompt_token_ids), 10)
    chunks = list(c.chat.completions.create(model=TINY, messages=messages, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == expected.text
    assert chunks[-1].usage.total_tokens == len(expected.prompt_token_ids) + 10


def test_n_completions_come_back_as_n_choices_streamed_or_not(tiny_server):
    c = client(tiny_server)
    done = c.completions.create(model=TINY, prompt="Once upon a time", n=3, max_tokens=6, temperature=1.0,
                                seed=3, extra_body={"ignore_eos": True})
    assert [ch.index for ch in done.choices] == [0, 1, 2] and done.usage.completion_tokens == 18
    assert len({ch.text for ch in done.choices}) > 1          # sampled independently
    chunks = list(c.completions.create(model=TINY, prompt="Once upon a time", n=3, max_tokens=6,
                                       temperature=1.0, seed=3, stream=True, extra_body={"ignore_eos": True}))
    streamed = ["".join(ch.choices[0].text for ch in chunks if ch.choices[0].index == i) for i in range(3)]
    assert streamed == [ch.text for ch in done.choices]       # same seed, same texts


def test_a_stop_string_cuts_the_text_before_it_and_finishes_with_stop(tiny_server):
    c = client(tiny_server)
    kwargs = dict(model=TINY, prompt="Stop me", max_tokens=30, temperature=0, extra_body={"ignore_eos": True})
    full = c.completions.create(**kwargs).choices[0].text
    stop = full[12:15]
    expected = full[:full.find(stop)]
    done = c.completions.create(stop=[stop, "never appears"], **kwargs).choices[0]
    assert (done.text, done.finish_reason) == (expected, "stop")
    chunks = list(c.completions.create(stop=stop, stream=True, **kwargs))
    assert "".join(ch.choices[0].text for ch in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_stop_string_split_over_two_tokens_is_held_back_until_it_completes():
    text = SequenceText(SimTokenizer(), stop=["cd"])
    ids = list(b"abcde")
    updates = [text.update(ids[:i], final=False) for i in range(1, 5)]
    # One character (len("cd") - 1) is held back: it might start the stop string.
    assert [u.delta for u in updates] == ["", "a", "b", ""] and updates[-1].stopped
    assert text.text == "ab"


def test_greedy_output_over_http_equals_llm_generate_on_the_real_model(llm):
    prompts = ["Name three colours.", "用中文写一句问候语。"]
    params = SamplingParams(max_tokens=12)
    expected = [o.text for o in llm.generate(prompts, params)]
    with serving(LLM(progress=False), "smollm2") as server:      # its own engine, the same weights
        c = client(server)
        got = [c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": p}],
                                         max_tokens=12, temperature=0).choices[0].message.content for p in prompts]
    assert got == expected


# ------------------------------------------------------------------------------ concurrency

def test_fifty_concurrent_streams_all_complete_with_the_right_text(tiny_server, tiny_llm):
    prompts = [f"Request number {i} says" for i in range(50)]
    expected = [o.text for o in tiny_llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True),
                                                  chat=False)]

    async def one(c: openai.AsyncOpenAI, prompt: str) -> str:
        stream = await c.completions.create(model=TINY, prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True})
        return "".join([ch.choices[0].text async for ch in stream])

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=tiny_server.base_url + "/v1", api_key="unused", max_retries=0,
                                      timeout=120) as c:
            return await asyncio.gather(*(one(c, p) for p in prompts))

    assert asyncio.run(main()) == expected


def test_clients_that_disconnect_mid_stream_give_their_kv_blocks_back(tiny_server):
    async def leave_early(c: httpx.AsyncClient, i: int) -> None:
        body = {"model": TINY, "prompt": f"Story {i}:", "max_tokens": 200, "ignore_eos": True, "stream": True}
        async with c.stream("POST", "/v1/completions", json=body) as resp:
            lines = 0
            async for line in resp.aiter_lines():
                lines += line.startswith("data:")
                if lines == 2:
                    return                    # closing the stream drops the connection

    async def main() -> None:
        async with httpx.AsyncClient(base_url=tiny_server.base_url, timeout=60) as c:
            await asyncio.gather(*(leave_early(c, i) for i in range(20)))

    asyncio.run(main())

    def idle() -> dict | None:
        m = scrape(tiny_server.base_url)
        return m if m["labkit:kv_cache_usage_perc"] == 0 and m["labkit:num_requests_running"] == 0 else None

    metrics = wait_until(idle)
    assert metrics, scrape(tiny_server.base_url)
    assert metrics["labkit:generation_tokens_total"] < 20 * 200     # they really were cut short


# ------------------------------------------------------------------------------ bad requests

BAD_COMPLETIONS = [
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "top_p": 1.5}, "top_p"),
    ({"prompt": "x", "top_k": -5}, "top_k"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "n": 9}, "n"),                        # more than max_num_seqs (8)
    ({"prompt": "x", "seed": -1}, "seed"),
    ({"prompt": "x", "seed": 1.5}, "seed"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "x", "stop": 7}, "stop"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "ignore_eos": "no"}, "ignore_eos"),
    ({"prompt": "x", "logprobs": 2}, "logprobs"),          # not supported: refused, not ignored
    ({"prompt": "x", "echo": True}, "echo"),
    ({}, "prompt"),
    ({"prompt": 42}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "y" * 5000}, "prompt"),                    # longer than max_model_len (4096)
    ({"prompt": "y" * 2000, "max_tokens": 16}, "prompt"),  # fits the model, not the 1024-slot KV pool
]
BAD_CHAT = [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -3}, "max_completion_tokens"),
]


def test_bad_requests_get_openai_errors_naming_the_field_and_the_server_carries_on(sim_server):
    with httpx.Client(base_url=sim_server.base_url, timeout=30) as c:
        for path, cases in (("/v1/completions", BAD_COMPLETIONS), ("/v1/chat/completions", BAD_CHAT)):
            for body, param in cases:
                resp = c.post(path, json={"model": "sim", **body})
                assert resp.status_code == 400, (body, resp.text)
                error = resp.json()["error"]
                assert error["param"] == param and param.split("[")[0] in error["message"], (body, error)
                assert error["type"] == "invalid_request_error"
        unknown = c.post("/v1/completions", json={"model": "gpt-9", "prompt": "x"})
        assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
        not_json = c.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]["message"]
        good = c.post("/v1/completions", json={"model": "sim", "prompt": "still here?", "max_tokens": 4})
        assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 4


# ------------------------------------------------------------------------------ info endpoints

def test_health_models_and_metrics_use_vllm_names_under_the_labkit_prefix(sim_server):
    assert httpx.get(sim_server.base_url + "/health").status_code == 200
    models = client(sim_server).models.list().data
    assert [m.id for m in models] == ["sim"]
    client(sim_server).completions.create(model="sim", prompt="hello", max_tokens=5)
    m = scrape(sim_server.base_url)
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                 "prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total",
                 "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total", "request_success_total", "generation_tokens_total",
                 "prompt_tokens_total", "time_to_first_token_seconds_count", "inter_token_latency_seconds_count",
                 "e2e_request_latency_seconds_count"):
        assert f"labkit:{name}" in m, name
    assert m["labkit:request_success_total"] >= 1 and m["labkit:inter_token_latency_seconds_count"] >= 4


def test_speculative_decoding_counters_reach_metrics():
    llm = sim_llm(num_blocks=64, speculative=SpecConfig(method="ngram", num_speculative_tokens=3))
    with serving(llm, "sim") as server:
        client(server).completions.create(model="sim", prompt="abcabcabc", max_tokens=300,
                                          extra_body={"ignore_eos": True})
        m = scrape(server.base_url)
    assert m["labkit:spec_decode_num_drafts_total"] > 0
    assert m["labkit:spec_decode_num_draft_tokens_total"] >= m["labkit:spec_decode_num_drafts_total"]


def test_a_client_that_gives_up_on_a_plain_request_aborts_it(tiny_server):
    before = scrape(tiny_server.base_url)["labkit:generation_tokens_total"]
    body = {"model": TINY, "prompt": "Go on", "max_tokens": 240, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):      # connected, then gave up waiting for the reply
        httpx.post(tiny_server.base_url + "/v1/completions", json=body, timeout=httpx.Timeout(10, read=0.2))
    metrics = wait_until(lambda: (m := scrape(tiny_server.base_url))["labkit:num_requests_running"] == 0 and m)
    assert metrics["labkit:kv_cache_usage_perc"] == 0
    assert metrics["labkit:generation_tokens_total"] - before < 240


def test_serve_options_mirror_engine_config():
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args(["--model", "sim", "--max-num-seqs", "8", "--num-blocks", "99", "--kv-cache",
                              "contiguous", "--scheduler", "static", "--no-chunked-prefill"])
    cfg = engine_config(args)
    assert (cfg.max_num_seqs, cfg.num_blocks, cfg.kv_cache, cfg.scheduler, cfg.enable_chunked_prefill) == (
        8, 99, "contiguous", "static", False)
    assert served_model_name(args) == "sim" and args.host == "127.0.0.1"
    spec = engine_config(parser.parse_args(["--speculative", "draft", "--num-speculative-tokens", "2"]))
    assert (spec.speculative.method, spec.speculative.num_speculative_tokens) == ("draft", 2)
    with pytest.raises(ValueError, match="max_num_seqs"):
        engine_config(parser.parse_args(["--max-num-seqs", "0"]))


def test_a_long_running_server_forgets_delivered_requests():
    llm = sim_llm(num_blocks=64)
    if not hasattr(llm.engine, "release"):
        pytest.skip("this engine keeps every finished request (it has no LLMEngine.release)")
    with serving(llm, "sim") as server:
        c = client(server)
        c.completions.create(model="sim", prompt="one", max_tokens=4)
        c.completions.create(model="sim", prompt="two", max_tokens=4, n=3)
        with httpx.stream("POST", server.base_url + "/v1/completions", timeout=30,
                          json={"model": "sim", "prompt": "three", "max_tokens": 500, "stream": True}) as resp:
            next(resp.iter_lines())                   # then hang up
        assert wait_until(lambda: scrape(server.base_url)["labkit:num_requests_running"] == 0)
        assert wait_until(lambda: not llm.engine.requests), list(llm.engine.requests)
