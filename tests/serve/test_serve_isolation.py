"""One client never touches another: a request whose sampling parameters the float32 sampler once
failed on, a request whose numbers turn NaN, a failure while handling one request's output, and a
failure of the engine that no request explains. The simulated model throughout; every server binds
127.0.0.1."""

from __future__ import annotations

import logging
import threading

import httpx
import pytest

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.detokenize import SequenceText
from tests.serve_util import PacedEngine, completion_text, finish_reasons, sim_llm, sse_data

pytestmark = pytest.mark.timeout(120)

TINY_TOP_P = 1e-46          # valid, in (0, 1]; 0.0 once in float32
POISON = "NaN"              # a prompt that starts with it gets NaN logits (poison below)


def poison(monkeypatch, engine) -> None:
    """NaN logits for every row of a request whose prompt starts with ``POISON``: a numerical fault of
    the model on that one sequence (an fp16 overflow, say), the rest of the batch untouched."""
    runner, execute = engine.runner, engine.runner.execute
    marker = list(POISON.encode())

    def execute_poisoned(decision):
        logits = execute(decision)
        for i, rid in enumerate(decision.logits_request_ids if logits is not None else ()):
            req = engine.requests.get(rid)
            if req is not None and req.prompt_token_ids[:len(marker)] == marker:
                logits[i] = float("nan")
        return logits

    monkeypatch.setattr(runner, "execute", execute_poisoned)


# ------------------------------------------------------------------------------ the engine

def test_a_top_p_below_float32s_range_keeps_the_most_likely_token_and_samples_like_greedy():
    prompts = ["one", "two", "three"]             # a fresh engine each: the same request ids, the same logits
    greedy = sim_llm(num_blocks=64).generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True))
    tiny = sim_llm(num_blocks=64).generate(prompts, SamplingParams(temperature=1.0, top_p=TINY_TOP_P, max_tokens=8,
                                                                   ignore_eos=True))
    assert [o.text for o in tiny] == [o.text for o in greedy]
    assert [o.finish_reason for o in tiny] == ["length"] * 3


ENGINE_CONFIGS = {
    "default": {},
    "persistent batch": {"persistent_batch": True},
    "async scheduling": {"async_scheduling": True},
    "unbatched sampling": {"batched_sampling": False},
    "ngram speculation": {"speculative": SpecConfig(method="ngram", num_speculative_tokens=2)},
}


@pytest.mark.parametrize("config", ENGINE_CONFIGS.values(), ids=ENGINE_CONFIGS.keys())
def test_a_request_whose_logits_turn_nan_ends_alone_with_error_and_the_batch_goes_on(monkeypatch, config):
    llm = LLM(model="sim", config=EngineConfig(num_blocks=64, **config))
    poison(monkeypatch, llm.engine)
    prompts = ["alpha", f"{POISON} beta", "gamma", "delta"]
    params = [SamplingParams(max_tokens=12, ignore_eos=True), SamplingParams(temperature=1.0, max_tokens=12),
              SamplingParams(temperature=0.8, seed=3, max_tokens=12, ignore_eos=True),
              SamplingParams(max_tokens=12, ignore_eos=True)]
    outs = llm.generate(prompts, params)
    assert [o.finish_reason for o in outs] == ["length", "error", "length", "length"]
    assert [len(o.token_ids) for i, o in enumerate(outs) if i != 1] == [12, 12, 12]
    assert outs[1].token_ids == []                # the stand-in token drawn for its NaN row is never applied
    assert not llm.engine.requests and not llm.engine.has_unfinished_requests()
    again = llm.generate(["alpha", "beta"], SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True))
    assert [(o.finish_reason, len(o.token_ids)) for o in again] == [("length", 12)] * 2   # serving as before


def test_a_poisoned_request_with_n_2_ends_whole_and_generate_returns(monkeypatch):
    llm = sim_llm(num_blocks=64)
    poison(monkeypatch, llm.engine)
    outs = llm.generate([f"{POISON} twins", "plain"], [SamplingParams(temperature=1.0, n=2, max_tokens=6),
                                                        SamplingParams(max_tokens=6, ignore_eos=True)])
    assert outs[0].finish_reason == "error" and outs[1].finish_reason == "length"


def test_a_streamed_request_whose_logits_turn_nan_ends_its_stream_with_error(monkeypatch):
    llm = sim_llm(num_blocks=64)
    poison(monkeypatch, llm.engine)
    deltas = list(llm.stream(f"{POISON} stream", SamplingParams(temperature=1.0, max_tokens=6), chat=False))
    assert deltas[-1].finished and deltas[-1].finish_reason == "error"


# ------------------------------------------------------------------------------ over HTTP

@pytest.fixture
def paced_server():
    """A server whose engine steps 200 times a second: streams of 40 tokens last 0.2 s, long enough
    for a fourth request to arrive while they run."""
    llm = sim_llm(num_blocks=128, max_num_seqs=8)
    with BackgroundServer(ServedModel(PacedEngine(llm.engine, steps_per_s=200), "sim")) as server:
        yield server, llm.engine


INNOCENT = {"model": "sim", "max_tokens": 40, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}


