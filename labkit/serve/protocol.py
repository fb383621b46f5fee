"""The OpenAI request bodies labkit serve accepts, and their translation into ``SamplingParams``.

Field names and defaults follow the OpenAI API as vLLM's server accepts it (vLLM's extras
``top_k`` and ``ignore_eos`` included). ``null`` means "unset" wherever OpenAI declares a field
nullable: ``"temperature": null`` is the default temperature, as a client that forwards its unset
options as ``None`` expects. Types are otherwise strict: ``"max_tokens": "5"`` and ``"n": true`` are a 400,
not a 5 or a 1; an integer written as a float (``5.0``, JSON has one number type) is that integer,
``5.5`` is a 400 naming the field.
Fields of the OpenAI API that labkit does not implement (``UNSUPPORTED``) are refused with a 400
naming them unless they carry their neutral value (``"presence_penalty": 0`` changes nothing);
other unknown fields are ignored, as vLLM does. Range checks live in ``SamplingParams``, except the
integer bounds pydantic states with the real limit (``max_tokens`` <= 2**31); the ranges are also
written into ``/openapi.json`` (``_documented``) so that the document says what the server accepts.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from labkit.sampling_params import SamplingParams

MAX_STOP_STRINGS = 4          # OpenAI's limit
MAX_STOP_CHARS = 64           # streaming holds back len(longest stop) - 1 characters: keep that short
MAX_TOKENS_LIMIT = 1 << 31    # SamplingParams' bound
MAX_SEED = (1 << 63) - 1      # SamplingParams' bound


def _integral(value):
    """``5.0`` -> ``5``; anything else (``5.5``, ``True``, ``"5"``) is left to the strict int check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def integer(**bounds):
    """An integer field: strict (no bool, no string), but an integral float is its integer. The bounds
    sit on the int itself, so that the document states them (``maximum``, not pydantic's ``le``)."""
    return Annotated[Annotated[int, Field(**bounds)], BeforeValidator(_integral)]

# Field -> the values that mean "not used". Anything else is a feature labkit serve does not have.
UNSUPPORTED: dict[str, tuple] = {
    "tools": ([],), "tool_choice": ("none",), "functions": ([],), "function_call": ("none",),
    "response_format": ({"type": "text"},), "logit_bias": ({},), "top_logprobs": (0,),
    "presence_penalty": (0,), "frequency_penalty": (0,), "repetition_penalty": (1,),
    "min_p": (0,), "min_tokens": (0,), "best_of": (1,), "stop_token_ids": ([],), "suffix": ("",),
    "prompt_logprobs": (), "guided_json": (), "guided_regex": (), "guided_choice": (), "guided_grammar": (),
    "structured_outputs": (), "reasoning_effort": (), "audio": (), "prediction": (), "modalities": (["text"],),
    "web_search_options": (), "verbosity": ("medium",),
}
# OpenAI request fields that are accepted and ignored, because ignoring them changes no token the server
# returns: bookkeeping for the caller's platform (who asked, what to store, which tier, cache routing hints)
# and a switch that means something only with tools, which are refused above. Every other field of OpenAI's
# request types is either implemented here or in ``UNSUPPORTED`` (tests/serve/test_serve_units.py holds that).
IGNORED: dict[str, str] = {
    "user": "who the caller says the end user is",
    "safety_identifier": "who the caller says the end user is",
    "metadata": "tags the platform stores with a stored completion",
    "store": "whether the platform stores the completion",
    "service_tier": "the platform's processing tier",
    "moderation": "the platform's moderation of stored completions",
    "prompt_cache_key": "a routing hint for the platform's prompt cache",
    "prompt_cache_options": "a routing hint for the platform's prompt cache",
    "prompt_cache_retention": "how long the platform keeps a cached prompt",
    "parallel_tool_calls": "meaningful only with tools, which are refused",
}


def unsupported_field(body: dict) -> str | None:
    """The first field of ``body`` that asks for a feature labkit serve does not implement."""
    for name, neutral in UNSUPPORTED.items():
        value = body.get(name)
        neutral_value = not isinstance(value, bool) and any(value == v for v in neutral)
        if value is not None and not neutral_value:
            return name
    return None


