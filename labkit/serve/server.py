"""Run the app under uvicorn: in the foreground (``labkit serve``) or on a background thread
(tests, notebooks). A background server binds a free port on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from labkit.serve.app import ServedModel, build_app


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class BackgroundServer:
    """``with BackgroundServer(served) as server: httpx.get(server.base_url + "/health")``.

    Leaving the block (or ``stop()``) shuts uvicorn down and stops the engine loop."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.app = build_app(served)
        self._sock = bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level=log_level, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
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


def run_foreground(served: ServedModel, host: str, port: int, log_level: str = "info") -> None:
    uvicorn.run(build_app(served), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=2)
