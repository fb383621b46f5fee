"""``LLMEngine.step()``: schedule → run → sample / verify → update → propose → emit.

State flows one way through a step. The scheduler and KV manager are pure bookkeeping; only the
runner touches tensors; observers get immutable events once the step's state is consistent.
"""

from __future__ import annotations

import itertools
import time

import torch

from labkit import hooks as ev
from labkit.config import EngineConfig
from labkit.metrics import MetricsCollector
from labkit.outputs import StepOutput
from labkit.request import Request, RequestStatus
from labkit.sample.sampler import sample_tokens, to_probs
from labkit.sampling_params import SamplingParams
from labkit.scheduler.continuous import SchedulerOutput


class LLMEngine:
    def __init__(self, *, config: EngineConfig, tokenizer, runner, kv_manager, scheduler,
                 max_model_len: int, vocab_size: int, proposer=None, clock=time.perf_counter,
                 simulated: bool = False):
        self.config, self.tokenizer, self.runner = config, tokenizer, runner
        self.kv, self.scheduler, self.proposer = kv_manager, scheduler, proposer
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
        self.clock, self.simulated = clock, simulated
        self.hooks = ev.EventBus()
        self.metrics = MetricsCollector()
        self.requests: dict[str, Request] = {}
        self.step_count = 0
        self._ids = itertools.count()
        self._events: list = []

    # ------------------------------------------------------------------------------ requests
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, arrival_time: float | None = None,
                    chat: bool = True) -> str:
        """Queue a prompt (text gets the chat template unless chat=False; or token ids)."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        token_ids = self._encode(prompt, chat)
        self._check_fits(len(token_ids), params)
        rid = str(next(self._ids)) if request_id is None else str(request_id)
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in use")
        now = self.clock()
        req = Request(rid, token_ids, params, now if arrival_time is None else arrival_time,
                      eos_token_ids=() if params.ignore_eos else self.tokenizer.eos_token_ids,
                      generator=self._generator(params, 0), num_forks_pending=params.n - 1)
        self.requests[rid] = req
        self.scheduler.add(req)
        self.metrics.record_arrival(req.arrival_time)
        self._emit_now(ev.RequestAdded(rid, len(token_ids), params.max_tokens, req.arrival_time))
        return rid

    def _encode(self, prompt, chat: bool) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt must not be empty")
            return self.tokenizer.encode_prompt(prompt, chat=chat)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool)
                                                     for t in prompt):
            if not prompt:
                raise ValueError("prompt must not be empty")
            bad = [t for t in prompt if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"prompt token ids must be in [0, {self.vocab_size}), got {bad[:5]}")
            return list(prompt)
        raise ValueError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")

    def _check_fits(self, prompt_len: int, params: SamplingParams) -> None:
        if params.n > 1 and self.kv.layout != "paged":
            raise ValueError("n > 1 (parallel sampling shares prompt blocks) needs kv_cache='paged'")
        if params.n > self.config.max_num_seqs:
            raise ValueError(f"n ({params.n}) must be <= max_num_seqs ({self.config.max_num_seqs}): "
                             "each of the n sequences takes a batch slot")
        if prompt_len >= self.max_model_len:
            raise ValueError(f"prompt has {prompt_len} tokens but max_model_len is {self.max_model_len}; "
                             f"prompts must be shorter than max_model_len")
        total = min(prompt_len + params.max_tokens, self.max_model_len)
        if not self.config.enable_chunked_prefill and total > self.config.max_num_batched_tokens:
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) = {total} tokens, more than "
                f"max_num_batched_tokens ({self.config.max_num_batched_tokens}); without chunked prefill a "
                "(re)computed sequence must fit one step: raise max_num_batched_tokens or enable chunked prefill")
        if not self.kv.can_ever_fit(total):
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) needs {total} KV slots, "
                f"more than the whole KV pool holds ({self.kv.capacity_tokens()} slots); lower max_tokens "
                "or raise num_blocks / kv_cache_bytes")

    def _generator(self, params: SamplingParams, index: int) -> torch.Generator | None:
        if params.greedy:
            return None
        seed = params.seed if params.seed is not None else self.config.seed * 1_000_003 + len(self.requests)
        return torch.Generator().manual_seed(seed + index)

    def abort(self, request_id: str) -> None:
        req = self.requests.get(str(request_id))
        if req is None or req.is_finished:
            return
        self._finish(req, RequestStatus.FINISHED_ABORTED)
        self._flush_events()

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def get_request(self, request_id: str) -> Request:
        return self.requests[str(request_id)]

    # ------------------------------------------------------------------------------ one step
    def step(self) -> list[StepOutput]:
        t0 = time.perf_counter()
        sched = self.scheduler.schedule()
        t1 = time.perf_counter()
        self._mark_scheduled(sched)
        logits = self.runner.execute(sched.scheduled, self.kv) if sched.scheduled else []
        t2 = time.perf_counter()
        outputs = self._update(sched, logits)
        if self.proposer is not None:
            for rid in sched.lost_tokens:
                self.proposer.forget(rid)
            self.proposer.propose(self._proposable())
        t3 = time.perf_counter()
        self.step_count += 1
        model_s = getattr(self.runner, "last_model_s", t2 - t1)
        self._end_step(sched, scheduler_s=(t1 - t0) + (t3 - t2), model_s=model_s)
        return outputs

    def _mark_scheduled(self, sched: SchedulerOutput) -> None:
        now = self.clock()
        for s in sched.scheduled:
            if s.request.first_scheduled_time is None:
                s.request.first_scheduled_time = now

    def _update(self, sched: SchedulerOutput, logits: list) -> list[StepOutput]:
        now = self.clock()
        outputs = []
        for s, rows in zip(sched.scheduled, logits):
            req = s.request
            req.num_computed_tokens += s.num_new_tokens
            if rows is None:
                continue
            new_tokens = self._next_tokens(req, rows, s.num_spec_tokens)
            if req.num_forks_pending:
                self._fork(req, rows[-1:], now, outputs)
            num_draft = len(new_tokens) - 1 if s.num_spec_tokens else 0
            outputs.append(self._append(req, new_tokens, now, num_draft))
        return outputs

    def _next_tokens(self, req: Request, rows: torch.Tensor, num_spec: int) -> list[int]:
        if not num_spec:
            return sample_tokens(rows, [req.sampling_params], [req.generator])
        from labkit.spec_decode.rejection_sampler import greedy_verify, rejection_sample

        drafts = req.spec_token_ids[:num_spec]
        if req.sampling_params.greedy:
            tokens = greedy_verify(drafts, rows)
        else:
            target = to_probs(rows, req.sampling_params)
            tokens = rejection_sample(drafts, req.spec_probs, target, generator=req.generator)
        accepted = len(tokens) - 1
        req.num_computed_tokens -= num_spec - accepted
        req.spec_token_ids, req.spec_probs = [], None
        dropped = self.kv.trim(req.request_id, req.num_computed_tokens)
        if dropped:
            self._events.append(ev.BlocksFreed(req.request_id, tuple(dropped)))
        flags = [i < accepted for i in range(num_spec)]
        self.metrics.record_spec(num_spec, flags)
        self._events.append(ev.SpecVerified(req.request_id, num_spec, accepted, tuple(flags)))
        return tokens

    def _append(self, req: Request, tokens: list[int], now: float, num_draft: int = 0) -> StepOutput:
        """Append tokens, stopping at EOS / stop tokens / max_tokens / max_model_len."""
        added = []
        status = None
        for token in tokens:
            req.append_output(token, now)
            added.append(token)
            status = self._stop_status(req, token)
            if status is not None:
                break
        self._events.append(ev.TokensAppended(req.request_id, tuple(added), min(num_draft, len(added))))
        if self.config.enable_prefix_caching:   # before _finish frees them: full blocks stay reusable
            self.kv.cache_blocks(req.request_id, req.all_token_ids, req.num_computed_tokens)
        if status is not None:
            self._finish(req, status)
        return StepOutput(req.request_id, tuple(added), req.is_finished,
                          req.status.value if req.is_finished else None)

    def _stop_status(self, req: Request, token: int) -> RequestStatus | None:
        if token in req.eos_token_ids or token in req.sampling_params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if len(req.output_token_ids) >= req.sampling_params.max_tokens or req.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None

    def _fork(self, parent: Request, last_row: torch.Tensor, now: float, outputs: list) -> None:
        """Parallel sampling: children share the parent's prompt blocks and sample their own first
        token from the same logits (copy-on-write happens when one writes a shared block)."""
        params = parent.sampling_params
        for i in range(1, parent.num_forks_pending + 1):
            child = Request(f"{parent.request_id}#{i}", parent.prompt_token_ids, params, parent.arrival_time,
                            eos_token_ids=parent.eos_token_ids, generator=self._generator(params, i),
                            status=RequestStatus.RUNNING, parent_id=parent.request_id,
                            num_computed_tokens=parent.num_computed_tokens,
                            first_scheduled_time=parent.first_scheduled_time)
            self.requests[child.request_id] = child
            self.kv.fork(parent.request_id, child.request_id)
            self.scheduler.running.append(child)
            token = sample_tokens(last_row, [params], [child.generator])
            outputs.append(self._append(child, token, now))
        parent.num_forks_pending = 0

    def _finish(self, req: Request, status: RequestStatus) -> None:
        req.status = status
        req.finished_time = self.clock()
        req.spec_token_ids, req.spec_probs = [], None
        freed = self.scheduler.finish(req)
        if self.proposer is not None:
            self.proposer.forget(req.request_id)
        self.metrics.record_finished(req.timings(), req.token_times)
        if freed:
            self._events.append(ev.BlocksFreed(req.request_id, tuple(freed)))
        self._events.append(ev.RequestFinished(req.request_id, status.value, req.timings()))

    def _proposable(self) -> list[Request]:
        """Running requests in decode (all but the last token computed) may get drafts."""
        return [r for r in self.scheduler.running
                if r.num_computed_tokens == r.num_tokens - 1 and not r.num_forks_pending]

    # ------------------------------------------------------------------------------ observing
    def _end_step(self, sched: SchedulerOutput, scheduler_s: float, model_s: float) -> None:
        stats = self._step_stats(sched, scheduler_s, model_s)
        decode_only = bool(sched.scheduled) and all(s.kind != "prefill" for s in sched.scheduled)
        self.metrics.record_step(stats, decode_only)
        if self.hooks.active:
            self._events[:0] = self._scheduling_events(sched)
            if self.hooks.wants(ev.StepEnd):
                self._events.append(ev.StepEnd(self.step_count, stats, self.kv.snapshot(self._computed()),
                                               self._batch(sched)))
        self._flush_events()

    def _computed(self) -> dict[str, int]:
        return {r.request_id: r.num_computed_tokens for r in self.scheduler.running}

    def _step_stats(self, sched: SchedulerOutput, scheduler_s: float, model_s: float) -> ev.StepStats:
        waste = self.kv.waste(self._computed(), self._next_waiting_need())
        cfg = self.config
        return ev.StepStats(
            step=self.step_count, num_requests_running=len(self.scheduler.running),
            num_requests_waiting=len(self.scheduler.waiting), num_scheduled_tokens=sched.num_scheduled_tokens,
            kv_cache_usage_perc=100.0 * self.kv.usage(), kv_waste_perc=100.0 * waste["waste"],
            kv_reserved_unused_perc=100.0 * waste["reserved_unused"],
            kv_internal_frag_perc=100.0 * waste["internal"], kv_external_frag_perc=100.0 * waste["external"],
            batch_occupancy_perc=100.0 * len(sched.scheduled) / cfg.max_num_seqs,
            token_budget_perc=100.0 * sched.num_scheduled_tokens / cfg.max_num_batched_tokens,
            num_preemptions=self.scheduler.num_preemptions, scheduler_s=scheduler_s, model_s=model_s,
            step_s=scheduler_s + model_s, simulated=self.simulated)

    def _next_waiting_need(self) -> int:
        if not self.scheduler.waiting:
            return 0
        req = self.scheduler.waiting[0]
        return min(req.max_total_tokens, self.max_model_len)

    def _scheduling_events(self, sched: SchedulerOutput) -> list:
        events: list = []
        for rid, lost in sched.lost_tokens.items():
            events.append(ev.Preempted(rid, lost))
            events.append(ev.BlocksFreed(rid, tuple(sched.freed_blocks.get(rid, ()))))
        for rid, n in sched.prefix_hits.items():
            events.append(ev.PrefixHit(rid, n))
        for rid, blocks in sched.new_blocks.items():
            events.append(ev.BlocksAllocated(rid, tuple(blocks)))
        for s in sched.scheduled:
            events.append(ev.RequestScheduled(s.request.request_id, self.step_count, s.num_new_tokens, s.kind))
        return events

    def _batch(self, sched: SchedulerOutput) -> tuple[ev.BatchEntry, ...]:
        entries = [ev.BatchEntry(s.request.request_id, i, s.num_new_tokens, s.kind)
                   for i, s in enumerate(sched.scheduled)]
        entries += [ev.BatchEntry(r.request_id, len(entries) + i, 0, "idle") for i, r in enumerate(sched.idle)]
        return tuple(entries)

    def _emit_now(self, event) -> None:
        if self.hooks.active:
            self.hooks.emit(event)

    def _flush_events(self) -> None:
        events, self._events = self._events, []
        if self.hooks.active:
            for event in events:
                self.hooks.emit(event)

    def stats(self) -> dict:
        d = self.metrics.as_dict()
        d.update(num_requests_running=len(self.scheduler.running),
                 num_requests_waiting=len(self.scheduler.waiting),
                 num_preemptions=self.scheduler.num_preemptions,
                 prefix_cache_queries=getattr(self.kv, "prefix_queries", 0),
                 prefix_cache_hits=getattr(self.kv, "prefix_hits", 0),
                 kv_cache_usage_perc=100.0 * self.kv.usage(), simulated=self.simulated)
        return d

    def reset_metrics(self) -> None:
        self.metrics = MetricsCollector()
