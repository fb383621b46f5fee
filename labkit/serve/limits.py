"""What a slow, greedy or absent client may hold: time to send its headers, time and bytes to send
its body, connections open at once, and output nobody reads.

uvicorn times out idle keep-alive connections, but a client that sends half its headers, or its
headers and no body, is waited for forever, and a body of any size is read into memory. Small layers
close those gaps, each before the request costs anyone else anything::

    connection made ──► headers complete ──► body complete ──► the app ──► streamed output
         └─ header_timeout_s ─┘ (protocol)   └─ body_timeout_s, ─┘          └─ stalled_stream_timeout_s
                                                max_body_bytes                  (request_stream.py)
                                                (ASGI layer: 408, 413)

The header clock also runs for the next request on a keep-alive connection, from its first byte.
Past ``limit_concurrency`` connections or requests a request gets a 503 with the OpenAI error body
(uvicorn's own 503 is plain text; this protocol answers in its place).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

# The default body limit: room for a prompt that fills the whole context, however it is written. As
# JSON token ids a token takes at most 7 bytes ("49151, "); as text about 4 bytes of UTF-8 on average,
# 6 per character when JSON-escaped ("\u4e2d"). 32 bytes a token is generous for both; the MiB holds
# the rest of the request (messages, stop strings, options).
BODY_BYTES_PER_TOKEN = 32
BODY_BYTES_BASE = 1 << 20


def default_max_body_bytes(max_model_len: int) -> int:
    """``--max-body-bytes`` unless given: 1 MiB + 32 bytes per token of ``max_model_len``
    (SmolLM2's 8192 tokens: 1.25 MiB)."""
    return BODY_BYTES_BASE + BODY_BYTES_PER_TOKEN * max_model_len


@dataclass(frozen=True)
class ServeLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    limit_concurrency: int = 256            # connections + requests in flight; past it, 503
    timeout_graceful_shutdown: int = 5      # seconds open streams get to end after SIGTERM / SIGINT
    max_body_bytes: int | None = None       # None: default_max_body_bytes(the engine's max_model_len)
    stalled_stream_timeout_s: float = 30.0  # a stream whose client reads nothing this long while output waits is aborted
    # An idle keep-alive connection is closed after this many seconds: longer than httpx's (so the official
    # openai client's) 5 s, so that the client lets go first. With both at 5 s (uvicorn's default) a request
    # sent as the server closes the connection is lost with a reset and no response.
    timeout_keep_alive: int = 10

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "timeout_graceful_shutdown", "stalled_stream_timeout_s",
                     "timeout_keep_alive"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.limit_concurrency < 1:
            raise ValueError(f"limit_concurrency must be >= 1, got {self.limit_concurrency!r}")
        if self.max_body_bytes is not None and not (isinstance(self.max_body_bytes, int) and self.max_body_bytes >= 1):
            raise ValueError(f"max_body_bytes must be an int >= 1 (or None: from max_model_len), "
                             f"got {self.max_body_bytes!r}")

    def body_limit(self, max_model_len: int) -> int:
        return self.max_body_bytes if self.max_body_bytes is not None else default_max_body_bytes(max_model_len)


def error_body(status: int, message: str, error_type: str) -> bytes:
    """OpenAI's error shape (errors.py) for the layers below FastAPI, which answer on their own."""
    return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": None}}).encode()


def limited_protocol(header_timeout_s: float, limit_concurrency: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers do not complete in time, and
    answering past ``limit_concurrency`` with an OpenAI 503 (give uvicorn ``limit_concurrency=None``)."""

    class LimitedH11(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.app = ConcurrencyGate(self.app, limit_concurrency, self.connections, self.tasks)

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._between_requests():
                self._arm()
            super().data_received(data)
            if not self._between_requests():
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.logger.info("closing a connection whose request headers took over %ss", header_timeout_s)
                self.transport.close()

    return LimitedH11


class ConcurrencyGate:
    """uvicorn's ``limit_concurrency`` rule (connections or requests at the limit: 503), answered in
    OpenAI's error shape. ``tasks`` already holds this request's own task when it runs."""

    def __init__(self, app, limit: int, connections: set, tasks: set):
        self.app, self.limit, self.connections, self.tasks = app, limit, connections, tasks

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and (len(self.connections) >= self.limit or len(self.tasks) > self.limit):
            message = (f"the server is at its limit of {self.limit} connections and requests "
                       "(--limit-concurrency); retry later")
            return await _send_error(send, 503, message, "service_unavailable")
        return await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    def __init__(self, ended: bool):
        super().__init__()
        self.ended = ended          # the chunk that passed the limit was the body's last


class RequestBody:
    """ASGI layer: read the whole request body within ``timeout_s`` (else 408) and at most
    ``max_bytes`` of it (else 413), before anything parses it; then hand the app the complete body.

    A ``Content-Length`` past the limit is refused as soon as the headers arrive; a chunked body as
    soon as its bytes pass the limit. What the client still sends is read and dropped until its body
    ends or ``timeout_s`` runs out (a lingering close, as nginx does), so a client that writes its
    whole body before reading sees the 413 rather than a reset connection."""

    def __init__(self, app, timeout_s: float, max_bytes: int):
        self.app, self.timeout_s, self.max_bytes = app, timeout_s, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            return await self._too_large(scope, receive, send, f"the request body has {declared} bytes",
                                         linger=_header(scope, b"expect") != b"100-continue")
        try:
            body = await asyncio.wait_for(_read_body(receive, self.max_bytes), self.timeout_s)
        except asyncio.TimeoutError:
            return await _send_error(send, 408, f"the request body did not arrive within {self.timeout_s:g} s",
                                     "timeout")
        except BodyTooLarge as exc:
            return await self._too_large(scope, receive, send, "the request body passed the limit",
                                         linger=not exc.ended)
        if body is None:                   # the client went away mid-body
            return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send, what: str, linger: bool) -> None:
        """``linger``: read and drop the rest of the body (not when it has all arrived, nor when the client
        waits for a 100 Continue before sending it)."""
        message = (f"{what}, more than this server's limit of {self.max_bytes} bytes (--max-body-bytes; by "
                   "default 1 MiB + 32 bytes per token of max_model_len)")
        payload = error_body(413, message, "invalid_request_error")
        await send(_error_start(413, len(payload)))
        await send({"type": "http.response.body", "body": payload, "more_body": True})
        if linger:
            try:
                await asyncio.wait_for(_discard_body(receive), self.timeout_s)
            except asyncio.TimeoutError:
                pass
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def unparsable_body(body: bytes) -> str:
    """Why a body that ``json.loads`` refused is not JSON: its UTF-8, its nesting, or its syntax."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"the request body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start}); "
                "JSON must be UTF-8")
    try:
        json.loads(text)
    except RecursionError:
        return "the request body is JSON nested too deeply to parse; an OpenAI request needs only a few levels"
    except ValueError as exc:
        return f"the request body is not valid JSON: {exc}"
    return "the request body could not be parsed as JSON"


def _header(scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope.get("headers", ()) if key.lower() == name), None)


def _content_length(scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None                        # h11 refuses a malformed Content-Length before we see it


async def _read_body(receive, max_bytes: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(ended=not message.get("more_body", False))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _discard_body(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return


def _error_start(status: int, length: int) -> dict:
    return {"type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                        (b"content-length", str(length).encode())]}


async def _send_error(send, status: int, message: str, error_type: str) -> None:
    payload = error_body(status, message, error_type)
    await send(_error_start(status, len(payload)))
    await send({"type": "http.response.body", "body": payload})
