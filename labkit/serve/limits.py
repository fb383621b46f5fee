"""What a slow or greedy client may hold: time to send its headers, time to send its body, and
how many connections the server keeps open at once.

uvicorn times out idle keep-alive connections and can cap concurrency (``limit_concurrency``:
past it a request gets a 503), but a client that sends half its headers, or its headers and no
body, is waited for forever. Two small layers close that gap::

    connection made ──► headers complete ──► body complete ──► the app
         └─ header_timeout_s ─┘  (protocol)   └─ body_timeout_s ─┘  (ASGI layer: 408)

The header clock also runs for the next request on a keep-alive connection, from its first byte.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class ServeLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    limit_concurrency: int = 256            # connections + requests in flight; past it, 503
    timeout_graceful_shutdown: int = 5      # seconds open streams get to end after SIGTERM / SIGINT

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "timeout_graceful_shutdown"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.limit_concurrency < 1:
            raise ValueError(f"limit_concurrency must be >= 1, got {self.limit_concurrency!r}")


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers do not complete in time."""

    class HeaderTimeoutH11(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

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
                self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.logger.info("closing a connection whose request headers took over %ss", timeout_s)
                self.transport.close()

    return HeaderTimeoutH11


class BodyTimeout:
    """ASGI layer: read the whole request body within ``timeout_s`` (else answer 408), then hand
    the app a body that is already complete."""

    def __init__(self, app, timeout_s: float):
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            body = await asyncio.wait_for(_read_body(receive), self.timeout_s)
        except asyncio.TimeoutError:
            return await _send_408(send, self.timeout_s)
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


async def _read_body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_408(send, timeout_s: float) -> None:
    error = {"message": f"the request body did not arrive within {timeout_s:g} s", "type": "timeout",
             "param": None, "code": None}
    payload = json.dumps({"error": error}).encode()
    await send({"type": "http.response.start", "status": 408,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