def invalid_unicode_field(value, path: str = "") -> str | None:
    """The path (``messages[0].content``) of the first string that is not valid Unicode (a lone
    surrogate such as ``"\\ud800"`` parses as JSON but cannot be encoded, tokenised or echoed)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            found = invalid_unicode_field(str(key), name) or invalid_unicode_field(item, name)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = invalid_unicode_field(item, f"{path}[{i}]")
            if found:
                return found
    return None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: Union[bool, None] = False


def _documented(**bounds) -> dict:
    """JSON-schema bounds for the document only: ``SamplingParams`` checks them, with its own message."""
    return {"json_schema_extra": bounds}


# A stop string as the document states it (``stop_strings`` checks it, with its own message).
StopString = Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_STOP_CHARS})]
# stream_options without stream: true is a 400 (``include_usage``), as in OpenAI's and vLLM's API.
_STREAM_OPTIONS_NEED_STREAM = {
    "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
    "then": {"required": ["stream"], "properties": {"stream": {"const": True}}}}


class _SamplingFields(BaseModel):
    # extra="allow": unknown fields are kept (not used) so that UNSUPPORTED ones can be refused.
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra=_STREAM_OPTIONS_NEED_STREAM)

    model: str
    # None (JSON null) is "unset": the default written beside it (``_or``).
    temperature: Union[float, None] = Field(1.0, **_documented(minimum=0, maximum=100))
    top_p: Union[float, None] = Field(1.0, **_documented(exclusiveMinimum=0, maximum=1))
    top_k: Union[integer(le=MAX_TOKENS_LIMIT), None] = Field(0, **_documented(minimum=-1))
    n: Union[integer(), None] = Field(1, **_documented(minimum=1, maximum=64))
    seed: Union[integer(le=MAX_SEED), None] = Field(None, **_documented(minimum=0))
    stop: Union[StopString, Annotated[list[StopString], Field(json_schema_extra={"maxItems": MAX_STOP_STRINGS})],
                None] = None
    stream: Union[bool, None] = False
    stream_options: Union[StreamOptions, None] = None
    ignore_eos: Union[bool, None] = False

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"stop takes at most {MAX_STOP_STRINGS} strings, got {len(stops)}")
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        longest = max((len(s) for s in stops), default=0)
        if longest > MAX_STOP_CHARS:
            raise ValueError(f"stop strings may have at most {MAX_STOP_CHARS} characters, got one of {longest} "
                             "(streamed text is held back by the longest stop string's length)")
        return stops

    def include_usage(self) -> bool:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self.stream_options is not None and bool(self.stream_options.include_usage)

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """Raises ValueError naming the field (from ``SamplingParams``' own checks)."""
        return SamplingParams(temperature=_or(self.temperature, 1.0), top_p=_or(self.top_p, 1.0),
                              top_k=_or(self.top_k, 0), max_tokens=max_tokens, seed=self.seed, n=_or(self.n, 1),
                              ignore_eos=bool(self.ignore_eos))


def _or(value, default):
    return default if value is None else value


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions``. ``max_tokens`` defaults to 16, as in OpenAI's and vLLM's API."""

    # The string's bound for the document only: pydantic's own length check would refuse a lone surrogate with
    # a vaguer message than ``invalid_unicode_field``'s.
    prompt: Union[Annotated[str, Field(json_schema_extra={"minLength": 1})],
                  Annotated[list[integer(ge=0)], Field(min_length=1)]]
    max_tokens: Union[integer(ge=1, le=MAX_TOKENS_LIMIT), None] = 16
    echo: Union[Literal[False], None] = False   # not supported: say so rather than ignore it
    logprobs: None = None

    def requested_max_tokens(self) -> int:
        return _or(self.max_tokens, 16)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "user", "assistant", "developer"]
    content: Union[str, list[TextPart]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingFields):
    """``POST /v1/chat/completions``. Without ``max_tokens`` a reply may run to the context limit
    (vLLM's default); ``max_completion_tokens`` is the newer name for the same limit."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Union[integer(ge=1, le=MAX_TOKENS_LIMIT), None] = None
    max_completion_tokens: Union[integer(ge=1, le=MAX_TOKENS_LIMIT), None] = None
    logprobs: Union[Literal[False], None] = False   # not supported: say so rather than ignore it

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
