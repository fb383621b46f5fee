"""The handler's side of one request: submit to the engine loop, then read its deltas.

Items arrive from the loop thread through ``loop.call_soon_threadsafe`` onto this request's own
``asyncio.Queue``. ``close()`` aborts the request if it has not finished — a client that went away
gives its KV blocks back to the pool.

A client that stays connected but stops reading would let the queue grow for as long as the engine
generates. The bound is a time: once output has waited ``stall_timeout_s`` without the reader taking
any (``ServeLimits.stalled_stream_timeout_s``, 30 s by default), the request is aborted, so an unread
stream holds at most that many seconds of output and stops costing the engine anything. Its
sequences end with ``finish_reason="abort"``, which a reader that comes back still gets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from labkit.sampling_params import SamplingParams
from labkit.serve.engine_loop import Accepted, EngineLoop, Rejected, SequenceDelta, Submit
from labkit.serve.openai_format import Usage

logger = logging.getLogger("labkit.serve")


class RequestStream:
    def __init__(self, loop: EngineLoop, request_id: str, prompt_ids: list[int], params: SamplingParams,
                 stop: list[str], stall_timeout_s: float):
        self._loop, self.request_id, self.n = loop, request_id, params.n
        self._queue: asyncio.Queue = asyncio.Queue()
        self._aio = asyncio.get_running_loop()
        self._submit = Submit(request_id, prompt_ids, params, stop, self._deliver)
        self.stall_timeout_s = stall_timeout_s
        self._waiting_since: float | None = None    # output waits unread since then (None: queue empty)
        self.stalled = False
        self.num_prompt_tokens = 0
        self.num_output_tokens = 0
        self.finish_reasons: dict[int, str] = {}
        self.errors: dict[int, str] = {}

    def _deliver(self, item) -> None:          # runs on the engine loop thread
        try:
            self._aio.call_soon_threadsafe(self._put, item)
        except RuntimeError:                   # the handler's event loop is closed: nobody listens
            pass

    def _put(self, item) -> None:              # runs on the event loop
        now = time.monotonic()
        if self._queue.empty():
            self._waiting_since = now
        self._queue.put_nowait(item)
        if (not self.stalled and not self.finished and isinstance(item, SequenceDelta)
                and now - self._waiting_since > self.stall_timeout_s):
            self._stall()

    def _stall(self) -> None:
        """Nobody has read this stream for ``stall_timeout_s`` while output waited: abort it."""
        self.stalled = True
        logger.info("labkit serve: request %s aborted: its client read nothing for %g s", self.request_id,
                    self.stall_timeout_s)
        self._loop.abort(self.request_id)
        for index in range(self.n):
            self._queue.put_nowait(SequenceDelta(index, "", 0, "abort"))

    async def start(self) -> Rejected | None:
        """Submit; None once the engine accepted the request, else its refusal."""
        self._loop.submit(self._submit)
        reply = await self._take()
        if isinstance(reply, Rejected):
            self.finish_reasons = dict.fromkeys(range(self.n), "rejected")
            return reply
        assert isinstance(reply, Accepted)
        self.num_prompt_tokens = reply.num_prompt_tokens
        return None

    async def _take(self):
        item = await self._queue.get()
        self._waiting_since = None if self._queue.empty() else time.monotonic()
        return item

    @property
    def finished(self) -> bool:
        return len(self.finish_reasons) == self.n

    async def deltas(self) -> AsyncIterator[SequenceDelta]:
        while not self.finished:
            delta: SequenceDelta = await self._take()
            if delta.index in self.finish_reasons:      # a late "abort" or "error" for a finished sequence
                continue
            self.num_output_tokens += delta.num_new_tokens
            if delta.finish_reason is not None:
                self.finish_reasons[delta.index] = delta.finish_reason
            if delta.error is not None:
                self.errors[delta.index] = delta.error
            yield delta

    def usage(self) -> Usage:
        return Usage(self.num_prompt_tokens, self.num_output_tokens)

    def close(self) -> None:
        if not self.finished:
            self._loop.abort(self.request_id)

    def __del__(self) -> None:
        # Safety net: a streaming response cancelled before its generator ever ran never reaches
        # the generator's ``finally``; the request must not run on for nobody.
        self.close()
