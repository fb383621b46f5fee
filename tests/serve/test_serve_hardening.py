"""labkit serve against clients that misbehave or ask for what it cannot do: text that is not
Unicode, features it lacks, limits beyond the real bounds, slow and greedy clients, a shutdown with
streams in flight, a busy port. Every server binds 127.0.0.1; the simulated model keeps them quick."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from labkit.model.tokenizer import IncrementalDetokenizer
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.detokenize import SequenceText
from labkit.serve.errors import error_response
from labkit.serve.limits import ServeLimits
from labkit.serve.protocol import MAX_STOP_CHARS
from labkit.serve.protocol import UNSUPPORTED as UNSUPPORTED_FIELDS
from labkit.serve.server import bind
from labkit.sim.simulator import SimTokenizer
from tests.serve_util import serving, sim_llm, wait_until

pytestmark = pytest.mark.timeout(120)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sim_server():
    with serving(sim_llm(num_blocks=64, max_num_seqs=8), "sim") as server:   # max_model_len 4096
        yield server


def post_raw(server, path: str, raw_json: str) -> httpx.Response:
    """Send JSON text as is: ``"\\ud800"`` escapes survive (httpx's json= could not encode them)."""
    return httpx.post(server.base_url + path, content=raw_json.encode("ascii"), timeout=30,
                      headers={"content-type": "application/json"})


def assert_400(resp: httpx.Response, param: str) -> dict:
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    return error


# ------------------------------------------------------------------------------ Unicode

LONE_SURROGATE = [
    ("/v1/completions", '{"model": "sim", "prompt": "a\\ud800b"}', "prompt"),
    ("/v1/completions", '{"model": "\\udfff", "prompt": "x"}', "model"),
    ("/v1/completions", '{"model": "sim", "prompt": "x", "stop": ["ok", "\\ud83d"]}', "stop[1]"),
    ("/v1/completions", '{"model": "sim", "prompt": "x", "user": "\\ud800"}', "user"),       # ignored, still checked
    ("/v1/chat/completions", '{"model": "sim", "messages": [{"role": "user", "content": "\\ud800"}]}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"model": "sim", "messages": [{"role": "user", "content": '
                             '[{"type": "text", "text": "ok"}, {"type": "text", "text": "\\udc00"}]}]}',
     "messages[0].content[1].text"),
    ("/v1/chat/completions", '{"model": "sim", "messages": [{"role": "user", "content": "hi"}], "stop": "\\ud800"}',
     "stop"),
]


@pytest.mark.parametrize("path, raw, param", LONE_SURROGATE)
def test_a_lone_surrogate_in_any_text_field_is_a_400_naming_it(sim_server, path, raw, param):
    error = assert_400(post_raw(sim_server, path, raw), param)
    assert "Unicode" in error["message"]
    good = httpx.post(sim_server.base_url + "/v1/completions", json={"model": "sim", "prompt": "x", "max_tokens": 2})
    assert good.status_code == 200


def test_errors_render_whatever_text_the_client_sent(sim_server):
    unknown = post_raw(sim_server, "/v1/completions", '{"model": "gpt-\\u00e9\\u4e2d", "prompt": "x"}')
    assert unknown.status_code == 404 and "gpt-é中" in unknown.json()["error"]["message"]
    wrong_role = post_raw(sim_server, "/v1/chat/completions",
                          '{"model": "sim", "messages": [{"role": "\\ud800", "content": "x"}]}')
    assert wrong_role.status_code == 400 and wrong_role.json()["error"]["param"] == "messages[0].role"
    surrogate_bytes = httpx.post(sim_server.base_url + "/v1/chat/completions", headers={"content-type": "application/json"},
                                 content=b'{"model": "sim", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}')
    assert_400(surrogate_bytes, "messages[0].content")             # UTF-8-encoded surrogate: same check
    not_utf8 = httpx.post(sim_server.base_url + "/v1/completions", headers={"content-type": "application/json"},
                          content=b'{"model": "sim", "prompt": "\xff\xfe"}')
    assert not_utf8.status_code == 400 and not_utf8.json()["error"]["type"] == "invalid_request_error"
    rendered = error_response(404, "The model `\ud800` does not exist", "model")
    assert json.loads(rendered.body)["error"]["message"] == "The model `\ud800` does not exist"


# ------------------------------------------------------------------------------ features labkit lacks

UNSUPPORTED = [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "required"},
     "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     "response_format"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": -1.0}, "frequency_penalty"),
    ({"logit_bias": {"42": 100}}, "logit_bias"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"),
    ({"min_tokens": 4}, "min_tokens"),
]
NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "tools": [], "tool_choice": "none",
           "response_format": {"type": "text"}, "top_logprobs": 0, "user": "someone"}


