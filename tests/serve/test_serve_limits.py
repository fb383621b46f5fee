"""Bounded work per request before it costs anyone else: the body limit (413 before parsing), the
tokenising and templating off both loops, the 503 past the connection limit in OpenAI's error shape,
and a stream nobody reads. The simulated model; every server binds 127.0.0.1."""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.cli import add_serve_args, serve_limits
from labkit.serve.limits import ServeLimits, default_max_body_bytes
from tests.serve_util import PacedEngine, finish_reasons, scrape, sim_llm, sse_data, wait_until

pytestmark = pytest.mark.timeout(120)

FIVE_MB = 5 * 1000 * 1000
MAX_GAP_S = 0.2
# A stall caused by the server (a body parsed or tokenised on the event loop) happens on every try; a
# gap from the operating system descheduling a thread on a busy 2-core machine does not. So a try whose
# longest gap is past the limit is repeated, and the test fails only when every try stalls.
GAP_TRIES = 3


def post_raw(server, path: str, body: bytes, chunked: bool = False, piece: int = 1 << 16) -> bytes:
    """POST ``body`` over a plain socket as fast as the server takes it (``Content-Length``, or
    ``Transfer-Encoding: chunked`` with no length announced); the whole reply once the server closes."""
    sock = socket.create_connection((server.host, server.port), timeout=30)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Connection: close\r\n{framing}\r\n\r\n".encode())
    try:
        for i in range(0, len(body), piece):
            part = body[i:i + piece]
            sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n" if chunked else part)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass                                  # the server may close once it has answered
    reply = b""
    try:
        while chunk := sock.recv(1 << 16):
            reply += chunk
    except ConnectionResetError:
        pass
    sock.close()
    return reply


def status_and_error(reply: bytes) -> tuple[int, dict]:
    head, _, payload = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(payload)["error"]


class ChunkClock:
    """Streams one long completion on a thread and keeps when each chunk arrived."""

    def __init__(self, server, body: dict):
        self.times: list[float] = []
        self.lines: list[str] = []
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(server, body))
        self._thread.start()
        assert self.started.wait(30), "the stream did not start"

    def _read(self, server, body) -> None:
        with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=60) as resp:
            for line in resp.iter_lines():
                if line:
                    self.times.append(time.monotonic())
                    self.lines.append(line)
                    self.started.set()

    def join(self) -> None:
        self._thread.join(60)

    @property
    def longest_gap_s(self) -> float:
        return max(b - a for a, b in zip(self.times, self.times[1:]))


# 100 steps a second: a chunk every 10 ms, and 250 of them (2.5 s) to cover the big body.
LONG_STREAM = {"model": "sim", "prompt": "keep going", "max_tokens": 250, "ignore_eos": True, "stream": True}


@pytest.fixture
def paced_server(request):
    limits = getattr(request, "param", ServeLimits())
    llm = sim_llm(num_blocks=128, max_num_seqs=8)                       # max_model_len 4096
    with BackgroundServer(ServedModel(PacedEngine(llm.engine, steps_per_s=100), "sim"), limits=limits) as server:
        yield server


# ------------------------------------------------------------------------------ the body limit

def test_the_default_body_limit_is_a_mib_plus_32_bytes_per_token_of_context():
    assert default_max_body_bytes(8192) == (1 << 20) + 32 * 8192
    assert ServeLimits().body_limit(4096) == (1 << 20) + 32 * 4096
    assert ServeLimits(max_body_bytes=5000).body_limit(4096) == 5000


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_past_the_limit_is_a_413_in_openai_shape_before_it_is_parsed(paced_server, chunked):
    limit = default_max_body_bytes(4096)
    status, error = status_and_error(post_raw(paced_server, "/v1/completions", b"x" * (limit + 1), chunked))
    assert status == 413 and error["type"] == "invalid_request_error", error        # not JSON, yet no 400
    assert str(limit) in error["message"] and "--max-body-bytes" in error["message"]
    assert httpx.get(paced_server.base_url + "/health", timeout=10).status_code == 200


def test_a_body_within_the_limit_is_parsed_as_usual(paced_server):
    limit = default_max_body_bytes(4096)
    prompt = "y" * (limit - 200)
    body = json.dumps({"model": "sim", "prompt": prompt, "max_tokens": 1}).encode()
    status, error = status_and_error(post_raw(paced_server, "/v1/completions", body))
    assert status == 400 and error["param"] == "prompt" and "max_model_len" in error["message"]


