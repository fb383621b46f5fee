"""One streamed request to an OpenAI-compatible server, timed chunk by chunk (httpx, async).

Every request streams (``stream: true``) and asks for the usage chunk
(``stream_options.include_usage``), so output tokens are the server's own count; a server that
sends no usage is counted one token per text chunk.

A request succeeds as in ``vllm bench serve``: HTTP 200 and a stream that ends normally after at
least one valid chunk (or ``data: [DONE]``), whatever text it carried. A stream that ends with none of
the marks of an end — no ``finish_reason``, no usage, no ``[DONE]`` — is *incomplete*: the connection
closed cleanly mid-answer (a proxy, a crashed worker), and it counts against success as its own kind. A reply that ends at once
with the end-of-sequence token is a success with the server's count of output tokens (0, or 1 where
the server counts that token, as ``transformers serve`` does); its TTFT is the time to its first
chunk, and it has no TPOT and no ITL gaps. A request fails on an HTTP error, a transport error, a
chunk that is not an OpenAI stream chunk (or carries an ``error``), a stream that ends without
any valid chunk, a stream the server ended early (``finish_reason`` "abort" or "error": a restart,
a shutdown, an engine failure), and, with ``ignore_eos``, a stream with fewer output tokens than
asked. Its ``error`` says which.

Only the OpenAI API is sent unless asked: a request's output length goes out as ``max_tokens``
(``/v1/completions``) or ``max_completion_tokens`` (chat), which every OpenAI-compatible server
knows. ``ignore_eos: true`` (generate exactly that many tokens) is an extension of vLLM, SGLang and
labkit serve that other servers refuse (``transformers serve``: HTTP 422), so it is opt-in,
as ``vllm bench serve --ignore-eos`` is.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

import httpx

from labkit.serve_bench.client_metrics import RequestRecord
from labkit.serve_bench.workload import BenchRequest

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str
    endpoint: str = "completions"         # or "chat"
    temperature: float = 0.0
    api_key: str | None = None
    ignore_eos: bool = False              # a vLLM / SGLang / labkit extension: opt-in

    def root(self) -> str:
        base = self.base_url.rstrip("/")
        return base[:-3] if base.endswith("/v1") else base

    def url(self) -> str:
        return self.root() + ENDPOINTS[self.endpoint]

    def body(self, req: BenchRequest) -> dict:
        body: dict = {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                      "temperature": self.temperature}
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": req.prompt}]
        else:
            body["prompt"] = req.prompt
        if req.output_len is not None:
            body["max_completion_tokens" if self.endpoint == "chat" else "max_tokens"] = req.output_len
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


FAILED_FINISH_REASONS = ("abort", "error")     # the server ended the stream; the request did not complete
INCOMPLETE = "incomplete: the stream ended without a finish_reason, a usage chunk or [DONE]"


class MalformedChunk(ValueError):
    """A ``data:`` line that is not an OpenAI stream chunk, or one that reports an error."""


def _parse_chunk(data: str) -> dict:
    """The chunk on one ``data:`` line; raises MalformedChunk for anything but a valid chunk."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        raise MalformedChunk(f"malformed chunk (not JSON): {data[:200]!r}") from None
    if isinstance(chunk, dict) and "error" in chunk:
        raise MalformedChunk(f"the server reported an error mid-stream: {json.dumps(chunk['error'])[:300]}")
    choices, usage = (chunk.get("choices"), chunk.get("usage")) if isinstance(chunk, dict) else (None, None)
    valid = (isinstance(choices, list) and all(isinstance(c, dict) for c in choices)
             and (usage is None or isinstance(usage, dict))) or (choices is None and isinstance(usage, dict))
    if not valid:
        raise MalformedChunk(f"malformed chunk (not an OpenAI stream chunk): {data[:200]!r}")
    return chunk


def _finish_reason(chunk: dict) -> str | None:
    reasons = [c.get("finish_reason") for c in chunk.get("choices") or []]
    return next((r for r in reasons if isinstance(r, str)), None)