@pytest.mark.parametrize("extra, param", UNSUPPORTED)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_feature_labkit_lacks_is_refused_naming_the_field_not_ignored(sim_server, path, extra, param):
    base = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    resp = httpx.post(sim_server.base_url + path, json={"model": "sim", "max_tokens": 2, **base, **extra}, timeout=30)
    assert "not supported" in assert_400(resp, param)["message"]


def test_every_field_on_the_unsupported_list_is_refused_on_both_routes(sim_server):
    for path, base in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        for field in UNSUPPORTED_FIELDS:
            resp = httpx.post(sim_server.base_url + path, timeout=30,
                              json={"model": "sim", "max_tokens": 2, **base, field: {"not": "neutral"}})
            assert_400(resp, field)


def test_neutral_values_of_those_fields_change_nothing_and_are_accepted(sim_server):
    for path, base in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        resp = httpx.post(sim_server.base_url + path, json={"model": "sim", "max_tokens": 3, **base, **NEUTRAL},
                          timeout=30)
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] <= 3, resp.text


# ------------------------------------------------------------------------------ limits and their real bounds

def test_a_stop_string_longer_than_the_cap_is_refused(sim_server):
    body = {"model": "sim", "prompt": "x", "max_tokens": 2}
    ok = httpx.post(sim_server.base_url + "/v1/completions", json={**body, "stop": ["s" * MAX_STOP_CHARS]})
    assert ok.status_code == 200
    long = httpx.post(sim_server.base_url + "/v1/completions", json={**body, "stop": ["ab", "s" * 20_000]})
    assert f"at most {MAX_STOP_CHARS} characters" in assert_400(long, "stop")["message"]


def test_max_tokens_beyond_two_to_the_31_names_that_bound(sim_server):
    for path, base, field in (("/v1/completions", {"prompt": "x"}, "max_tokens"),
                              ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                               "max_completion_tokens")):
        resp = httpx.post(sim_server.base_url + path, json={"model": "sim", **base, field: 10**30}, timeout=30)
        assert str(1 << 31) in assert_400(resp, field)["message"]


def test_max_tokens_beyond_the_remaining_context_is_a_400_like_vllm_not_a_silent_cap():
    prompt = "y" * 96                                             # the sim tokenizer: one token per byte
    with serving(sim_llm(num_blocks=300), "sim") as server:     # 4800 KV slots: the context (4096) binds first
        c = httpx.Client(base_url=server.base_url, timeout=60)
        over = c.post("/v1/completions", json={"model": "sim", "prompt": prompt, "max_tokens": 4096 - 96 + 1})
        message = assert_400(over, "max_tokens")["message"]
        assert "maximum context length (4096 tokens)" in message and "at most 4000" in message
        chat = c.post("/v1/chat/completions", json={"model": "sim", "messages": [{"role": "user", "content": prompt}],
                                                    "max_completion_tokens": 5000})
        assert "maximum context length (4096 tokens)" in assert_400(chat, "max_tokens")["message"]
        exact = c.post("/v1/completions", json={"model": "sim", "prompt": prompt, "max_tokens": 4000,
                                                "ignore_eos": True})
        assert exact.status_code == 200 and exact.json()["usage"]["completion_tokens"] == 4000   # not capped
        default = c.post("/v1/chat/completions", json={"model": "sim", "messages": [{"role": "user", "content": "hi"}]})
        assert default.status_code == 200, default.text          # no max_tokens: the rest of the context