def gaps_of_tries(one_try) -> list[float]:
    """Run ``one_try`` (which checks its own outcome and returns its stream's longest gap) until a try
    stays within ``MAX_GAP_S``, at most ``GAP_TRIES`` times; every try's gap."""
    gaps = []
    while len(gaps) < GAP_TRIES and (not gaps or gaps[-1] >= MAX_GAP_S):
        gaps.append(one_try())
    return gaps


def test_gaps_of_tries_stops_at_the_first_try_within_the_limit_and_fails_a_stall_on_every_try():
    tries = iter([0.5, 0.05, 0.5])
    assert gaps_of_tries(lambda: next(tries)) == [0.5, 0.05]
    assert gaps_of_tries(lambda: 0.3) == [0.3] * GAP_TRIES                   # min is past the limit


def longest_gaps_beside(server, send) -> tuple[list[float], list[tuple[int, dict]]]:
    """Stream ``LONG_STREAM`` while ``send()`` posts a big body, as ``gaps_of_tries`` repeats it: each try's
    longest gap between chunks and the (status, error) the body got. Each body must be answered while
    its stream still runs, and each stream must end as asked."""
    answers = []

    def one_try() -> float:
        clock = ChunkClock(server, LONG_STREAM)
        answers.append(status_and_error(send()))
        answered_at = time.monotonic()
        clock.join()
        assert answered_at < clock.times[-1]                           # answered while the stream still ran
        assert finish_reasons(sse_data(clock.lines)) == {0: "length"}
        return clock.longest_gap_s
    return gaps_of_tries(one_try), answers


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_running_stream_never_waits_more_than_0_2_s_while_a_5_mb_body_arrives_and_is_refused(
        paced_server, chunked):
    body = json.dumps({"model": "sim", "prompt": "z" * FIVE_MB}).encode()
    gaps, answers = longest_gaps_beside(paced_server, lambda: post_raw(paced_server, "/v1/completions", body, chunked))
    assert all(status == 413 for status, _ in answers), answers
    assert min(gaps) < MAX_GAP_S, gaps


def test_the_body_limit_is_a_serve_option():
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    assert serve_limits(parser.parse_args(["--max-body-bytes", "4096"])).max_body_bytes == 4096
    assert serve_limits(parser.parse_args([])).max_body_bytes is None         # from max_model_len
    with pytest.raises(ValueError, match="max_body_bytes"):
        serve_limits(parser.parse_args(["--max-body-bytes", "0"]))


# ------------------------------------------------------------------------------ the connection limit

def test_past_the_connection_limit_the_503_carries_the_openai_error_body():
    limits = ServeLimits(limit_concurrency=3)
    with BackgroundServer(ServedModel(sim_llm(num_blocks=64).engine, "sim"), limits=limits) as server:
        idle = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(3)]
        time.sleep(0.1)
        resp = httpx.get(server.base_url + "/health", timeout=5)
        for sock in idle:
            sock.close()
    assert resp.status_code == 503 and resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["type"] == "service_unavailable" and "--limit-concurrency" in error["message"]


# ------------------------------------------------------------------------------ a stream nobody reads

