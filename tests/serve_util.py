"""Helpers for the serve and bench tests: a tiny random Llama, servers on free loopback ports,
and a reader of the Prometheus text that ``/metrics`` returns."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from labkit import LLM, EngineConfig
from labkit.serve import BackgroundServer, ServedModel
from labkit.serve.server import bind


@contextmanager
def serving(llm: LLM, name: str):
    """Serve ``llm`` on 127.0.0.1 at a free port for the block's duration."""
    with BackgroundServer(ServedModel(llm.engine, name)) as server:
        yield server


def sim_llm(**config) -> LLM:
    return LLM(model="sim", config=EngineConfig(**config))


def scrape(base_url: str) -> dict[str, float]:
    """``/metrics`` as {"name{labels}": value}, and {"name": value} summed over labels."""
    text = httpx.get(base_url + "/metrics", timeout=30).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        values[key] = float(value)
        name = key.split("{", 1)[0]
        if name != key:
            values[name] = values.get(name, 0.0) + float(value)
    return values


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


# ------------------------------------------------------------------ a server that knows only OpenAI

OPENAI_FIELDS = {"model", "prompt", "messages", "stream", "stream_options", "temperature", "top_p", "n",
                 "max_tokens", "max_completion_tokens", "stop", "seed", "user"}


def strict_openai_app(bodies: list[dict]):
    """An OpenAI-compatible stand-in as strict as ``transformers serve``: any field outside the
    OpenAI API is a 422 ``Unexpected fields``, and there is no ``/metrics``. It streams one word
    per requested token and reports that count in ``usage``; it records every body it gets."""
    app = FastAPI()

    async def answer(request: Request, chat: bool):
        body = await request.json()
        bodies.append(body)
        unexpected = set(body) - OPENAI_FIELDS
        if unexpected:
            return JSONResponse({"detail": f"Unexpected fields in the request: {unexpected}"}, status_code=422)
        n = body.get("max_completion_tokens") or body.get("max_tokens") or 16

        def chunk(text: str | None, extra: dict) -> str:
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            return "data: " + json.dumps({"choices": [choice], **extra}) + "\n\n"

        def events():
            for i in range(n):
                yield chunk(f" w{i}", {})
            yield chunk("", {"usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    return app


@contextmanager
def running(app):
    """``with running(app) as base_url: ...``: any ASGI app under uvicorn on 127.0.0.1, a free port."""
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, timeout=20), "the server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def strict_openai_server():
    """``with strict_openai_server() as (base_url, bodies): ...`` on 127.0.0.1, a free port."""
    bodies: list[dict] = []
    with running(strict_openai_app(bodies)) as base_url:
        yield base_url, bodies


# ------------------------------------------------------------------ the simulated model at a fixed pace

class PacedEngine:
    """An engine whose every step takes at least ``1 / steps_per_s`` seconds of wall time. The simulated
    model steps as fast as the CPU allows; a test that watches streams over time (gaps between chunks,
    a request that arrives while others run) fixes the rate instead. Everything else is the engine's."""

    def __init__(self, engine, steps_per_s: float):
        self._engine, self._period = engine, 1.0 / steps_per_s

    def step(self):
        t0 = time.monotonic()
        outputs = self._engine.step()
        time.sleep(max(0.0, self._period - (time.monotonic() - t0)))
        return outputs

    def __getattr__(self, name):
        return getattr(self._engine, name)


def sse_data(lines) -> list:
    """The ``data:`` payloads of a server-sent event stream: dicts, and the final ``"[DONE]"``."""
    events = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def finish_reasons(events: list) -> dict[int, str]:
    """Choice index -> its finish_reason, over a stream's chunks."""
    return {c["index"]: c["finish_reason"] for e in events if isinstance(e, dict)
            for c in e.get("choices") or [] if c.get("finish_reason")}


def completion_text(events: list) -> str:
    return "".join(c.get("text") or (c.get("delta") or {}).get("content") or "" for e in events
                   if isinstance(e, dict) for c in e.get("choices") or [])
