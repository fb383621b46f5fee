"""``LLM``: the friendly front door. Builds the engine from a model path and an EngineConfig."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from labkit.builder import build_engine
from labkit.config import EngineConfig
from labkit.engine import LLMEngine
from labkit.model.tokenizer import IncrementalDetokenizer
from labkit.outputs import CompletionOutput, RequestMetrics, RequestOutput
from labkit.request import RequestStatus
from labkit.sampling_params import SamplingParams


@dataclass(frozen=True)
class StreamDelta:
    """One ``LLM.stream`` item: the text and token ids produced since the previous item."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None


class LLM:
    """``LLM()`` loads SmolLM2-135M-Instruct; ``LLM(model="path/to/hf-llama")`` any local Llama;
    ``LLM(model="sim")`` the simulated (cost-model) GPU over the same engine."""

    def __init__(self, model: str | Path | None = None, config: EngineConfig | None = None,
                 progress: bool = True, **sim_options):
        self.config = config or EngineConfig()
        if not isinstance(self.config, EngineConfig):
            raise ValueError(f"config must be an EngineConfig, got {type(self.config).__name__}")
        self.engine: LLMEngine = build_engine(model, self.config, progress=progress, **sim_options)
        self.tokenizer = self.engine.tokenizer

    # -- batch --------------------------------------------------------------------------------
    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 chat: bool = True, progress: bool = False) -> list[RequestOutput]:
        """Run prompts to completion (all in flight together) and return outputs in input order.

        Safe to call from several threads on one LLM: every engine step holds the engine's lock, and
        each call collects its own requests, whoever stepped the engine.
        """
        prompts = as_prompt_list(prompts)
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(params_list)} SamplingParams for {len(prompts)} prompts")
        ids = []
        try:
            for p, sp in zip(prompts, params_list):
                ids.append(self.engine.add_request(p, sp, chat=chat))
            self._run_until_done(ids, progress)
            return [self._collect(rid) for rid in ids]
        finally:
            for rid in ids:
                self.engine.abort(rid)          # a no-op for finished requests
                self.engine.release(rid)

    def _run_until_done(self, ids: list[str], progress: bool) -> None:
        bar = tqdm(total=len(ids), disable=not progress, desc="generate", unit="req")
        pending = set(ids)
        while True:
            # One lock around look, decide and step: another thread's step may finish these requests
            # at any moment, so "are mine done?" and "is anything left to run?" are asked together.
            with self.engine.lock:
                done = {rid for rid in pending if self._group_done(rid)}
                bar.update(len(done))
                pending -= done
                if not pending:
                    break
                if not self.engine.has_unfinished_requests():
                    raise RuntimeError(f"requests {sorted(pending)} are unfinished but the engine has nothing to run")
                self.engine.step()
        bar.close()

    def _group(self, rid: str) -> list:
        """The request and the children it forked (n > 1), in order."""
        req = self.engine.get_request(rid)
        children = [self.engine.requests.get(child_id) for child_id in req.child_ids]
        return [req] + [c for c in children if c is not None]

    def _group_done(self, rid: str) -> bool:
        group = self._group(rid)
        req = group[0]
        # aborted or failed: its children may never have forked
        ended_early = req.status in (RequestStatus.FINISHED_ABORTED, RequestStatus.FINISHED_ERROR)
        return all(r.is_finished for r in group) and (len(group) == req.sampling_params.n or ended_early)

    def _collect(self, rid: str) -> RequestOutput:
        group = self._group(rid)
        outs = []
        for i, r in enumerate(group):
            t = r.timings()
            metrics = RequestMetrics(t.ttft_s, t.tpot_s, t.e2e_s, t.queue_s, t.num_preemptions,
                                     t.num_output_tokens)
            outs.append(CompletionOutput(i, self.tokenizer.decode(r.output_token_ids), list(r.output_token_ids),
                                         r.status.value if r.is_finished else None, metrics))
        return RequestOutput(rid, list(group[0].prompt_token_ids), outs, all(r.is_finished for r in group))

    # -- streaming ----------------------------------------------------------------------------
    def stream(self, prompt, params: SamplingParams | None = None, chat: bool = True) -> Iterator[StreamDelta]:
        """Yield text deltas as tokens are produced, ending with one delta whose ``finished`` is True.
        Every token reaches the stream whoever steps the engine (another stream, ``generate``, a
        widget's driver). Closing the iterator early aborts the request."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if params.n != 1:
            raise ValueError("stream() supports n=1; use generate() for parallel sampling")
        with self.engine.lock:
            rid = self.engine.add_request(prompt, params, chat=chat)
            queue = self.engine.open_stream(rid)
        detok = IncrementalDetokenizer(self.tokenizer)
        tokens: list[int] = []
        finished = False
        try:
            while not finished:
                with self.engine.lock:      # as in generate: another thread's step may fill the queue
                    if not queue:
                        if not self.engine.has_unfinished_requests():
                            raise RuntimeError(f"request {rid} is unfinished but the engine has nothing to run")
                        self.engine.step()
                        continue
                    out = queue.popleft()
                tokens += out.new_token_ids
                finished = out.finished
                if out.new_token_ids or finished:
                    yield StreamDelta(rid, detok.update(tokens, final=finished), out.new_token_ids, finished,
                                      out.finish_reason)
        finally:
            if not finished:
                self.engine.abort(rid)
            self.engine.release(rid)


def as_prompt_list(prompts) -> list:
    """One prompt (a str or a list of token ids) or a list of prompts -> a list of prompts."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, (list, tuple)):
        if prompts and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
            return [list(prompts)]
        return list(prompts)
    raise ValueError(f"prompts must be a str, a list of token ids, or a list of those, got {type(prompts).__name__}")