def test_a_stream_nobody_reads_is_aborted_after_the_stall_timeout_and_ends_with_abort():
    # n = 32 sequences of 4000 tokens: 32 chunks a step fill the socket buffers in a few seconds,
    # and the request would need several seconds to finish on its own.
    llm = sim_llm(num_blocks=8100, max_num_seqs=32)
    limits = ServeLimits(stalled_stream_timeout_s=0.5)
    with BackgroundServer(ServedModel(llm.engine, "sim"), limits=limits) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)        # the server's writes back up soon
        sock.connect((server.host, server.port))
        body = json.dumps({"model": "sim", "prompt": "unread", "n": 32, "max_tokens": 4000, "ignore_eos": True,
                           "stream": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert wait_until(lambda: scrape(server.base_url)["labkit:num_requests_running"] == 32, 10)
        t0 = time.monotonic()
        assert wait_until(lambda: scrape(server.base_url)["labkit:num_requests_running"] == 0, 20)
        aborted_after_s = time.monotonic() - t0
        generated = scrape(server.base_url)["labkit:generation_tokens_total"]
        reply = b""                                                          # the client reads at last
        sock.settimeout(30)
        while chunk := sock.recv(1 << 16):
            reply += chunk
        sock.close()
    assert generated < 32 * 4000 / 2 and aborted_after_s < 10, (generated, aborted_after_s)
    events = sse_data(line.strip().decode() for line in reply.split(b"\n"))      # between HTTP chunk sizes
    assert finish_reasons(events) == dict.fromkeys(range(32), "abort") and events[-1] == "[DONE]"


# ------------------------------------------------------------------------------ the real tokenizer

class RealTokenizerInputs:
    """The simulated engine's inputs, tokenising with SmolLM2's real tokenizer (the simulated model's
    bytes are too cheap to stall anything). What reaches the engine is checked by its own rules."""

    def __init__(self, inputs, tokenizer):
        self._inputs, self._tokenizer = inputs, tokenizer

    def encode(self, prompt, chat: bool = False):
        if isinstance(prompt, str):
            return self._tokenizer.encode(prompt)
        return self._inputs.encode(prompt, chat=chat)

    def __getattr__(self, name):
        return getattr(self._inputs, name)


class RealTokenizerEngine:
    """The simulated engine with SmolLM2's tokenizer: what the server templates, bounds and tokenises."""

    def __init__(self, engine, tokenizer):
        self._engine, self.tokenizer = engine, tokenizer
        self.inputs = RealTokenizerInputs(engine.inputs, tokenizer)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from labkit.model.loader import resolve_model_dir
    from labkit.model.tokenizer import Tokenizer

    return Tokenizer(resolve_model_dir(None, progress=False))


@pytest.fixture
def real_tokenizer_server(smollm2_tokenizer):
    llm = sim_llm(num_blocks=128, max_num_seqs=8)                       # max_model_len 4096
    llm.engine.inputs.vocab_size = smollm2_tokenizer.vocab_size          # the simulated model takes any id
    engine = PacedEngine(RealTokenizerEngine(llm.engine, smollm2_tokenizer), steps_per_s=100)
    with BackgroundServer(ServedModel(engine, "sim")) as server:
        yield server


def test_the_character_bound_comes_from_the_longest_vocabulary_entry_and_holds_for_it(smollm2_tokenizer):
    from labkit.serve.prompt import longest_token_bytes

    longest = longest_token_bytes(smollm2_tokenizer)
    decoded = [smollm2_tokenizer.decode([i], skip_special_tokens=False) for i in range(smollm2_tokenizer.vocab_size)]
    assert longest == max(len(text.encode()) for text in decoded)                # every entry, one by one
    piece = max(decoded, key=lambda text: len(text.encode()))
    assert len(smollm2_tokenizer.encode(piece)) == 1 and len(piece) == longest   # reached: that many characters
    serving_md = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    assert re.findall(r"stands for at most\s+(\d+) bytes", serving_md) == [str(longest)]        # what the docs say


def test_a_prompt_just_under_the_body_limit_is_refused_unread_without_stalling_a_stream(real_tokenizer_server):
    limit = default_max_body_bytes(4096)
    text = "a quick brown fox. " * ((limit - 300) // 19)           # every word a token: the worst case
    body = json.dumps({"model": "sim", "prompt": text, "max_tokens": 1}).encode()
    assert limit - 400 < len(body) <= limit
    gaps, answers = longest_gaps_beside(real_tokenizer_server,
                                        lambda: post_raw(real_tokenizer_server, "/v1/completions", body))
    for status, error in answers:
        assert status == 400 and error["param"] == "prompt" and "max_model_len" in error["message"], error
    assert min(gaps) < MAX_GAP_S, gaps


def test_30000_messages_are_refused_before_templating_without_stalling_a_stream(real_tokenizer_server):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(30_000)]
    body = json.dumps({"model": "sim", "messages": messages, "max_tokens": 1}, separators=(",", ":")).encode()
    assert len(body) <= default_max_body_bytes(4096)
    gaps, answers = longest_gaps_beside(real_tokenizer_server,
                                        lambda: post_raw(real_tokenizer_server, "/v1/chat/completions", body))
    for status, error in answers:
        assert status == 400 and error["param"] == "messages" and "30000 messages" in error["message"], error
    assert min(gaps) < MAX_GAP_S, gaps


def test_the_longest_prompt_that_could_fit_is_tokenised_without_stalling_a_stream(real_tokenizer_server):
    max_chars = real_tokenizer_server.app.state.prompts.max_chars          # 4095 tokens x the longest entry
    text = ("a quick brown fox. " * (max_chars // 19 + 1))[:max_chars]     # tokenised: ~80,000 tokens
    body = json.dumps({"model": "sim", "prompt": text, "max_tokens": 1}).encode()
    gaps, answers = longest_gaps_beside(real_tokenizer_server,
                                        lambda: post_raw(real_tokenizer_server, "/v1/completions", body))
    for status, error in answers:                                  # tokenised, then too long for the context
        assert status == 400 and "tokens but max_model_len is 4096" in error["message"], error
    assert min(gaps) < MAX_GAP_S, gaps
