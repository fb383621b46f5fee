"""The one thread that owns the engine. HTTP handlers never touch it; they send commands.

    handler (asyncio) ── Submit / Abort / Snapshot ──► command queue ──► engine loop thread
    handler's own asyncio.Queue ◄── call_soon_threadsafe(Accepted | Rejected | SequenceDelta) ──┘

Only this thread calls ``add_request``, ``step``, ``abort``, ``get_request`` and ``stats``. The engine
could take calls from several threads (its rule: ``labkit/engine.py``), but each would wait on its lock
for a whole step; here a handler never waits on the engine. While requests are pending the loop drains
the queue between steps; when nothing is pending it blocks on the queue (no busy spinning). Prompts
arrive as token ids: handlers tokenise off this thread (app.py), so a long prompt never delays anyone's
next token.

Failures, from the narrowest:

- one request's failure ends that request alone: the engine finishes it with ``finish_reason="error"``
  (a row the sampler cannot sample), or handling its output here raises (detokenizing); its stream
  gets an error and the rest of the batch goes on;
- a failure ``engine.step()`` cannot pin on a request leaves the engine's state unknown: it is logged
  with its traceback, every open stream ends with an error, new requests get a 503, and ``/health``
  answers 503 (vLLM's EngineDeadError).

Shutting down (``drain``): every open request is aborted here, in the loop, so each of its streams
gets a last delta with ``finish_reason="abort"`` and can end properly; later submits get a 503.

The engine's run statistics keep no per-request samples while it serves (``reset_metrics(keep_samples=
False)``): a long-lived server would otherwise grow by about 1 KB a request; the latency histograms
are the server's own (prometheus.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from labkit.sampling_params import SamplingParams
from labkit.serve.detokenize import SequenceText
from labkit.serve.prometheus import ServerMetrics

logger = logging.getLogger("labkit.serve")

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
    """New text of completion ``index``; ``finish_reason`` is set on its last delta, ``error`` says
    why when that reason is "error"."""

    index: int
    text: str
    num_new_tokens: int
    finish_reason: str | None = None
    error: str | None = None


# ------------------------------------------------------------------------------ commands

@dataclass
class Submit:
    request_id: str
    prompt_ids: list[int]                   # tokenised, and checked against the context, by the handler
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
        self.error: str | None = None       # the last traceback, logged
        self.failure: str | None = None     # set once a step failed for no one request: the engine is down
        self._draining = False

    # -- called from any thread ------------------------------------------------------------------
    def start(self) -> None:
        self.engine.reset_metrics(keep_samples=False)
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
        """The loop runs and its engine has not failed (``GET /health``)."""
        return self._thread.is_alive() and self.failure is None

    # -- the loop thread -------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            if not self._drain(block=not self._has_work()):
                break
            if not self._has_work():
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:
                self._engine_failed(exc)
                continue
            self._dispatch(outputs)
        self._fail_all()

    def _has_work(self) -> bool:
        return self.failure is None and self.engine.has_unfinished_requests()

    def _engine_failed(self, exc: Exception) -> None:
        """A step raised, and nothing says whose fault it was: the engine's state is unknown."""
        self.error = traceback.format_exc()
        self.failure = f"{type(exc).__name__}: {exc}"
        logger.error("labkit serve: engine.step() failed; every open request ends with an error, new requests "
                     "get a 503 and GET /health answers 503 until the server is restarted", exc_info=exc)
        self._fail_all("error", f"the engine failed ({self.failure}); see the server log")

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
        elif isinstance(command, Submit) and self.failure is not None:
            command.deliver(Rejected(f"the engine failed ({self.failure}) and serves no more requests; "
                                     "restart the server (see its log)", status=503))
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
            rid = self.engine.add_request(submit.prompt_ids, submit.params, request_id=submit.request_id, chat=False)
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
            req = self.engine.requests.get(out.request_id)
            group = None if req is None else self._groups.get(req.parent_id or req.request_id)
            if group is None:          # aborted by its client
                continue
            if out.finish_reason == "error":
                logger.warning("labkit serve: request %s failed alone: %s", group.submit.request_id, out.error)
                self._fail_group(group, out.error or "the engine could not go on with this request")
                continue
            try:
                self._deliver(group, req, out)
            except Exception as exc:       # this request's output could not be handled: it alone ends
                self.error = traceback.format_exc()
                logger.error("labkit serve: handling request %s's output failed; it ends with an error",
                             group.submit.request_id, exc_info=exc)
                self._fail_group(group, f"the server could not handle this request's output "
                                        f"({type(exc).__name__}: {exc})")

    def _deliver(self, group: _Group, req, out) -> None:
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

    def _fail_group(self, group: _Group, error: str) -> None:
        """End every sequence of one HTTP request with ``finish_reason="error"`` (sequences that
        already finished ignore it: request_stream.py)."""
        self._end_group(group.submit.request_id, "error", error)

    def _fail_all(self, reason: str = "abort", error: str | None = None) -> None:
        for rid in list(self._groups):
            self._end_group(rid, reason, error)

    def _end_group(self, request_id: str, reason: str, error: str | None) -> None:
        group = self._groups[request_id]
        try:
            self._abort_group(request_id)
        except Exception:
            self._groups.pop(request_id, None)
        for index in range(group.submit.params.n):
            group.submit.deliver(SequenceDelta(index, "", 0, reason, error))
