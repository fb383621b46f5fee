"""Where a forward pass runs: in the caller's thread, or on one worker thread (async scheduling).

``launch(execute, decision)`` returns something with a ``Future``'s ``result()``: the logits. The inline
executor computes them before it returns, and hands them over in a `Ready` (a ``concurrent.futures.Future``
builds a lock and a condition, about 10 µs of a synchronous engine's host path per step: held by
``bench.scheduler_overhead``) (a synchronous engine, and the simulator, whose accelerator time is modelled rather
than spent). The worker-thread executor returns at once: PyTorch releases the GIL inside its kernels,
so the host can plan the next step while this one computes. One worker keeps forwards in launch order,
which the KV cache relies on (step N+1 reads what step N wrote).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch


class Ready:
    """A result computed already: ``result()`` as a finished ``Future`` answers it."""

    __slots__ = ("_value",)

    def __init__(self, value) -> None:
        self._value = value

    def result(self, timeout: float | None = None):
        return self._value


class InlineExecutor:
    threaded = False

    def launch(self, execute, decision) -> Ready:
        return Ready(execute(decision))


class WorkerThreadExecutor:
    threaded = True         # the engine hands it the sampling too: all torch work on one thread

    def __init__(self) -> None:
        # Threads start on the first launch and end when the executor is garbage-collected.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-forward")

    def launch(self, execute, decision) -> Future:
        return self._pool.submit(self._run, execute, decision, torch.get_num_threads())

    @staticmethod
    def _run(execute, decision, num_threads: int):
        # A thread keeps the torch thread count of its first torch call: follow the caller's, or a
        # torch.set_num_threads after the worker started would never reach the forward (measured here: with
        # the worker started on 1 thread and the caller on 2, async ran at 0.57x sync).
        if torch.get_num_threads() != num_threads:
            torch.set_num_threads(num_threads)
        return execute(decision)
