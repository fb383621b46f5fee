"""What labkit serve answers, as the schemas of ``/openapi.json``: OpenAI's completion and chat-completion
objects, their stream chunks, the error body, and each route's status codes.

openai_format.py builds the same objects as plain dicts (one per streamed token: no model is built on
the hot path); tests/serve/test_serve_openapi.py checks every dict against these models, and a schemathesis
pass checks the server's answers against the document.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel

FinishReason = Literal["stop", "length", "abort", "error"]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Union[str, None]
    code: Union[str, None]


class ErrorResponse(BaseModel):
    """Every error labkit serve answers (OpenAI's shape); ``param`` names the offending field."""

    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: FinishReason


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None
    finish_reason: FinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChunkChoice(BaseModel):
    index: int
    text: str
    logprobs: None
    finish_reason: Union[FinishReason, None]


class CompletionChunk(BaseModel):
    """One ``data:`` event of a streamed completion; with ``stream_options.include_usage`` the last
    one has no choices and the usage."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Union[Usage, None] = None


class ChatDelta(BaseModel):
    role: Union[Literal["assistant"], None] = None
    content: Union[str, None] = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: None
    finish_reason: Union[FinishReason, None]


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Union[Usage, None] = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


# ------------------------------------------------------------------------------ route responses

# Always JSON, whatever the route's own media type (/metrics answers text/plain); the schema is added to
# the document's components by app._openapi.
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
_ERROR_DESCRIPTIONS = {
    400: "A bad request: the message names the field (`param`)",
    404: "No such model (`param`: model) or route",
    408: "The request body did not arrive within --body-timeout",
    413: "The request body is larger than --max-body-bytes (refused before it is parsed)",
    500: "The request failed in the engine (without streaming; a stream ends with an error event instead)",
    503: "Past --limit-concurrency, shutting down, or the engine is down",
}


def errors(*statuses: int, **descriptions: str) -> dict:
    """``responses=`` entries for these error statuses, each with the OpenAI error body
    (``descriptions``: ``s500="..."`` replaces a status's description)."""
    return {s: {"description": descriptions.get(f"s{s}", _ERROR_DESCRIPTIONS[s]), "content": _ERROR_CONTENT}
            for s in statuses}


def _sse(chunk: type[BaseModel]) -> dict:
    """``text/event-stream`` (FastAPI's form, OpenAPI 3.2's ``itemSchema``): each event's ``data`` is a
    chunk, or an error body if the request fails mid-stream, and the last one is the literal ``[DONE]``."""
    json_data = {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"anyOf": [{"$ref": f"#/components/schemas/{chunk.__name__}"},
                                             {"$ref": "#/components/schemas/ErrorResponse"}]}}
    done = {"const": "[DONE]", "description": "the last event"}
    return {"itemSchema": {"type": "object", "required": ["data"],
                           "properties": {"data": {"anyOf": [json_data, done]}}}}


def generation(body: type[BaseModel], chunk: type[BaseModel]) -> dict:
    """The 200 of ``/v1/completions`` or ``/v1/chat/completions``: JSON, or SSE with ``stream: true``."""
    return {200: {"model": body, "description": f"a {body.__name__}, or with stream: true a stream of "
                                                f"{chunk.__name__} events",
                  "content": {"text/event-stream": _sse(chunk)}},
            **errors(400, 404, 408, 413, 500, 503)}


METRICS = {200: {"description": "Prometheus text format (vLLM's metric names under labkit:)",
                 "content": {"text/plain": {"schema": {"type": "string"}}}},
           **errors(500, 503, s500="engine.stats() failed", s503="The engine loop did not answer, or past "
                                                                  "--limit-concurrency")}
HEALTH = {200: {"description": "The engine loop runs and its engine has not failed", "content": {}},
          **errors(503, s503="The engine failed (see the server log), the loop stopped, or past --limit-concurrency")}

# Chunk models no route returns as its JSON body: listed so the document carries their schemas.
STREAM_MODELS = (CompletionChunk, ChatCompletionChunk)
