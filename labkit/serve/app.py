"""FastAPI routes of ``labkit serve``: the OpenAI HTTP API over one engine loop.

Handlers validate, enqueue, stream and abort; they never touch the engine (see engine_loop.py).
What a request costs before the engine sees it — the checks that walk every field, the chat template,
tokenising — runs in a small thread pool (``PREPARE_WORKERS``), off the event loop (which serves every
stream) and off the engine loop (which steps every request); what cannot fit the context is refused
before it is templated or tokenised, and tokenising releases the GIL (prompt.py): a 1 MB prompt delays
nobody's next token. The body itself is bounded and read before FastAPI parses it (limits.py: 413, 408).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException

from labkit.sampling_params import SamplingParams
from labkit.serve import openai_format as fmt
from labkit.serve import responses as doc
from labkit.serve.engine_loop import EngineLoop, check_context
from labkit.serve.errors import APIError, bad_value, error_object, error_response, validation_error
from labkit.serve.limits import RequestBody, ServeLimits, unparsable_body
from labkit.serve.prometheus import ServerMetrics
from labkit.serve.prompt import PromptEncoder
from labkit.serve.protocol import ChatCompletionRequest, CompletionRequest, invalid_unicode_field, unsupported_field
from labkit.serve.request_stream import RequestStream

METRICS_TIMEOUT_S = 30.0
PREPARE_WORKERS = 2
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "n", "ignore_eos", "stop",
                   "stream_options")
PROMPT_FIELDS = ("prompt", "n", "max_tokens")
REFUSALS_DOC = ("docs/serving.md", "What the server refuses")     # a heading there (a test checks)


@dataclass(frozen=True)
class ServedModel:
    """The engine behind the server and the name clients must ask for."""

    engine: object
    name: str


@dataclass(frozen=True)
class Prepared:
    """A request ready for the engine loop: token ids that fit the context, and how to sample."""

    prompt_ids: list[int]
    params: SamplingParams
    stop: list[str]
    include_usage: bool


def build_app(served: ServedModel, limits: ServeLimits = ServeLimits()) -> FastAPI:
    metrics = ServerMetrics(served.name)
    loop = EngineLoop(served.engine, metrics)
    pool = ThreadPoolExecutor(PREPARE_WORKERS, thread_name_prefix="labkit-serve-prepare")
    prompts = PromptEncoder(served.engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop.start()
        yield
        loop.stop()
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="labkit serve", lifespan=lifespan,
                  description="An OpenAI-compatible server over one labkit engine.")
    app.state.engine_loop, app.state.metrics, app.state.prompts = loop, metrics, prompts
    app.add_middleware(RequestBody, timeout_s=limits.body_timeout_s,
                       max_bytes=limits.body_limit(served.engine.max_model_len))
    app.openapi = lambda: _openapi(app, served.engine, prompts)
    _add_error_handlers(app)
    _add_info_routes(app, served, loop, metrics)

    async def generate(request: Request, kind: str):
        raw, content_type = await request.body(), request.headers.get("content-type")
        body, prepared = await asyncio.get_running_loop().run_in_executor(
            pool, _parse_and_prepare, served, prompts, raw, content_type, kind)
        return await _generate(request, loop, body, prepared, kind, served.name, limits.stalled_stream_timeout_s)

    # The body is parsed in the pool too (``_parse``), not by FastAPI on the event loop: validating 30,000
    # messages takes a third of a second. The document's request bodies are written out (``_body``).
    @app.post("/v1/completions", responses=doc.generation(doc.Completion, doc.CompletionChunk),
              openapi_extra=_body(CompletionRequest))
    async def create_completion(request: Request):
        return await generate(request, "completion")

    @app.post("/v1/chat/completions", responses=doc.generation(doc.ChatCompletion, doc.ChatCompletionChunk),
              openapi_extra=_body(ChatCompletionRequest))
    async def create_chat_completion(request: Request):
        return await generate(request, "chat")

    return app


def _body(model) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def _add_info_routes(app: FastAPI, served: ServedModel, loop: EngineLoop, metrics: ServerMetrics) -> None:
    created = int(time.time())

    @app.get("/health", response_class=Response, responses=doc.HEALTH)
    async def health():
        if loop.failure is not None:
            return error_response(503, f"the engine failed ({loop.failure}); see the server log")
        if not loop.alive:
            return error_response(503, "the engine loop has stopped")
        return Response(status_code=200)

    card = {"id": served.name, "object": "model", "created": created, "owned_by": "labkit",
            "root": served.name, "max_model_len": served.engine.max_model_len}

    @app.get("/v1/models", response_model=doc.ModelList)
    async def list_models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model:path}", response_model=doc.ModelCard, responses=doc.errors(404))
    async def retrieve_model(model: str):
        _check_model(model, served.name)
        return card

    @app.get("/metrics", response_class=PlainTextResponse, responses=doc.METRICS)
    async def prometheus_metrics():
        try:
            stats = await asyncio.wait_for(asyncio.wrap_future(loop.snapshot()), METRICS_TIMEOUT_S)
        except asyncio.TimeoutError:
            return error_response(503, "the engine loop did not answer (stopped or stuck in a step)")
        except Exception as exc:
            return error_response(500, f"engine.stats() failed: {type(exc).__name__}: {exc}")
        return Response(metrics.render(stats), media_type="text/plain; version=0.0.4; charset=utf-8")


def _openapi(app: FastAPI, engine, prompts: PromptEncoder) -> dict:
    """FastAPI's document, made to describe the server that answers: its errors are 400 / 404 / 408 /
    413 / 500 / 503 with the OpenAI error body (never FastAPI's 422), the stream chunks and the error
    body are in ``components.schemas``, and the request bodies carry this engine's bounds."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for path in schema["paths"].values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        models = [(m, "serialization") for m in (doc.ErrorResponse, *doc.STREAM_MODELS)]
        # The request bodies again, as pydantic writes them: FastAPI's document model holds bounds as floats,
        # and 2**63 - 1 as a float is 2**63 (a seed the document would allow and the server refuse).
        models += [(m, "validation") for m in (CompletionRequest, ChatCompletionRequest)]
        _, defs = models_json_schema(models, ref_template="#/components/schemas/{model}")
        components.update(defs.get("$defs", {}))
        _engine_bounds(components, engine, prompts)
        app.openapi_schema = schema
    return app.openapi_schema


def _engine_bounds(components: dict, engine, prompts: PromptEncoder) -> None:
    """What this engine accepts, field by field: a reply shorter than the context (a prompt has at least one
    token), at most ``max_num_seqs`` choices, token ids in the vocabulary, and the prompt bounds checked
    before tokenising (prompt.py). What no field alone says — prompt + max_tokens must fit the context, and
    the KV pool — is a 400 naming ``max_tokens`` or the prompt."""
    longest_reply = engine.max_model_len - 1
    max_num_seqs = getattr(getattr(engine, "config", None), "max_num_seqs", 64)
    for name, limits in (("CompletionRequest", ("max_tokens",)),
                         ("ChatCompletionRequest", ("max_tokens", "max_completion_tokens"))):
        fields = components[name]["properties"]
        for field in limits:
            _branch(fields[field], "integer")["maximum"] = longest_reply
        fields["n"]["maximum"] = min(fields["n"]["maximum"], max_num_seqs)
    prompt = components["CompletionRequest"]["properties"]["prompt"]
    ids = _branch(prompt, "array")
    ids["maxItems"], ids["items"]["maximum"] = longest_reply, engine.inputs.vocab_size - 1
    if prompts.max_chars is not None:
        _branch(prompt, "string")["maxLength"] = prompts.max_chars
    if prompts.max_messages is not None:
        components["ChatCompletionRequest"]["properties"]["messages"]["maxItems"] = prompts.max_messages


def _branch(field: dict, json_type: str) -> dict:
    return next(branch for branch in field["anyOf"] if branch.get("type") == json_type)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        response = error_response(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})          # 405: Allow
        return response


