"""The handler's side of one request: submit to the engine loop, then read its deltas.

Items arrive from the loop thread through ``loop.call_soon_threadsafe`` onto this request's own
``asyncio.Queue``. ``close()`` aborts the request if it has not finished — a client that went away
gives its KV blocks back to the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from labkit.sampling_params import SamplingParams
from labkit.serve.engine_loop import Accepted, EngineLoop, Rejected, SequenceDelta, Submit
from labkit.serve.openai_format import Usage


class RequestStream:
    def __init__(self, loop: EngineLoop, request_id: str, prompt: str | list[int], params: SamplingParams,
                 stop: list[str]):
        self._loop, self.request_id, self.n = loop, request_id, params.n
        self._queue: asyncio.Queue = asyncio.Queue()
        self._aio = asyncio.get_running_loop()
        self._submit = Submit(request_id, prompt, params, stop, self._deliver)
        self.num_prompt_tokens = 0
        self.num_output_tokens = 0
        self.finish_reasons: dict[int, str] = {}

    def _deliver(self, item) -> None:          # runs on the engine loop thread
        try:
            self._aio.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:                   # the handler's event loop is closed: nobody listens
            pass

    async def start(self) -> Rejected | None:
        """Submit; None once the engine accepted the request, else its refusal."""
        self._loop.submit(self._submit)
        reply = await self._queue.get()
        if isinstance(reply, Rejected):
            self.finish_reasons = dict.fromkeys(range(self.n), "rejected")
            return reply
        assert isinstance(reply, Accepted)
        self.num_prompt_tokens = reply.num_prompt_tokens
        return None

    @property
    def finished(self) -> bool:
        return len(self.finish_reasons) == self.n

    async def deltas(self) -> AsyncIterator[SequenceDelta]:
        while not self.finished:
            delta: SequenceDelta = await self._queue.get()
            if delta.index in self.finish_reasons:      # a late "abort" for a finished sequence
                continue
            self.num_output_tokens += delta.num_new_tokens
            if delta.finish_reason is not None:
                self.finish_reasons[delta.index] = delta.finish_reason
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
