"""The one thread that owns the engine. HTTP handlers never touch it; they send commands.

    handler (asyncio) ── Submit / Abort / Snapshot ──► command queue ──► engine loop thread
    handler's own asyncio.Queue ◄── call_soon_threadsafe(Accepted | Rejected | SequenceDelta) ──┘

``LLMEngine`` is not thread-safe, so only this thread calls ``add_request``, ``step``, ``abort``,
``get_request`` and ``stats``. While requests are pending the loop drains the queue between steps;
when nothing is pending it blocks on the queue (no busy spinning).

Shutting down (``drain``): every open request is aborted here, in the loop, so each of its streams
gets a last delta with ``finish_reason="abort"`` and can end properly; later submits get a 503.
"""

from __future__ import annotations

import queue
import threading
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from labkit.sampling_params import SamplingParams
from labkit.serve.detokenize import SequenceText
from labkit.serve.metrics import ServerMetrics

# ------------------------------------------------------------------------------ what handlers see

@dataclass(frozen=True)
class Accepted:
    num_prompt_tokens: int


@dataclass(frozen=True)
class Rejected:
    message: str            # the engine's ValueError, naming what does not fit
    status: int = 400       # 500 when the engine failed on a request it should have taken


@dataclass(frozen=True)
class SequenceDelta:
    """New text of completion ``index``; ``finish_reason`` is set on its last delta."""

    index: int
    text: str
    num_new_tokens: int
    finish_reason: str | None = None


# ------------------------------------------------------------------------------ commands

@dataclass
class Submit:
    request_id: str
    prompt: str | list[int]
    params: SamplingParams
    stop: list[str]
    deliver: Callable[[object], None]       # thread-safe: hands an item to the handler


@dataclass(frozen=True)
class Abort:
    request_id: str


@dataclass(frozen=True)
class Snapshot:
    future: Future


_STOP = object()
_DRAIN = object()


@dataclass
class _Group:
    """One HTTP request: the engine request and, for n > 1, its forked children."""

    submit: Submit
    texts: dict[int, SequenceText]
    index_of: dict[str, int] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    num_done: int = 0


def check_context(num_prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    """vLLM's rule: prompt + max_tokens must fit the context (the engine alone would cap the output
    silently). A prompt that alone is too long is left to the engine's own, clearer message."""
    if num_prompt_tokens < max_model_len and num_prompt_tokens + max_tokens > max_model_len:
        raise ValueError(f"max_tokens ({max_tokens}) + prompt ({num_prompt_tokens} tokens) = "
                         f"{num_prompt_tokens + max_tokens} tokens, more than this model's maximum context length "
                         f"({max_model_len} tokens); max_tokens may be at most {max_model_len - num_prompt_tokens}")


class EngineLoop:
    def __init__(self, engine, metrics: ServerMetrics):
        self.engine, self.metrics = engine, metrics
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._groups: dict[str, _Group] = {}
        self._thread = threading.Thread(target=self._run, name="labkit-engine-loop", daemon=True)
        self.error: str | None = None
        self._draining = False

    # -- called from any thread ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._commands.put(_STOP)
        self._thread.join(timeout)

    def drain(self) -> None:
        """Abort every open request (each stream ends with ``finish_reason="abort"``); refuse new ones."""
        self._commands.put(_DRAIN)

    def submit(self, submit: Submit) -> None:
        self._commands.put(submit)

    def abort(self, request_id: str) -> None:
        self._commands.put(Abort(request_id))

    def snapshot(self) -> Future:
        """A future of ``engine.stats()``, taken between two steps."""
        future: Future = Future()
        self._commands.put(Snapshot(future))
        return future

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            idle = not self.engine.has_unfinished_requests()
            if not self._drain(block=idle):
                break
            if self.engine.has_unfinished_requests():
                try:
                    self._dispatch(self.engine.step())
                except Exception:          # keep serving: fail what was in flight, say why
                    self.error = traceback.format_exc()
                    self._fail_all()
        self._fail_all()

    def _drain(self, block: bool) -> bool:
        """Apply queued commands; False once asked to stop."""
        try:
            command = self._commands.get(block=block)
        except queue.Empty:
            return True
        while True:
            if command is _STOP:
                return False
            try:
                self._apply(command)
            except Exception:              # never let one command end the loop
                self.error = traceback.format_exc()
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, command) -> None:
        if command is _DRAIN:
            self._draining = True
            self._fail_all()
        elif isinstance(command, Submit) and self._draining:
            command.deliver(Rejected("the server is shutting down", status=503))
        elif isinstance(command, Submit):
            self._add(command)
        elif isinstance(command, Abort):
            self._abort_group(command.request_id)
        elif isinstance(command, Snapshot):
            try:
                command.future.set_result(self.engine.stats())
            except Exception as exc:
                command.future.set_exception(exc)

    def _add(self, submit: Submit) -> None:
        try:
            prompt_ids = self.engine.inputs.encode(submit.prompt, chat=False)
            check_context(len(prompt_ids), submit.params.max_tokens, self.engine.max_model_len)
            rid = self.engine.add_request(prompt_ids, submit.params, request_id=submit.request_id, chat=False)
        except ValueError as exc:
            submit.deliver(Rejected(str(exc)))
            return
        except Exception as exc:           # a bug, not a bad request: answer 500, keep the loop alive
            self.error = traceback.format_exc()
            submit.deliver(Rejected(f"{type(exc).__name__}: {exc}", status=500))
            return
        req = self.engine.get_request(rid)
        texts = {i: SequenceText(self.engine.tokenizer, submit.stop) for i in range(submit.params.n)}
        self._groups[rid] = _Group(submit, texts, index_of={rid: 0}, live={rid})
        self.metrics.prompt_tokens.inc(req.num_prompt_tokens)
        submit.deliver(Accepted(req.num_prompt_tokens))

    def _abort_group(self, request_id: str) -> None:
        group = self._groups.pop(request_id, None)
        if group is None:
            return
        for rid in list(group.live):
            self.engine.abort(rid)
        self.engine.release(request_id)     # the engine forgets the finished group

    def _dispatch(self, outputs) -> None:
        for out in outputs:
            req = self.engine.get_request(out.request_id)
            group = self._groups.get(req.parent_id or req.request_id)
            if group is None:          # aborted by its client
                continue
            index = group.index_of.setdefault(out.request_id, len(group.index_of))
            group.live.add(out.request_id)
            update = group.texts[index].update(req.output_token_ids, final=out.finished)
            reason = out.finish_reason
            if update.stopped and not out.finished:
                self.engine.abort(out.request_id)
                reason = "stop"
            elif update.stopped:
                reason = "stop"
            self.metrics.generation_tokens.inc(len(out.new_token_ids))
            group.submit.deliver(SequenceDelta(index, update.delta, len(out.new_token_ids), reason))
            if reason is not None:
                self._finished(group, req, reason)

    def _finished(self, group: _Group, req, reason: str) -> None:
        group.live.discard(req.request_id)
        group.num_done += 1
        self.metrics.observe_finished(req.timings(), req.token_times, reason)
        if group.num_done == group.submit.params.n:
            del self._groups[group.submit.request_id]
            self.engine.release(group.submit.request_id)   # delivered: the engine may forget it

    def _fail_all(self) -> None:
        for rid in list(self._groups):
            group = self._groups[rid]
            try:
                self._abort_group(rid)
            except Exception:
                self._groups.pop(rid, None)
            for index in range(group.submit.params.n):
                group.submit.deliver(SequenceDelta(index, "", 0, "abort"))
