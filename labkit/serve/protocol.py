"""The OpenAI request bodies labkit serve accepts, and their translation into ``SamplingParams``.

Field names and defaults follow the OpenAI API as vLLM's server accepts it (vLLM's extras
``top_k`` and ``ignore_eos`` included). Types are strict: ``"max_tokens": "5"`` is a 400, not a 5.
Unknown fields are ignored, as vLLM does. Range checks live in one place, ``SamplingParams``.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from labkit.sampling_params import SamplingParams

MAX_STOP_STRINGS = 4          # OpenAI's limit


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    seed: Union[int, None] = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: Union[StreamOptions, None] = None
    ignore_eos: bool = False

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"stop takes at most {MAX_STOP_STRINGS} strings, got {len(stops)}")
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        return stops

    def include_usage(self) -> bool:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self.stream_options is not None and self.stream_options.include_usage

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """Raises ValueError naming the field (from ``SamplingParams``' own checks)."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_tokens=max_tokens, seed=self.seed, n=self.n, ignore_eos=self.ignore_eos)


class CompletionRequest(_SamplingFields):
    """``POST /v1/completions``. ``max_tokens`` defaults to 16, as in OpenAI's and vLLM's API."""

    prompt: Union[str, list[int]]
    max_tokens: int = 16
    echo: Literal[False] = False            # not supported: say so rather than ignore it
    logprobs: None = None


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
    max_tokens: Union[int, None] = None
    max_completion_tokens: Union[int, None] = None
    logprobs: Literal[False] = False        # not supported: say so rather than ignore it

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
