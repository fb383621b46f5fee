"""Run the app under uvicorn: in the foreground (``labkit serve``) or on a background thread
(tests, notebooks). A background server binds a free port on 127.0.0.1 unless told otherwise.

Both bind their socket first (``labkit serve`` does so before loading the model, so a busy port
fails in a second, not after a model load), apply ``ServeLimits`` (limits.py), and shut down
gracefully: when uvicorn begins its shutdown (SIGTERM, SIGINT, ``stop()``) the engine loop aborts
every open request, so each stream ends with ``finish_reason: "abort"`` and ``data: [DONE]``
within the grace period instead of being cut.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from labkit.serve.app import ServedModel, build_app
from labkit.serve.limits import ServeLimits, limited_protocol


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening-ready socket; OSError (EADDRINUSE, ...) if the address cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, telling the engine loop to end every open stream as shutdown begins."""

    def __init__(self, config: uvicorn.Config, engine_loop):
        super().__init__(config)
        self.engine_loop = engine_loop

    async def shutdown(self, sockets=None) -> None:
        self.engine_loop.drain()
        await super().shutdown(sockets)


def make_server(app, limits: ServeLimits, log_level: str) -> uvicorn.Server:
    """uvicorn over ``app`` (from ``build_app(served, limits)``); the concurrency limit is the protocol's
    (an OpenAI 503), so uvicorn's own (plain text) stays off."""
    config = uvicorn.Config(app, log_level=log_level,
                            http=limited_protocol(limits.header_timeout_s, limits.limit_concurrency),
                            limit_concurrency=None, timeout_graceful_shutdown=limits.timeout_graceful_shutdown,
                            timeout_keep_alive=limits.timeout_keep_alive)
    return _DrainingServer(config, app.state.engine_loop)


class BackgroundServer:
    """``with BackgroundServer(served) as server: httpx.get(server.base_url + "/health")``.

    Leaving the block (or ``stop()``) shuts uvicorn down and stops the engine loop."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 limits: ServeLimits = ServeLimits()):
        self.app = build_app(served, limits)
        self._sock = bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = make_server(self.app, limits, log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="labkit-serve", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("labkit serve did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_foreground(served: ServedModel, sock: socket.socket, log_level: str = "info",
                   limits: ServeLimits = ServeLimits()) -> None:
    """Serve on ``sock`` (from ``bind``) until SIGTERM / SIGINT."""
    make_server(build_app(served, limits), limits, log_level).run(sockets=[sock])