# ------------------------------------------------------------------------------ the detokenizer

def test_an_all_bytes_output_streams_with_at_most_three_tokens_held_back():
    detok, ids, held = IncrementalDetokenizer(SimTokenizer()), [], []
    for _ in range(32):                       # 0x80 alone is never valid UTF-8
        ids.append(0x80)
        detok.update(ids)
        held.append(len(ids) - len(detok.text))        # one U+FFFD per byte token once given up on
    assert max(held) == 3 and held[-1] <= 3
    detok.update(ids, final=True)
    assert detok.text == "\ufffd" * 32


def test_a_character_split_over_four_byte_tokens_still_arrives_whole():
    detok, ids, deltas = IncrementalDetokenizer(SimTokenizer()), [], []
    for b in "a😀b中".encode():
        ids.append(b)
        deltas.append(detok.update(ids))
    assert [d for d in deltas if d] == ["a", "😀", "b", "中"]


def test_tokens_that_arrive_together_release_every_finished_character_at_once():
    # Speculative decoding hands over several tokens per step: "ab" + the first 2 bytes of 中.
    detok, ids = IncrementalDetokenizer(SimTokenizer()), list(b"ab") + list("中".encode()[:2])
    assert detok.update(ids) == "ab"
    assert detok.update(ids + ["中".encode()[2]]) == "中"
    stray = ids + ["中".encode()[2]] + [0x80] * 5 + list("中".encode()[:1])   # 5 stray bytes, then 中 begins
    assert detok.update(stray) == "\ufffd" * 3                   # the last 3 tokens held, no more
    assert detok.update(stray + list("中".encode()[1:])) == "\ufffd" * 2 + "中"   # 中 survives the stray bytes


def test_the_server_side_text_streams_an_all_bytes_output_too():
    text, ids, streamed = SequenceText(SimTokenizer(), stop=[]), [], ""
    for i in range(32):
        ids.append(0xBF)
        streamed += text.update(ids, final=False).delta
        assert len(streamed) >= i + 1 - 3
    assert streamed + text.update(ids, final=True).delta == "\ufffd" * 32


# ------------------------------------------------------------------------------ slow and greedy clients

@pytest.fixture
def strict_server():
    limits = ServeLimits(header_timeout_s=0.5, body_timeout_s=0.5, limit_concurrency=4)
    with BackgroundServer(ServedModel(sim_llm(num_blocks=64).engine, "sim"), limits=limits) as server:
        yield server