# ------------------------------------------------------------------------------ preparing (the pool)

def _parse_and_prepare(served: ServedModel, prompts: PromptEncoder, raw: bytes, content_type: str | None,
                       kind: str) -> tuple[CompletionRequest | ChatCompletionRequest, Prepared]:
    body = _parse(prompts, raw, content_type, kind)
    return body, _prepare(served, prompts, body, kind)


def _parse(prompts: PromptEncoder, raw: bytes, content_type: str | None, kind: str):
    """The request body, validated; what cannot fit the context is refused before it is validated (a
    third of a second for 30,000 messages, with the GIL held)."""
    if not _json_content_type(content_type):
        raise APIError(400, "the request body must be JSON sent with Content-Type: application/json; this one "
                            f"came as {content_type!r}")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise APIError(400, unparsable_body(raw)) from None
    if isinstance(data, dict) and kind == "chat" and isinstance(data.get("messages"), list):
        prompts.check_messages(len(data["messages"]))
    elif isinstance(data, dict) and kind == "completion" and isinstance(data.get("prompt"), str):
        prompts.check_chars(data["prompt"], "prompt")
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(list(exc.errors())) from None


def _json_content_type(value: str | None) -> bool:
    """No Content-Type (as FastAPI takes it), application/json, or application/*+json."""
    if not value:
        return True
    kind = value.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _prepare(served: ServedModel, prompts: PromptEncoder, body, kind: str) -> Prepared:
    """Checks, chat template and tokenising: every cost that grows with the body. Runs in the pool. What
    cannot fit the context is refused before it is walked, templated or tokenised (prompt.py)."""
    field = "prompt" if kind == "completion" else "messages"
    _check_request(body, served.name)
    engine = served.engine
    if kind == "chat":
        text = prompts.render_chat([{"role": m.role, "content": m.text()} for m in body.messages])
        prompt_ids = prompts.encode(text, "messages")
        max_tokens = body.requested_max_tokens()
        if max_tokens is None:           # vLLM's default: up to the context limit
            max_tokens = max(1, engine.max_model_len - len(prompt_ids))
    else:
        max_tokens = body.requested_max_tokens()
    try:
        stop, include_usage = body.stop_strings(), body.include_usage()
        params = body.sampling_params(max_tokens)
    except ValueError as exc:
        raise bad_value(exc, SAMPLING_FIELDS) from None
    if kind == "completion":
        prompt_ids = prompts.encode(body.prompt, "prompt")
    try:
        engine.inputs.check_fits(len(prompt_ids), params)
        check_context(len(prompt_ids), params.max_tokens, engine.max_model_len)
    except ValueError as exc:
        raise bad_value(exc, PROMPT_FIELDS, field) from None
    return Prepared(prompt_ids, params, stop, include_usage)


