"""``LLMEngine.step()``: schedule → run → sample / verify → update → propose → emit.

State flows one way through a step::

    scheduler.schedule()            the whole decision (SchedulerOutput: tokens, block tables,
                                    slot mappings, block copies); the scheduler owns requests and KV
    runner.execute(decision)        one forward pass, computed from the decision alone
    sampler.sample(...)             logits -> plain token ids (sampling, rejection sampling)
    scheduler.update_from_output()  the one place requests and KV change after the model ran
    proposer.propose(...)           drafts for the next step (speculative decoding)
    events                          observers get immutable events once the state is consistent

With ``EngineConfig(async_scheduling=True)`` a step runs overlapped (``_step_overlapped``): the forward
runs on the executor's worker thread while the host plans the next step, and each call applies the
previous step's tokens. Both timelines share every phase; only their order differs (``_step_sync``).

Threads (the rule, stated here once): ``add_request``, ``step``, ``abort``, ``release``, ``open_stream``
and ``stats`` hold ``engine.lock`` (re-entrant: a hook running inside a step may abort a request), and so
do ``LLM.generate`` and ``LLM.stream`` around their steps. Several threads may call them on one engine; a
step runs alone. ``get_request`` and ``has_unfinished_requests`` read one value without the lock; a
``Request`` they hand out changes with every step, so another thread reads its fields under
``engine.lock``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from labkit import events as ev
from labkit import host_clock, step_report
from labkit.config import EngineConfig
from labkit.executor import InlineExecutor
from labkit.input_processor import InputProcessor
from labkit.metrics import MetricsCollector
from labkit.outputs import StepOutput
from labkit.request import Request, RequestStatus
from labkit.sample.sampler import Sampler
from labkit.sampling_params import SamplingParams
from labkit.scheduler_output import PREFILL, SampledTokens, SchedulerOutput, StepUpdate


@dataclass(frozen=True)
class InFlight:
    """A step whose forward was launched and whose tokens are not applied yet (between two calls only
    with async scheduling). ``result``: its logits, or (the executor's worker samples too) its
    ``SampledTokens``."""

    decision: SchedulerOutput
    result: Future


class LLMEngine:
    def __init__(self, *, config: EngineConfig, tokenizer, runner, kv_manager, scheduler, sampler: Sampler,
                 max_model_len: int, vocab_size: int, proposer=None, clock=time.perf_counter,
                 simulated: bool = False, model_config=None, model_dir: Path | None = None, executor=None):
        self.config, self.tokenizer, self.runner = config, tokenizer, runner
        self.kv, self.scheduler, self.sampler, self.proposer = kv_manager, scheduler, sampler, proposer
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
        self.clock, self.simulated = clock, simulated
        self.model_config, self.model_dir = model_config, model_dir
        self.inputs = InputProcessor(tokenizer, config, kv_manager, max_model_len, vocab_size)
        self.hooks = ev.EventBus()
        self.metrics = MetricsCollector()
        self.step_count = 0
        self._ids = itertools.count()
        self._reserved_ids: set[str] = set()      # children's ids, taken from the moment n > 1 is asked
        self._streams: dict[str, deque[StepOutput]] = {}
        self._events: list = []
        self.lock = threading.RLock()     # who holds it: this module's docstring
        self.executor = InlineExecutor() if executor is None else executor
        self._in_flight: InFlight | None = None
        # Async on a worker thread: the worker samples too (forward, then sampling, as a GPU engine samples
        # on the device), so every torch call of a step runs on one thread and the host thread runs only
        # Python (with two threads calling torch, each keeps its own OpenMP team of spinning threads).
        self._sample_on_worker = getattr(self.executor, "threaded", False)
        # Async: finished requests whose sampler state a row in flight may still need (removed once
        # that step is sampled).
        self._retired: list[str] = []

    @property
    def requests(self) -> dict[str, Request]:
        """Every request the engine knows, by id (the scheduler owns them)."""
        return self.scheduler.requests

    @property
    def kv_cache(self):
        """The device tensors that hold K/V (the runner's)."""
        return self.runner.kv_cache

    # ------------------------------------------------------------------------------ requests
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, arrival_time: float | None = None,
                    chat: bool = True) -> str:
        """Queue a prompt (text gets the chat template unless chat=False; or token ids)."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        token_ids = self.inputs.process(prompt, params, request_id, arrival_time, chat)
        with self.lock:
            rid = self._new_id() if request_id is None else str(request_id)
            if request_id is not None and self._taken(rid):
                raise ValueError(f"request_id {rid!r} is already in use")
            now = self.clock()
            req = Request(rid, token_ids, params, now if arrival_time is None else float(arrival_time),
                          eos_token_ids=() if params.ignore_eos else self.tokenizer.eos_token_ids,
                          child_ids=tuple(self._new_id() for _ in range(params.n - 1)))
            self._reserved_ids.update(req.child_ids)
            self.sampler.add(rid, params, req.child_ids)
            self.scheduler.add(req)
            self.metrics.record_arrival(req.arrival_time)
            self._emit_now(ev.RequestAdded(rid, len(token_ids), params.max_tokens, req.arrival_time))
            return rid

    def _taken(self, rid: str) -> bool:
        return rid in self.requests or rid in self._reserved_ids

    def _new_id(self) -> str:
        """An automatic id that no request, user-named or automatic, has or will have."""
        while True:
            rid = str(next(self._ids))
            if not self._taken(rid):
                self._reserved_ids.add(rid)   # until the request exists (a child: until it forks)
                return rid

    def abort(self, request_id: str) -> None:
        with self.lock:
            req = self.requests.get(str(request_id))
            if req is None or req.is_finished:
                return
            update = StepUpdate()
            self.scheduler.finish_request(req, RequestStatus.FINISHED_ABORTED, self.clock(), update)
            self._apply(update)
            self._flush_events()

    def release(self, request_id: str) -> None:
        """Forget a finished request and its children once their output has been delivered (what
        ``generate`` and ``stream`` do), so a long-lived engine does not keep every request."""
        with self.lock:
            req = self.requests.get(str(request_id))
            if req is None or not req.is_finished:
                return
            for rid in (req.request_id, *req.child_ids):
                child = self.requests.get(rid)
                if child is None or child.is_finished:
                    self.scheduler.drop(rid)
                    self._reserved_ids.discard(rid)
                    self._streams.pop(rid, None)

    def open_stream(self, request_id: str) -> deque[StepOutput]:
        """A queue that receives every ``StepOutput`` of ``request_id`` from now on, whoever steps
        the engine, ending with one whose ``finished`` is True (aborts included)."""
        with self.lock:
            return self._streams.setdefault(str(request_id), deque())

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def get_request(self, request_id: str) -> Request:
        return self.requests[str(request_id)]

    # ------------------------------------------------------------------------------ one step
    def step(self) -> list[StepOutput]:
        """One engine step (overlapped with the next one's forward when ``async_scheduling``)::

            sync    host   | schedule N | launch N, await N | sample N | update N | propose | events |
            async   host   | schedule N+1 | await N | sample N | launch N+1 | update N | propose | events |
                    device |<------ forward N ------>|            |<------ forward N+1 ......

        Each host phase is timed (``HostTimer``) for ``StepStats``; the forward and the wait for it are
        not host phases."""
        with self.lock:
            return self._step_overlapped() if self.config.async_scheduling else self._step_sync()

    def _step_sync(self) -> list[StepOutput]:
        """Launch the step just planned and await it in the same call (the inline executor computes it at
        launch): nothing stays in flight between calls."""
        timer = host_clock.HostTimer()
        decision = self._schedule(timer)
        self._launch(decision)
        done, sampled, failed, model_s, _ = self._await_and_sample(timer)
        outputs = self._update_and_propose(done, sampled, failed, timer)
        self._end_step(decision, model_s, timer)
        return outputs

    def _step_overlapped(self) -> list[StepOutput]:
        """Keep step N in flight while N+1 is planned; return N's outputs a call late. Decode rows of N+1
        whose token N is still producing carry a placeholder, filled in from N's sampled tokens just
        before N+1 launches. With a worker thread (the real model) the worker samples N right after its
        forward ("sample N" moves to the device side); the simulator samples on the host, as drawn."""
        timer = host_clock.HostTimer(on_phase=self._host_elapsed)
        decision = self._schedule(timer)
        done, sampled, failed, model_s, wait_s = self._await_and_sample(timer)
        decision.fill_placeholders(sampled)
        self._launch(decision)
        outputs = self._update_and_propose(done, sampled, failed, timer)
        self._end_step(decision, model_s, timer, wait_s=wait_s)
        return outputs

    def _schedule(self, timer: host_clock.HostTimer) -> SchedulerOutput:
        with timer.phase("schedule"):
            decision = self.scheduler.schedule(self.clock())
            self._forget_drafts(decision.preempted)
        return decision

    def _await_and_sample(self, timer: host_clock.HostTimer) -> tuple:
        """The step in flight, if any, awaited and sampled: (it, its tokens, rows that failed, model
        seconds, seconds the host waited)."""
        done, self._in_flight = self._in_flight, None
        if done is None:
            return None, SampledTokens(), {}, 0.0, 0.0
        result, wait_s = self._await_forward(done.result)
        model_s = self.runner.last_model_s
        with timer.phase("sample"):
            sampled = result if self._sample_on_worker else self.sampler.sample(done.decision, result)
            failed = self.sampler.take_failed()      # read before the next launch samples again
            self._forget_retired()
        return done, sampled, failed, model_s, wait_s

    def _update_and_propose(self, done: InFlight | None, sampled: SampledTokens, failed: dict[str, str],
                            timer: host_clock.HostTimer) -> list[StepOutput]:
        with timer.phase("update"):
            outputs = [] if done is None else self._update(done.decision, sampled, failed)
        if self.proposer is not None:
            with timer.phase("propose"):
                self._propose()
        self.step_count += 1
        return outputs

    def _launch(self, decision: SchedulerOutput) -> None:
        """Start the decision's forward (on a worker thread: its sampling too); it stays in flight until
        a step awaits it. A decision without rows computes nothing."""
        if decision.num_rows:
            job = self._forward_and_sample if self._sample_on_worker else self.runner.execute
            self._in_flight = InFlight(decision, self.executor.launch(job, decision))

    def _update(self, decision: SchedulerOutput, sampled: SampledTokens, failed: dict[str, str]) -> list[StepOutput]:
        """Apply a step's tokens (the scheduler's one update), book them, and end the requests whose rows
        could not be sampled."""
        update = self.scheduler.update_from_output(decision, _without(sampled, failed) if failed else sampled,
                                                   self.clock(), token_events=self.hooks.wants(ev.TokensAppended))
        self._reserved_ids.difference_update(r.request_id for r in update.forked)
        self._apply(update)
        return self._fail(update.outputs, failed) if failed else update.outputs

    def _forward_and_sample(self, decision: SchedulerOutput) -> SampledTokens:
        """The worker thread's job (async): the forward, then its sampling. The sampler's state it reads
        (parameters, generators) was registered before the decision was made and is removed only after
        this job is awaited (``_forget_retired``)."""
        return self.sampler.sample(decision, self.runner.execute(decision))

    def _await_forward(self, logits: Future) -> tuple:
        """(the logits, seconds the host waited for them)."""
        t0 = host_clock.now()
        result = logits.result()
        return result, host_clock.now() - t0

    def _host_elapsed(self, seconds: float) -> None:
        """Async: the host just spent ``seconds`` on a phase (a simulated engine moves its clock; a real
        one's moves itself)."""

    def _retire(self, request_id: str) -> None:
        if self.config.async_scheduling:
            self._retired.append(request_id)
        else:
            self.sampler.remove(request_id)

    def _forget_retired(self) -> None:
        for rid in self._retired:
            self.sampler.remove(rid)
        self._retired.clear()

    def _apply(self, update: StepUpdate) -> None:
        """Book what the scheduler changed: metrics, per-request state on the torch side, streams,
        events."""
        for event in update.events:
            if isinstance(event, ev.SpecVerified):
                self.metrics.record_spec(event.drafted, list(event.per_position))
        if self._streams:
            for out in update.outputs:
                if out.request_id in self._streams:
                    self._streams[out.request_id].append(out)
        for req in update.finished:
            self.metrics.record_finished(req.timings(), req.token_times)
            self._retire(req.request_id)
            if self.proposer is not None:
                self.proposer.forget(req.request_id)
            if req.status is RequestStatus.FINISHED_ABORTED and req.request_id in self._streams:
                self._streams[req.request_id].append(StepOutput(req.request_id, (), True, req.status.value))
        self._events += update.events

    def _fail(self, outputs, failed: dict[str, str]) -> list[StepOutput]:
        """End the requests whose rows could not be sampled (``Sampler.take_failed``), each alone, with
        ``finish_reason="error"`` and why; the rest of the batch goes on. Their rows were applied
        without a token (``_without``), so the stand-in tokens the sampler drew never reach anyone."""
        update = StepUpdate()
        for rid in failed:
            req = self.requests.get(rid)
            if req is not None and not req.is_finished:
                self.scheduler.finish_request(req, RequestStatus.FINISHED_ERROR, self.clock(), update)
        self._apply(update)
        ended = [StepOutput(req.request_id, (), True, req.status.value, failed[req.request_id])
                 for req in update.finished]
        for out in ended:
            if out.request_id in self._streams:
                self._streams[out.request_id].append(out)
        return [out for out in outputs if out.request_id not in failed] + ended

    def _forget_drafts(self, request_ids: list[str]) -> None:
        """Preempted requests lose their draft K/V and draft probabilities (recomputed later)."""
        for rid in request_ids:
            self.sampler.forget_drafts(rid)
            if self.proposer is not None:
                self.proposer.forget(rid)

    def _propose(self) -> None:
        """Drafts for requests in decode (all but the last token computed) for the next step."""
        ready = [r for r in self.scheduler.running
                 if r.num_computed_tokens == r.num_tokens - 1 and not r.num_forks_pending]
        proposals = self.proposer.propose(ready)
        self.scheduler.set_drafts({rid: p.token_ids for rid, p in proposals.items()})
        for rid, p in proposals.items():
            self.sampler.set_draft_probs(rid, p.probs)

    # ------------------------------------------------------------------------------ observing
    def _end_step(self, decision: SchedulerOutput, model_s: float, timer: host_clock.HostTimer,
                  wait_s: float | None = None) -> None:
        """Stats, metrics and the step's events (``step_report``). ``timer``: the step's host phases.
        wait_s (async): how long the host waited for the forward; the step took host + wait (sync: host
        + model)."""
        stats = step_report.step_stats(self.step_count, decision, self.scheduler, self.kv, self.config,
                                       timer.seconds, model_s, wait_s, self.simulated)
        decode_only = decision.num_rows > 0 and PREFILL not in decision.kinds
        self.metrics.record_step(stats, decode_only)
        if self.hooks.active:
            self._events[:0] = step_report.scheduling_events(decision, self.step_count)
            if self.hooks.wants(ev.StepEnd):
                snapshot = self.kv.snapshot(step_report.num_computed(self.scheduler))
                self._events.append(ev.StepEnd(self.step_count, stats, snapshot, step_report.batch_entries(decision)))
        self._flush_events()

    def _emit_now(self, event) -> None:
        if self.hooks.active:
            self.hooks.emit(event)

    def _flush_events(self) -> None:
        events, self._events = self._events, []
        if self.hooks.active:
            for event in events:
                self.hooks.emit(event)

    def stats(self) -> dict:
        with self.lock:
            return self._stats()

    def _stats(self) -> dict:
        d = self.metrics.as_dict()
        d.update(num_requests_running=len(self.scheduler.running),
                 num_requests_waiting=len(self.scheduler.waiting),
                 num_preemptions=self.scheduler.num_preemptions,
                 prefix_cache_queries=self.kv.prefix_queries, prefix_cache_hits=self.kv.prefix_hits,
                 kv_cache_usage_perc=100.0 * self.kv.usage(), simulated=self.simulated)
        return d

    def reset_metrics(self, keep_samples: bool = True) -> None:
        """Fresh run statistics. ``keep_samples=False`` (a long-lived server) keeps counts, sums and
        the last step, but no per-request latency samples: memory stays flat, percentiles are None."""
        self.metrics = MetricsCollector(keep_samples=keep_samples)


def _without(sampled: SampledTokens, failed: dict[str, str]) -> SampledTokens:
    """``sampled`` less the requests in ``failed``: each failed row is applied as a row that yields no
    token (its computed tokens count; nothing is appended), then the request is ended."""
    return SampledTokens(sampled.request_ids, [() if rid in failed else t for rid, t in zip(sampled.request_ids, sampled.token_ids)],
                         {rid: t for rid, t in sampled.fork_token_ids.items() if rid not in failed})
