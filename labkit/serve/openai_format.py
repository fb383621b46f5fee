"""The JSON labkit serve sends back: OpenAI's completion and chat-completion objects and chunks."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


@dataclass(frozen=True)
class Header:
    """What every object of one response shares."""

    id: str
    created: int
    model: str


def sse(payload: dict | str) -> str:
    """One server-sent event; the stream ends with ``data: [DONE]``."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


def completion_chunk(h: Header, index: int, text: str, finish_reason: str | None) -> dict:
    return {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def chat_chunk(h: Header, index: int, delta: dict, finish_reason: str | None) -> dict:
    return {"id": h.id, "object": "chat.completion.chunk", "created": h.created, "model": h.model,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(h: Header, obj: str, usage: Usage) -> dict:
    """The extra last chunk of ``stream_options.include_usage``: no choices, only usage."""
    return {"id": h.id, "object": obj, "created": h.created, "model": h.model, "choices": [],
            "usage": usage.as_dict()}


def completion_response(h: Header, texts: list[str], reasons: list[str], usage: Usage) -> dict:
    choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": r}
               for i, (t, r) in enumerate(zip(texts, reasons))]
    return {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model,
            "choices": choices, "usage": usage.as_dict()}


def chat_response(h: Header, texts: list[str], reasons: list[str], usage: Usage) -> dict:
    choices = [{"index": i, "message": {"role": "assistant", "content": t}, "logprobs": None,
                "finish_reason": r} for i, (t, r) in enumerate(zip(texts, reasons))]
    return {"id": h.id, "object": "chat.completion", "created": h.created, "model": h.model,
            "choices": choices, "usage": usage.as_dict()}
