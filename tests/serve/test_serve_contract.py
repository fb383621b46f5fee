"""labkit serve as a drop-in for OpenAI clients: ``null`` means unset, integers may be written as floats
(never as booleans), TTFT is the same whichever chunk a client times, and the smaller parts of the
contract (405's Allow, bodies FastAPI cannot parse, ``GET /v1/models/{id}``, the docs' numbers). The
simulated model; every server binds 127.0.0.1."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import openai
import pytest

from labkit.config import DEFAULT_MAX_MODEL_LEN
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.app import REFUSALS_DOC
from labkit.serve.limits import ServeLimits, default_max_body_bytes
from labkit.serve.prometheus import VLLM_NAMES
from tests.serve_util import PacedEngine, serving, sim_llm, sse_data

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
SERVING_MD = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sim_server():
    # A short context: a chat request without max_tokens runs to its end (the simulated model never stops).
    with serving(sim_llm(num_blocks=64, max_num_seqs=8, max_model_len=128), "sim") as server:
        yield server


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": "sim", **body}, timeout=30)


# ------------------------------------------------------------------------------ null means unset

NULLABLE_COMPLETION = ("temperature", "top_p", "n", "stream", "stream_options", "stop", "seed", "echo",
                       "max_tokens", "top_k", "ignore_eos", "logprobs", "presence_penalty", "logit_bias")
NULLABLE_CHAT = ("temperature", "top_p", "n", "stream", "stop", "seed", "logprobs", "max_tokens",
                 "max_completion_tokens", "top_k", "ignore_eos", "top_logprobs", "tools", "response_format")


def test_every_nullable_field_accepts_null_as_unset(sim_server):
    everything_null = post(sim_server, "/v1/completions", {"prompt": "hi", **dict.fromkeys(NULLABLE_COMPLETION)})
    assert everything_null.status_code == 200, everything_null.text
    assert everything_null.json()["usage"]["completion_tokens"] <= 16                  # max_tokens: 16
    assert len(everything_null.json()["choices"]) == 1                                 # n: 1, stream: off
    chat = post(sim_server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                     **dict.fromkeys(NULLABLE_CHAT)})
    assert chat.status_code == 200 and chat.json()["object"] == "chat.completion", chat.text


def test_the_official_client_forwarding_none_works(sim_server):
    c = openai.OpenAI(base_url=sim_server.base_url + "/v1", api_key="unused", max_retries=0, timeout=30)
    done = c.completions.create(model="sim", prompt="hi", temperature=None, top_p=None, n=None, max_tokens=None,
                                echo=None, logprobs=None, extra_body={"top_k": None, "ignore_eos": None})
    assert done.choices[0].finish_reason in ("stop", "length")
    chat = c.chat.completions.create(model="sim", messages=[{"role": "user", "content": "hi"}], temperature=None,
                                     logprobs=None, n=None, stream=None, max_tokens=3)
    assert chat.usage.completion_tokens <= 3


# ------------------------------------------------------------------------------ numbers

def test_an_integral_float_is_its_integer_for_every_integer_field(sim_server):
    done = post(sim_server, "/v1/completions", {"prompt": "hi", "max_tokens": 5.0, "n": 2.0, "top_k": 3.0,
                                                "seed": 7.0, "ignore_eos": True})
    assert done.status_code == 200, done.text
    assert done.json()["usage"]["completion_tokens"] == 10 and len(done.json()["choices"]) == 2
    same = post(sim_server, "/v1/completions", {"prompt": "hi", "max_tokens": 5, "n": 2, "top_k": 3, "seed": 7,
                                                "ignore_eos": True, "temperature": 1})
    assert done.json()["usage"] == same.json()["usage"]
    ids = post(sim_server, "/v1/completions", {"prompt": [104.0, 105.0], "max_tokens": 1})
    assert ids.status_code == 200 and ids.json()["usage"]["prompt_tokens"] == 2


@pytest.mark.parametrize("field, value", [("max_tokens", 5.5), ("n", 1.5), ("top_k", 2.25), ("seed", 0.5),
                                          ("max_tokens", True), ("n", False), ("seed", True), ("top_k", True),
                                          ("temperature", True), ("top_p", False), ("max_tokens", "5")])
def test_a_fraction_a_boolean_or_a_string_is_no_integer_and_the_400_names_the_field(sim_server, field, value):
    resp = post(sim_server, "/v1/completions", {"prompt": "hi", field: value})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == field and field in resp.json()["error"]["message"]


def test_the_document_states_the_seed_bound_as_an_integer_and_the_server_takes_it(sim_server):
    text = httpx.get(sim_server.base_url + "/openapi.json", timeout=30).text
    assert "e+18" not in text
    seed = json.loads(text)["components"]["schemas"]["CompletionRequest"]["properties"]["seed"]
    bound = next(branch for branch in seed["anyOf"] if branch.get("type") == "integer")["maximum"]
    assert bound == (1 << 63) - 1 and isinstance(bound, int)
    assert post(sim_server, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": bound}).status_code == 200
    assert post(sim_server, "/v1/completions", {"prompt": "hi", "seed": bound + 1}).json()["error"]["param"] == "seed"


# ------------------------------------------------------------------------------ TTFT, whichever chunk is timed

STEP_S = 0.05


def test_the_chat_role_goes_out_with_the_first_token_so_both_ttft_definitions_agree():
    # 16 prompt tokens a step: a 160-byte prompt takes 10 steps of prefill (at least 0.5 s) before a token.
    llm = sim_llm(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=16)
    with BackgroundServer(ServedModel(PacedEngine(llm.engine, steps_per_s=1 / STEP_S), "sim")) as server:
        body = {"model": "sim", "messages": [{"role": "user", "content": "p" * 150}], "max_tokens": 4,
                "stream": True, "n": 2}
        t0 = time.monotonic()
        times, lines = [], []
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=30) as resp:
            for line in resp.iter_lines():
                if line:
                    times.append(time.monotonic() - t0)
                    lines.append(line)
    events = sse_data(lines)
    with_choices = next(i for i, e in enumerate(events) if isinstance(e, dict) and e["choices"])
    with_content = next(i for i, e in enumerate(events) if isinstance(e, dict) and e["choices"]
                        and e["choices"][0]["delta"].get("content"))
    ttft_choices, ttft_content = times[with_choices], times[with_content]
    assert ttft_choices >= 10 * STEP_S, ttft_choices                  # nothing before prefill is done
    assert ttft_content - ttft_choices < STEP_S, (ttft_choices, ttft_content)
    firsts = {}
    for e in events:
        for c in e["choices"] if isinstance(e, dict) else ():
            firsts.setdefault(c["index"], c["delta"])
    assert all(d["role"] == "assistant" and d["content"] for d in firsts.values()) and set(firsts) == {0, 1}
    roles = [c for e in events if isinstance(e, dict) for c in e["choices"] if "role" in c["delta"]]
    assert len(roles) == 2                                                # once per choice


# ------------------------------------------------------------------------------ the smaller parts

def test_a_405_says_which_methods_the_route_takes(sim_server):
    resp = httpx.get(sim_server.base_url + "/v1/completions", timeout=10)
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"
    assert resp.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("content, content_type, says", [
    (b'{"model": "sim", "prompt": "\xff\xfe"}', "application/json", "not valid UTF-8 (byte 0xff at offset 28)"),
    (b"[" * 5000 + b"]" * 5000, "application/json", "nested too deeply"),
    (b'{"model": "sim", "prompt": }', "application/json", "not valid JSON"),
    (b'{"model": "sim", "prompt": "hi"}', "text/plain", "Content-Type: application/json; this one came as "
                                                         "'text/plain'"),
], ids=["invalid-utf8", "too-deep", "invalid-json", "text-plain"])
def test_a_body_that_cannot_be_parsed_gets_a_400_naming_the_problem(sim_server, content, content_type, says):
    resp = httpx.post(sim_server.base_url + "/v1/completions", content=content,
                      headers={"content-type": content_type}, timeout=30)
    assert resp.status_code == 400 and says in resp.json()["error"]["message"], resp.text


def test_a_model_is_retrieved_by_its_id_and_an_unknown_one_is_a_404(sim_server):
    card = httpx.get(sim_server.base_url + "/v1/models/sim", timeout=10).json()
    assert card["id"] == "sim" and card["object"] == "model" and card["max_model_len"] == 128
    unknown = httpx.get(sim_server.base_url + "/v1/models/org/other-model", timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    assert "org/other-model" in unknown.json()["error"]["message"]


def test_the_not_supported_error_points_to_a_section_that_exists(sim_server):
    error = post(sim_server, "/v1/completions", {"prompt": "hi", "tools": [{"type": "function"}]}).json()["error"]
    assert error["param"] == "tools" and REFUSALS_DOC[0] in error["message"] and REFUSALS_DOC[1] in error["message"]
    assert f"\n## {REFUSALS_DOC[1]}\n" in (ROOT / REFUSALS_DOC[0]).read_text(encoding="utf-8")


def test_the_docs_numbers_are_the_running_defaults():
    limits = ServeLimits()
    body = default_max_body_bytes(DEFAULT_MAX_MODEL_LEN)
    assert f"{body:,} bytes" in SERVING_MD and f"default {DEFAULT_MAX_MODEL_LEN} tokens" in SERVING_MD
    assert f"`max_model_len` ({DEFAULT_MAX_MODEL_LEN} tokens by default" in SERVING_MD
    for flag, value in (("--header-timeout", limits.header_timeout_s), ("--body-timeout", limits.body_timeout_s),
                        ("--stalled-stream-timeout", limits.stalled_stream_timeout_s),
                        ("--timeout-graceful-shutdown", limits.timeout_graceful_shutdown),
                        ("--limit-concurrency", limits.limit_concurrency)):
        said = re.findall(rf"`{flag}`\s*\((\d+)", SERVING_MD)
        assert said and all(int(n) == value for n in said), (flag, said, value)
    assert f"{limits.timeout_keep_alive} s in labkit serve: `--timeout-keep-alive`" in SERVING_MD.replace("\n", " ")
    assert all(f"`{name}`" in SERVING_MD for name in VLLM_NAMES)          # the /metrics names it lists
    longest, = {int(n) for n in re.findall(r"stands for at most\s+(\d+) bytes", SERVING_MD)}
    chars = (DEFAULT_MAX_MODEL_LEN - 1) * longest
    assert f"({DEFAULT_MAX_MODEL_LEN} − 1) × {longest} = {chars:,} characters" in SERVING_MD


def test_text_or_messages_that_cannot_fit_are_refused_by_the_bounds_before_tokenising(sim_server):
    prompts = httpx.get(sim_server.base_url + "/openapi.json", timeout=10).json()["components"]["schemas"]
    longest = prompts["CompletionRequest"]["properties"]["prompt"]["anyOf"][0]["maxLength"]        # 127 x 3 bytes
    most = prompts["ChatCompletionRequest"]["properties"]["messages"]["maxItems"]
    assert (longest, most) == (127 * 3, 127)
    for path, body, param, says in (
            ("/v1/completions", {"prompt": "x" * (longest + 1)}, "prompt", f"{longest + 1} characters"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * longest}]}, "messages",
             "characters (with the chat template)"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": ""}] * (most + 1)}, "messages",
             f"{most + 1} messages")):
        error = post(sim_server, path, body).json()["error"]
        assert error["param"] == param and says in error["message"] and "max_model_len" in error["message"], error
