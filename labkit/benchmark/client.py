"""One streamed request to an OpenAI-compatible server, timed chunk by chunk (httpx, async).

Every request streams (``stream: true``) and asks for the usage chunk
(``stream_options.include_usage``), so output tokens are the server's own count; a server that
sends no usage is counted one token per text chunk.

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

from labkit.benchmark.metrics import RequestRecord
from labkit.benchmark.workload import BenchRequest

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


def _chunk_text(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        return (choice.get("delta") or {}).get("content") or ""
    return choice.get("text") or ""


async def send(client: httpx.AsyncClient, target: Target, req: BenchRequest,
               clock: Callable[[], float] = time.perf_counter, t0: float = 0.0) -> RequestRecord:
    """Send ``req`` and time it; never raises for a failed request (the record says why)."""
    record = RequestRecord()
    st = clock()
    record.start_s = st - t0
    last = st
    chunks = 0
    try:
        async with client.stream("POST", target.url(), json=target.body(req), headers=target.headers()) as resp:
            if resp.status_code != 200:
                record.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:300]}"
                return record
            async for line in resp.aiter_lines():
                data = line[len("data:"):].strip() if line.startswith("data:") else None
                if not data or data == "[DONE]":
                    continue
                chunk = json.loads(data)
                now = clock()
                text = _chunk_text(chunk)
                if text:
                    if chunks == 0:
                        record.ttft_s = now - st
                    else:
                        record.itl_s.append(now - last)
                    last, chunks = now, chunks + 1
                    record.text += text
                usage = chunk.get("usage")
                if usage:
                    record.prompt_tokens = usage.get("prompt_tokens") or 0
                    record.output_tokens = usage.get("completion_tokens") or 0
        record.e2el_s = clock() - st
        record.output_tokens = record.output_tokens or chunks
        record.success = chunks > 0
        if not record.success:
            record.error = "the stream carried no text"
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
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