def connect(server) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=5)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before closing (b"" for nothing), or None if still open after ``seconds``."""
    sock.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except (socket.timeout, TimeoutError):
        return None
    except ConnectionResetError:
        return data


def test_a_client_that_sends_half_its_headers_is_cut_off(strict_server):
    silent, partial = connect(strict_server), connect(strict_server)
    partial.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
    t0 = time.monotonic()
    assert closed_within(partial, 5) == b"" and closed_within(silent, 5) == b""
    assert time.monotonic() - t0 < 3


def test_a_keep_alive_connection_gets_the_header_clock_again_for_its_next_request(strict_server):
    sock = connect(strict_server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 1")               # then stalls
    assert closed_within(sock, 5) == b""


def test_a_client_that_sends_headers_and_no_body_gets_a_408(strict_server):
    sock = connect(strict_server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"model\": ")
    reply = closed_within(sock, 5)
    assert reply is not None and reply.startswith(b"HTTP/1.1 408"), reply
    assert b"did not arrive within 0.5 s" in reply


def test_past_the_connection_limit_a_request_gets_a_503_and_the_server_recovers(strict_server):
    idle = [connect(strict_server) for _ in range(4)]
    time.sleep(0.1)
    assert httpx.get(strict_server.base_url + "/health", timeout=5).status_code == 503
    for sock in idle:
        sock.close()
    assert wait_until(lambda: httpx.get(strict_server.base_url + "/health", timeout=5).status_code == 200, 5)


def test_a_slow_but_steady_body_within_the_limit_is_served(strict_server):
    body = json.dumps({"model": "sim", "prompt": "x", "max_tokens": 2}).encode()
    sock = connect(strict_server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:10])
    time.sleep(0.2)
    sock.sendall(body[10:])
    reply = closed_within(sock, 10)
    assert reply is not None and reply.startswith(b"HTTP/1.1 200") and b'"completion_tokens":' in reply.replace(
        b" ", b"")


def test_the_client_limits_are_serve_options_checked_by_name():
    import argparse

    from labkit.serve.cli import add_serve_args, serve_limits
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    limits = serve_limits(parser.parse_args(["--header-timeout", "3", "--body-timeout", "4", "--limit-concurrency",
                                             "9", "--timeout-graceful-shutdown", "2"]))
    assert limits == ServeLimits(3.0, 4.0, 9, 2) and serve_limits(parser.parse_args([])) == ServeLimits()
    for bad, name in ((["--header-timeout", "0"], "header_timeout_s"), (["--limit-concurrency", "0"],
                                                                         "limit_concurrency")):
        with pytest.raises(ValueError, match=name):
            serve_limits(parser.parse_args(bad))


# ------------------------------------------------------------------------------ a real server process

def free_port() -> int:
    with bind("127.0.0.1", 0) as sock:
        return sock.getsockname()[1]


def start_serve(port: int, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "labkit.serve", "--model", "sim", "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def read_stream(url: str, body: dict, started: threading.Barrier, lines: list[str]) -> None:
    try:
        with httpx.stream("POST", url, json=body, timeout=30) as resp:
            events = (line for line in resp.iter_lines() if line)
            lines.append(next(events))
            started.wait()
            lines.extend(events)
    except httpx.HTTPError as exc:
        lines.append(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_ends_every_open_stream_with_abort_and_done_and_no_traceback(sig):
    port = free_port()
    proc = start_serve(port, "--max-model-len", "300000", "--num-blocks", "40000", "--timeout-graceful-shutdown", "5")
    base = f"http://127.0.0.1:{port}"
    try:
        def up():
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None
        assert wait_until(up, timeout=60) and proc.poll() is None
        long = {"model": "sim", "max_tokens": 250_000, "ignore_eos": True, "stream": True}
        requests = [(base + "/v1/completions", {**long, "prompt": "one"}),
                    (base + "/v1/completions", {**long, "prompt": "two", "n": 2, "stream_options": {"include_usage": True}}),
                    (base + "/v1/chat/completions", {**long, "messages": [{"role": "user", "content": "three"}]})]
        started = threading.Barrier(len(requests) + 1)
        streams = [[] for _ in requests]
        threads = [threading.Thread(target=read_stream, args=(url, body, started, lines))
                   for (url, body), lines in zip(requests, streams)]
        for th in threads:
            th.start()
        started.wait(timeout=30)
        time.sleep(0.3)                                    # tokens are flowing
        t0 = time.monotonic()
        proc.send_signal(sig)
        for th in threads:
            th.join(timeout=10)
        ended_s = time.monotonic() - t0
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert ended_s < 5, ended_s                            # within the grace period
    for (url, body), lines in zip(requests, streams):
        assert lines[-1] == "data: [DONE]", lines[-3:]
        chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
        reasons = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks
                   if c["choices"] and c["choices"][0]["finish_reason"]}
        assert reasons == {i: "abort" for i in range(body.get("n", 1))}, lines[-4:]
        if "stream_options" in body:
            assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr[-3000:]
    assert proc.returncode in (-signal.SIGTERM, 130, 0), (proc.returncode, stderr[-2000:])


def test_a_busy_port_fails_at_once_before_the_model_loads():
    with bind("127.0.0.1", 0) as taken:
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        proc = start_serve(port)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in stderr, (proc.returncode, stderr)
    assert "labkit serve: sim on" not in stdout and "Application startup complete" not in stderr
    assert time.monotonic() - t0 < 30