def shortfall(record: RequestRecord, finish_reason: str | None, counted: bool, target: "Target",
              req: BenchRequest) -> str:
    """Why a stream that ended normally still did not complete ("" if it did). ``counted``: the server
    reported its output tokens (usage); text chunks alone are no count (a chunk may hold several)."""
    if finish_reason in FAILED_FINISH_REASONS:
        return (f"the server ended the stream with finish_reason {finish_reason!r} after {record.output_tokens} "
                "output tokens")
    if counted and target.ignore_eos and req.output_len is not None and record.output_tokens < req.output_len:
        return (f"with ignore_eos the stream ended after {record.output_tokens} of the {req.output_len} output "
                f"tokens asked (finish_reason {finish_reason!r})")
    return ""


def failure_kind(error: str) -> str:
    """A failed request's error, shortened to its kind for a count ("finish_reason 'abort'", "HTTP 503")."""
    if error.startswith("the server ended the stream with finish_reason"):
        return "finish_reason " + error.split("finish_reason ", 1)[1].split(" ", 1)[0]
    if error.startswith("with ignore_eos"):
        return "fewer output tokens than asked (ignore_eos)"
    if error.startswith("incomplete:"):
        return "incomplete (no finish_reason, usage or [DONE])"
    return error.split(":", 1)[0][:80] or "failed"


def _chunk_text(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
    else:
        text = choice.get("text")
    return text if isinstance(text, str) else ""


async def send(client: httpx.AsyncClient, target: Target, req: BenchRequest,
               clock: Callable[[], float] = time.perf_counter, t0: float = 0.0) -> RequestRecord:
    """Send ``req`` and time it; never raises for a failed request (the record says why)."""
    record = RequestRecord()
    st = clock()
    record.start_s = st - t0
    last = st
    first: float | None = None          # when the first valid chunk (or [DONE]) arrived
    text_chunks = 0
    finish_reason: str | None = None
    counted = False                     # the server sent usage
    done = False                        # data: [DONE] arrived
    try:
        async with client.stream("POST", target.url(), json=target.body(req), headers=target.headers()) as resp:
            if resp.status_code != 200:
                record.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return record
            async for line in resp.aiter_lines():
                data = line[len("data:"):].strip() if line.startswith("data:") else None
                if not data:
                    continue
                now = clock()
                if data == "[DONE]":
                    first = now if first is None else first
                    done = True
                    continue
                chunk = _parse_chunk(data)
                first = now if first is None else first
                finish_reason = _finish_reason(chunk) or finish_reason
                text = _chunk_text(chunk)
                if text:
                    if text_chunks == 0:
                        record.ttft_s = now - st
                    else:
                        record.itl_s.append(now - last)
                    last, text_chunks = now, text_chunks + 1
                    record.text += text
                usage = chunk.get("usage")
                if usage:
                    counted = True
                    record.prompt_tokens = usage.get("prompt_tokens") or 0
                    record.output_tokens = usage.get("completion_tokens") or 0
        record.e2el_s = clock() - st
        if first is None:
            record.error = "the stream ended without a single valid chunk (HTTP 200, no data and no [DONE])"
            return record
        if text_chunks == 0:            # an empty completion (e.g. EOS at once): TTFT = its first chunk
            record.ttft_s = first - st
        record.output_tokens = record.output_tokens or text_chunks
        ended = done or counted or finish_reason is not None
        record.error = shortfall(record, finish_reason, counted, target, req) if ended else INCOMPLETE
        record.success = not record.error
    except (httpx.HTTPError, MalformedChunk) as exc:
        record.error = str(exc) if isinstance(exc, MalformedChunk) else f"{type(exc).__name__}: {exc}"
    return record


def probe_metrics(target: Target, timeout_s: float = 5.0) -> str:
    """Whether the server exposes Prometheus ``/metrics``: "available" or "not available (why)".
    Not every OpenAI-compatible server has it (``transformers serve`` answers 404)."""
    try:
        resp = httpx.get(target.root() + "/metrics", headers=target.headers(), timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"not available ({type(exc).__name__}: {exc})"
    if resp.status_code != 200:
        return f"not available (HTTP {resp.status_code})"
    return "available"
