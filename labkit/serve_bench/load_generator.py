"""The load generator: ``vllm bench serve``'s arrival model over an async httpx client.

Requests are sent in order; after each one the sender waits a gap drawn from a gamma distribution
with shape = burstiness and mean 1 / request_rate::

    gap ~ Gamma(k = burstiness, θ = 1 / (request_rate · burstiness))

burstiness 1 is a Poisson process (exponential gaps); below 1 arrivals come in bursts, above 1 more
evenly. ``request_rate = inf`` sends everything at once. ``max_concurrency`` caps requests in flight
(the rest wait client-side). The run is bounded: ``num_prompts`` requests, each at most
``request_timeout_s``, the whole run at most ``max_duration_s`` (then what is in flight is cancelled
and counted as cut, what was not sent as not sent; neither is a failure).

Pooled connections are dropped after ``KEEPALIVE_EXPIRY_S`` idle, sooner than servers close them
(uvicorn after 5 s, so vLLM and labkit serve): a request sent on a connection the server is closing at
that moment is lost with a ``ReadError`` and no response, which would count as a failure of the server.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Callable

import httpx
import numpy as np

from labkit.serve_bench.client import Target, send
from labkit.serve_bench.client_metrics import RequestRecord
from labkit.serve_bench.workload import BenchRequest

KEEPALIVE_EXPIRY_S = 2.0      # < uvicorn's timeout_keep_alive (5 s): the client lets go of a connection first


@dataclass(frozen=True)
class LoadShape:
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.request_rate > 0:
            raise ValueError(f"request_rate must be > 0 (or inf), got {self.request_rate!r}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency!r}")


def arrival_gaps(n: int, shape: LoadShape) -> list[float]:
    """The wait after each of the n requests (seconds); all zero for an infinite rate."""
    if math.isinf(shape.request_rate):
        return [0.0] * n
    theta = 1.0 / (shape.request_rate * shape.burstiness)
    return np.random.default_rng(shape.seed).gamma(shape.burstiness, theta, size=n).tolist()


@dataclass
class RunOutcome:
    records: list[RequestRecord]
    duration_s: float


async def run_load(target: Target, workload: list[BenchRequest], shape: LoadShape,
                   request_timeout_s: float = 600.0, max_duration_s: float | None = None,
                   progress: bool = True, transport: httpx.AsyncBaseTransport | None = None,
                   clock: Callable[[], float] = time.perf_counter) -> RunOutcome:
    from tqdm.auto import tqdm

    gate = asyncio.Semaphore(shape.max_concurrency or len(workload))
    bar = tqdm(total=len(workload), disable=not progress, desc="bench", unit="req")
    limits = httpx.Limits(max_connections=shape.max_concurrency or len(workload), max_keepalive_connections=None,
                          keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(timeout=httpx.Timeout(request_timeout_s), limits=limits,
                                 transport=transport) as client:
        t0 = clock()

        async def one(req: BenchRequest) -> RequestRecord:
            async with gate:
                record = await send(client, target, req, clock, t0)
            bar.update(1)
            return record

        tasks = []
        sender = asyncio.ensure_future(_send_all(workload, arrival_gaps(len(workload), shape), one, tasks))
        try:
            await asyncio.wait_for(_finish(sender, tasks), max_duration_s)
        except asyncio.TimeoutError:
            pass
        records = [_outcome(task, req) for task, req in zip(tasks, workload)]
        records += [RequestRecord(error="not sent before max_duration", sent=False) for _ in workload[len(tasks):]]
        duration = clock() - t0
    bar.close()
    return RunOutcome(records, duration)


async def _send_all(workload, gaps, one, tasks: list) -> None:
    for i, (req, gap) in enumerate(zip(workload, gaps)):
        if i == len(workload) - 1:
            gap = 0.0            # nothing follows the last request
        tasks.append(asyncio.ensure_future(one(req)))
        if gap > 0:
            await asyncio.sleep(gap)


async def _finish(sender, tasks: list) -> None:
    await sender
    await asyncio.gather(*tasks)


def _outcome(task: asyncio.Future, req: BenchRequest) -> RequestRecord:
    if task.done() and not task.cancelled():
        return task.result()
    task.cancel()
    return RequestRecord(error="cancelled at max_duration", cut=True)