def _check_request(body, served_name: str) -> None:
    """What the types alone do not catch: text that is not Unicode, features we lack, the model."""
    fields = body.model_dump()
    bad_text = invalid_unicode_field(fields)
    if bad_text is not None:
        raise APIError(400, f"{bad_text} is not valid Unicode text (it holds a lone surrogate)", bad_text)
    unsupported = unsupported_field(fields)
    if unsupported is not None:
        raise APIError(400, f"{unsupported} is not supported by labkit serve; leave it out or send its neutral "
                            f"value (see {REFUSALS_DOC[0]}, section \"{REFUSALS_DOC[1]}\")", unsupported)
    _check_model(body.model, served_name)


def _check_model(model: str, served_name: str) -> None:
    if model != served_name:
        raise APIError(404, f"The model `{model}` does not exist; this server serves `{served_name}` "
                            "(GET /v1/models)", "model", "model_not_found")


# ------------------------------------------------------------------------------ generating (the event loop)

async def _generate(request: Request, loop: EngineLoop, body, prepared: Prepared, kind: str, model: str,
                    stall_timeout_s: float):
    prefix = "cmpl" if kind == "completion" else "chatcmpl"
    header = fmt.Header(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model)
    stream = RequestStream(loop, header.id, prepared.prompt_ids, prepared.params, prepared.stop, stall_timeout_s)
    refused = await stream.start()
    if refused is not None and refused.status != 400:
        raise APIError(refused.status, refused.message)       # 503 while shutting down or down, 500 on a bug
    if refused is not None:
        raise bad_value(ValueError(refused.message), PROMPT_FIELDS, "prompt" if kind == "completion" else "messages")
    if body.stream:
        return StreamingResponse(_sse_events(stream, header, kind, prepared.include_usage),
                                 media_type="text/event-stream")
    return await _collect_unless_disconnected(request, stream, header, kind)


async def _sse_events(stream: RequestStream, header: fmt.Header, kind: str, include_usage: bool):
    """The chunks, then (if the request failed) one error event, the usage chunk if asked, ``[DONE]``.

    A chat choice's ``{"role": "assistant"}`` goes out in its first chunk, with its first token, not in a
    chunk of its own before prefill: a client that times TTFT to the first chunk with choices (vLLM's
    benchmark) and one that times it to the first text then measure the same thing."""
    failed = False
    introduced: set[int] = set()        # chat choices whose role went out (with their first token)
    try:
        async for d in stream.deltas():
            if kind == "chat":
                delta = {"content": d.text} if d.text or d.finish_reason is None else {}
                if d.index not in introduced:
                    introduced.add(d.index)
                    delta = {"role": "assistant", "content": d.text}
                yield fmt.sse(fmt.chat_chunk(header, d.index, delta, d.finish_reason))
            else:
                yield fmt.sse(fmt.completion_chunk(header, d.index, d.text, d.finish_reason))
            if d.finish_reason == "error" and not failed:
                failed = True
                yield fmt.sse(error_object(500, d.error or "the request failed in the engine"))
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
    return JSONResponse(collect.result())          # raises the APIError of a failed request


async def _collect(stream: RequestStream, header: fmt.Header, kind: str) -> dict:
    texts = [""] * stream.n
    async for d in stream.deltas():
        texts[d.index] += d.text
    reasons = [stream.finish_reasons[i] for i in range(stream.n)]
    if "error" in reasons:
        raise APIError(500, next(iter(stream.errors.values()), "the request failed in the engine"))
    build = fmt.chat_response if kind == "chat" else fmt.completion_response
    return build(header, texts, reasons, stream.usage())


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
