"""Helpers for the serve and bench tests: a tiny random Llama, servers on free loopback ports,
and a reader of the Prometheus text that ``/metrics`` returns."""

from __future__ import annotations

import time
from contextlib import contextmanager

import httpx

from labkit import LLM, EngineConfig
from labkit.serve import BackgroundServer, ServedModel


@contextmanager
def serving(llm: LLM, name: str):
    """Serve ``llm`` on 127.0.0.1 at a free port for the block's duration."""
    with BackgroundServer(ServedModel(llm.engine, name)) as server:
        yield server


def sim_llm(**config) -> LLM:
    return LLM(model="sim", config=EngineConfig(**config))


def scrape(base_url: str) -> dict[str, float]:
    """``/metrics`` as {"name{labels}": value}, and {"name": value} summed over labels."""
    text = httpx.get(base_url + "/metrics", timeout=30).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        values[key] = float(value)
        name = key.split("{", 1)[0]
        if name != key:
            values[name] = values.get(name, 0.0) + float(value)
    return values


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
