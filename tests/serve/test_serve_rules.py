"""labkit serve's rules, each from its definition, on the simulated model (fast, no weights).

- ``labkit:generation_tokens`` counts output tokens, however many a step delivers at once (speculative
  decoding appends several) and whatever text the delta carries (none, while a UTF-8 character is held
  back); ``labkit:prompt_tokens`` counts prompt tokens: both equal the ``usage`` the replies report.
- A chat request that sends both ``max_tokens`` and ``max_completion_tokens``: ``max_completion_tokens``
  wins (OpenAI deprecated ``max_tokens`` for it; vLLM does the same).
- A boolean is never a number: ``true`` where an integer or a float is expected is a 400 naming the
  field, never read as 1 (nor ``false`` as 0, the neutral value of several unsupported fields).
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from labkit import SpecConfig
from tests.serve_util import scrape, serving, sim_llm

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def spec_server():
    llm = sim_llm(num_blocks=64, max_num_seqs=8, speculative=SpecConfig(method="ngram", num_speculative_tokens=3))
    with serving(llm, "sim") as server:
        yield server


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + path, json={"model": "sim", **body}, timeout=60)


def test_the_token_counters_count_tokens_whatever_each_delta_carries(spec_server, monkeypatch):
    # The simulated model's tokens are fixed by the request id: fix the ids to two whose outputs repeat
    # enough for n-gram drafts to be accepted (a random id has no accepted draft about 7 times in 10).
    ids = iter([uuid.UUID(int=7), uuid.UUID(int=8)])
    monkeypatch.setattr("labkit.serve.app.uuid.uuid4", lambda: next(ids))
    before = scrape(spec_server.base_url)
    body = {"prompt": "abcabcabcabcabcabc", "max_tokens": 120, "ignore_eos": True}
    plain = post(spec_server, "/v1/completions", body).json()["usage"]
    with httpx.stream("POST", spec_server.base_url + "/v1/completions", timeout=60,
                      json={"model": "sim", **body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    chunks = [json.loads(line[6:]) for line in lines]
    streamed = chunks[-1]["usage"]
    after = scrape(spec_server.base_url)
    assert plain["completion_tokens"] == streamed["completion_tokens"] == 120
    generated = after["labkit:generation_tokens_total"] - before.get("labkit:generation_tokens_total", 0)
    prompted = after["labkit:prompt_tokens_total"] - before.get("labkit:prompt_tokens_total", 0)
    assert generated == 240
    assert prompted == plain["prompt_tokens"] + streamed["prompt_tokens"] == 2 * 18
    # Some steps appended several tokens at once (accepted drafts): a counter that counted deliveries
    # would be short of the tokens.
    accepted = after["labkit:spec_decode_num_accepted_tokens_total"] - before.get(
        "labkit:spec_decode_num_accepted_tokens_total", 0)
    assert accepted > 0


def test_max_completion_tokens_wins_over_max_tokens(spec_server):
    messages = [{"role": "user", "content": "hello"}]
    for max_tokens, max_completion_tokens in ((3, 5), (5, 3)):
        resp = post(spec_server, "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                          "max_completion_tokens": max_completion_tokens,
                                                          "ignore_eos": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == max_completion_tokens
    only_old = post(spec_server, "/v1/chat/completions", {"messages": messages, "max_tokens": 4, "ignore_eos": True})
    assert only_old.json()["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("path, field, value", [
    ("/v1/completions", "max_tokens", True),
    ("/v1/completions", "n", True),
    ("/v1/completions", "temperature", True),
    ("/v1/completions", "temperature", False),
    ("/v1/chat/completions", "max_completion_tokens", True),
    ("/v1/chat/completions", "max_tokens", True),
    ("/v1/completions", "presence_penalty", False),       # False == 0, the neutral value: still not a number
    ("/v1/completions", "best_of", True),                 # True == 1, the neutral value
    ("/v1/completions", "top_logprobs", False),
])
def test_a_boolean_where_a_number_is_expected_is_refused_naming_the_field(spec_server, path, field, value):
    body = {"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    resp = post(spec_server, path, {**body, "max_tokens": 2, field: value})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert field in (error.get("param") or "") + error["message"], error
