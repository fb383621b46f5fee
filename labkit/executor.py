"""Where a forward pass runs: in the caller's thread, or on one worker thread (async scheduling).

``launch(execute, decision)`` returns a ``Future`` of the logits. The inline executor computes them
before it returns (a synchronous engine, and the simulator, whose accelerator time is modelled rather
than spent). The worker-thread executor returns at once: PyTorch releases the GIL inside its kernels,
so the host can plan the next step while this one computes. One worker keeps forwards in launch order,
which the KV cache relies on (step N+1 reads what step N wrote).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor


class InlineExecutor:
    def launch(self, execute, decision) -> Future:
        done: Future = Future()
        done.set_result(execute(decision))
        return done


class WorkerThreadExecutor:
    def __init__(self) -> None:
        # Threads start on the first launch and end when the executor is garbage-collected.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-forward")

    def launch(self, execute, decision) -> Future:
        return self._pool.submit(execute, decision)