def start_innocent_streams(server, bodies: list[dict]) -> tuple[list[threading.Thread], list[list], threading.Barrier]:
    """Stream each body on its own thread; the barrier opens once every stream has its first chunk."""
    started = threading.Barrier(len(bodies) + 1, timeout=30)
    results: list[list] = [[] for _ in bodies]

    def read(body, out):
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=30) as resp:
            lines = resp.iter_lines()
            for line in lines:
                if line:
                    out.append(line)
                    break
            started.wait()
            out.extend(line for line in lines if line)

    threads = [threading.Thread(target=read, args=(body, out)) for body, out in zip(bodies, results)]
    for th in threads:
        th.start()
    return threads, results, started


def assert_completed_normally(lines: list, max_tokens: int) -> None:
    events = sse_data(lines)
    assert events[-1] == "[DONE]" and finish_reasons(events) == {0: "length"}, lines[-3:]
    assert events[-2]["usage"]["completion_tokens"] == max_tokens
    assert not any("error" in e for e in events if isinstance(e, dict))


def test_a_top_p_below_float32s_range_is_served_beside_three_streams_that_all_complete(paced_server):
    server, _ = paced_server
    bodies = [{**INNOCENT, "prompt": f"innocent {i}", "temperature": [0.0, 0.7, 1.0][i]} for i in range(3)]
    threads, streams, started = start_innocent_streams(server, bodies)
    started.wait()
    bad = httpx.post(server.base_url + "/v1/completions", timeout=30,
                     json={"model": "sim", "prompt": "hi", "max_tokens": 4, "temperature": 1.0, "top_p": TINY_TOP_P})
    for th in threads:
        th.join(30)
    assert bad.status_code == 200, bad.text
    assert bad.json()["choices"][0]["finish_reason"] == "length" and bad.json()["usage"]["completion_tokens"] == 4
    for lines in streams:
        assert_completed_normally(lines, INNOCENT["max_tokens"])


def test_a_request_whose_logits_turn_nan_fails_alone_with_an_error_the_client_sees(monkeypatch, paced_server):
    server, engine = paced_server
    poison(monkeypatch, engine)
    bodies = [{**INNOCENT, "prompt": f"innocent {i}", "temperature": [0.0, 0.7, 1.0][i]} for i in range(3)]
    threads, streams, started = start_innocent_streams(server, bodies)
    started.wait()
    poisoned = {"model": "sim", "prompt": f"{POISON} me", "max_tokens": 8, "temperature": 1.0}
    with httpx.stream("POST", server.base_url + "/v1/completions", json={**poisoned, "stream": True},
                      timeout=30) as resp:
        events = sse_data(list(resp.iter_lines()))
    plain = httpx.post(server.base_url + "/v1/completions", json=poisoned, timeout=30)
    for th in threads:
        th.join(30)
    assert finish_reasons(events) == {0: "error"} and events[-1] == "[DONE]"
    error = next(e["error"] for e in events if isinstance(e, dict) and "error" in e)
    assert error["type"] == "internal_error" and "NaN or infinite logits" in error["message"]
    assert plain.status_code == 500 and "NaN or infinite logits" in plain.json()["error"]["message"]
    for lines in streams:
        assert_completed_normally(lines, INNOCENT["max_tokens"])
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200


def test_a_failure_while_handling_one_requests_output_ends_that_request_alone(monkeypatch, paced_server):
    server, _ = paced_server
    update = SequenceText.update

    def update_or_fail(self, token_ids, final):
        if self._stop == ["BOOM"]:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a detokenizer bug")
        return update(self, token_ids, final)

    monkeypatch.setattr(SequenceText, "update", update_or_fail)
    threads, streams, started = start_innocent_streams(server, [{**INNOCENT, "prompt": f"innocent {i}"}
                                                                for i in range(3)])
    started.wait()
    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=30,
                      json={"model": "sim", "prompt": "x", "stop": "BOOM", "stream": True}) as resp:
        events = sse_data(list(resp.iter_lines()))
    for th in threads:
        th.join(30)
    assert finish_reasons(events) == {0: "error"} and "a detokenizer bug" in events[-2]["error"]["message"]
    for lines in streams:
        assert_completed_normally(lines, INNOCENT["max_tokens"])


def test_an_engine_failure_no_request_explains_is_logged_and_health_says_the_engine_is_down(
        monkeypatch, caplog, paced_server):
    server, engine = paced_server
    threads, streams, started = start_innocent_streams(server, [{**INNOCENT, "prompt": f"open {i}",
                                                                 "max_tokens": 400} for i in range(2)])
    started.wait()
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200

    def device_lost(decision):
        raise RuntimeError("device lost")

    with caplog.at_level(logging.ERROR, logger="labkit.serve"):
        monkeypatch.setattr(engine.runner, "execute", device_lost)
        for th in threads:
            th.join(30)
    for lines in streams:
        events = sse_data(lines)
        assert finish_reasons(events) == {0: "error"} and events[-1] == "[DONE]", lines[-3:]
        assert "RuntimeError: device lost" in next(e["error"]["message"] for e in events[:-1] if "error" in e)
    logged = [r for r in caplog.records if r.name == "labkit.serve" and r.exc_info]
    assert logged and isinstance(logged[0].exc_info[1], RuntimeError)
    health = httpx.get(server.base_url + "/health", timeout=10)
    assert health.status_code == 503 and "device lost" in health.json()["error"]["message"]
    refused = httpx.post(server.base_url + "/v1/completions", json={"model": "sim", "prompt": "x"}, timeout=10)
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "service_unavailable"
    assert completion_text(sse_data(streams[0]))        # what had streamed before the failure stayed
