"""FastAPI routes of ``labkit serve``: the OpenAI HTTP API over one engine loop.

Handlers validate, enqueue, stream and abort; they never touch the engine (see engine_loop.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from labkit.serve import openai_format as fmt
from labkit.serve.engine_loop import EngineLoop
from labkit.serve.errors import APIError, bad_value, error_response, validation_error
from labkit.serve.metrics import ServerMetrics
from labkit.serve.protocol import ChatCompletionRequest, CompletionRequest, invalid_unicode_field, unsupported_field
from labkit.serve.request_stream import RequestStream

METRICS_TIMEOUT_S = 30.0
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "n", "ignore_eos", "stop",
                   "stream_options")


@dataclass(frozen=True)
class ServedModel:
    """The engine behind the server and the name clients must ask for."""

    engine: object
    name: str


def build_app(served: ServedModel) -> FastAPI:
    metrics = ServerMetrics(served.name)
    loop = EngineLoop(served.engine, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop.start()
        yield
        loop.stop()

    app = FastAPI(title="labkit serve", lifespan=lifespan)
    app.state.engine_loop, app.state.metrics = loop, metrics
    _add_error_handlers(app)
    _add_info_routes(app, served, loop, metrics)

    @app.post("/v1/completions")
    async def create_completion(body: CompletionRequest, request: Request):
        _check_request(body, served.name)
        return await _generate(request, loop, body, body.prompt, body.max_tokens, "completion", served.name)

    @app.post("/v1/chat/completions")
    async def create_chat_completion(body: ChatCompletionRequest, request: Request):
        _check_request(body, served.name)
        engine = served.engine
        prompt_ids = engine.tokenizer.encode(_render_chat(engine.tokenizer, body))
        max_tokens = body.requested_max_tokens()
        if max_tokens is None:           # vLLM's default: up to the context limit
            max_tokens = max(1, engine.max_model_len - len(prompt_ids))
        return await _generate(request, loop, body, prompt_ids, max_tokens, "chat", served.name)

    return app


def _add_info_routes(app: FastAPI, served: ServedModel, loop: EngineLoop, metrics: ServerMetrics) -> None:
    created = int(time.time())

    @app.get("/health")
    async def health():
        if not loop.alive:
            return error_response(503, "the engine loop has stopped")
        return Response(status_code=200)

    @app.get("/v1/models")
    async def list_models():
        card = {"id": served.name, "object": "model", "created": created, "owned_by": "labkit",
                "root": served.name, "max_model_len": served.engine.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus_metrics():
        try:
            stats = await asyncio.wait_for(asyncio.wrap_future(loop.snapshot()), METRICS_TIMEOUT_S)
        except asyncio.TimeoutError:
            return error_response(503, "the engine loop did not answer (stopped or stuck in a step)")
        except Exception as exc:
            return error_response(500, f"engine.stats() failed: {type(exc).__name__}: {exc}")
        return Response(metrics.render(stats), media_type="text/plain; version=0.0.4; charset=utf-8")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(exc.status_code, str(exc.detail))


def _check_request(body, served_name: str) -> None:
    """What the types alone do not catch: text that is not Unicode, features we lack, the model."""
    fields = body.model_dump()
    bad_text = invalid_unicode_field(fields)
    if bad_text is not None:
        raise APIError(400, f"{bad_text} is not valid Unicode text (it holds a lone surrogate)", bad_text)
    unsupported = unsupported_field(fields)
    if unsupported is not None:
        raise APIError(400, f"{unsupported} is not supported by labkit serve; leave it out or send its neutral "
                            "value (README: Serve and benchmark)", unsupported)
    _check_model(body.model, served_name)


def _check_model(model: str, served_name: str) -> None:
    if model != served_name:
        raise APIError(404, f"The model `{model}` does not exist; this server serves `{served_name}` "
                            "(GET /v1/models)", "model", "model_not_found")


def _render_chat(tokenizer, body: ChatCompletionRequest) -> str:
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    if getattr(tokenizer, "has_chat_template", False):
        try:
            return tokenizer.apply_chat_template(messages)
        except ValueError as exc:
            raise APIError(400, str(exc), "messages") from None
    # A model without a template (the simulated one): the turns, one per line.
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"


async def _generate(request: Request, loop: EngineLoop, body, prompt, max_tokens: int, kind: str,
                    model: str):
    try:
        stop, include_usage = body.stop_strings(), body.include_usage()
        params = body.sampling_params(max_tokens)
    except ValueError as exc:
        raise bad_value(exc, SAMPLING_FIELDS) from None
    prefix = "cmpl" if kind == "completion" else "chatcmpl"
    header = fmt.Header(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model)
    stream = RequestStream(loop, header.id, prompt, params, stop)
    refused = await stream.start()
    if refused is not None and refused.status != 400:
        raise APIError(refused.status, refused.message)       # 503 while shutting down, 500 on a bug
    if refused is not None:
        raise bad_value(ValueError(refused.message), ("prompt", "n", "max_tokens"),
                        "prompt" if kind == "completion" else "messages")
    if body.stream:
        return StreamingResponse(_sse_events(stream, header, kind, include_usage),
                                 media_type="text/event-stream")
    return await _collect_unless_disconnected(request, stream, header, kind)


async def _sse_events(stream: RequestStream, header: fmt.Header, kind: str, include_usage: bool):
    try:
        if kind == "chat":
            for index in range(stream.n):
                yield fmt.sse(fmt.chat_chunk(header, index, {"role": "assistant", "content": ""}, None))
        async for d in stream.deltas():
            if kind == "chat":
                delta = {"content": d.text} if d.text or d.finish_reason is None else {}
                yield fmt.sse(fmt.chat_chunk(header, d.index, delta, d.finish_reason))
            else:
                yield fmt.sse(fmt.completion_chunk(header, d.index, d.text, d.finish_reason))
        if include_usage:
            obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
            yield fmt.sse(fmt.usage_chunk(header, obj, stream.usage()))
        yield fmt.sse("[DONE]")
    finally:                      # also when the client disconnects and starlette cancels us
        stream.close()


async def _collect_unless_disconnected(request: Request, stream: RequestStream, header: fmt.Header,
                                       kind: str) -> JSONResponse:
    collect = asyncio.ensure_future(_collect(stream, header, kind))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():
            collect.cancel()
        stream.close()
    if not collect.done() or collect.cancelled():
        return error_response(499, "client disconnected")
    return JSONResponse(collect.result())


async def _collect(stream: RequestStream, header: fmt.Header, kind: str) -> dict:
    texts = [""] * stream.n
    async for d in stream.deltas():
        texts[d.index] += d.text
    reasons = [stream.finish_reasons[i] for i in range(stream.n)]
    build = fmt.chat_response if kind == "chat" else fmt.completion_response
    return build(header, texts, reasons, stream.usage())


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
