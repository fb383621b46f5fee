"""``LLM``: the friendly front door. Builds the engine from a model path and an EngineConfig."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from labkit.config import EngineConfig
from labkit.engine import LLMEngine
from labkit.model.loader import ModelConfig, resolve_model_dir
from labkit.model.tokenizer import IncrementalDetokenizer, Tokenizer
from labkit.outputs import CompletionOutput, RequestMetrics, RequestOutput
from labkit.sampling_params import SamplingParams

# Loaded weights stay in memory: a second LLM(...) in the same kernel builds instantly.
_WEIGHTS: dict[tuple, tuple] = {}


@dataclass(frozen=True)
class StreamDelta:
    """One ``LLM.stream`` item: the text and token ids produced since the previous item."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def load_model(model, device: torch.device, dtype: torch.dtype, progress: bool = True):
    """(LlamaModel, ModelConfig, Tokenizer, model_dir) with the weights cached per process."""
    from labkit.model.llama import LlamaModel

    model_dir = resolve_model_dir(model, progress=progress)
    key = (str(model_dir.resolve()), str(device), str(dtype))
    if key not in _WEIGHTS:
        from safetensors.torch import load_file

        cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
        state = {}
        for f in sorted(model_dir.glob("*.safetensors")):
            state.update(load_file(str(f)))
        net = LlamaModel(cfg, dtype=dtype, device=device)
        net.load_hf_state_dict(state)
        _WEIGHTS[key] = (net, cfg, Tokenizer(model_dir, cfg.eos_token_id))
    net, cfg, tok = _WEIGHTS[key]
    return net, cfg, tok, model_dir


class LLM:
    """``LLM()`` loads SmolLM2-135M-Instruct; ``LLM(model="path/to/hf-llama")`` any local Llama;
    ``LLM(model="sim")`` the simulated (cost-model) GPU over the same engine."""

    def __init__(self, model: str | Path | None = None, config: EngineConfig | None = None,
                 progress: bool = True, **sim_options):
        self.config = config or EngineConfig()
        if not isinstance(self.config, EngineConfig):
            raise ValueError(f"config must be an EngineConfig, got {type(self.config).__name__}")
        from labkit.builder import build_engine

        self.engine: LLMEngine = build_engine(model, self.config, progress=progress, **sim_options)
        self.tokenizer = self.engine.tokenizer

    # -- batch --------------------------------------------------------------------------------
    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 chat: bool = True, progress: bool = False) -> list[RequestOutput]:
        """Run prompts to completion (all in flight together) and return outputs in input order."""
        single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                               and isinstance(prompts[0], int))
        prompts = [prompts] if single else list(prompts)
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(params_list)} SamplingParams for {len(prompts)} prompts")
        ids = []
        try:
            for p, sp in zip(prompts, params_list):
                ids.append(self.engine.add_request(p, sp, chat=chat))
            self._run_until_done(ids, progress)
        except BaseException:
            for rid in ids:
                self.engine.abort(rid)
            raise
        return [self._collect(rid) for rid in ids]

    def _run_until_done(self, ids: list[str], progress: bool) -> None:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(ids), disable=not progress, desc="generate", unit="req")
        pending = set(ids)
        while pending and self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished and out.request_id in pending and self._group_done(out.request_id):
                    pending.discard(out.request_id)
                    bar.update(1)
            pending = {rid for rid in pending if not self._group_done(rid)}
        bar.close()

    def _group(self, rid: str) -> list:
        req = self.engine.get_request(rid)
        children = [self.engine.requests.get(f"{rid}#{i}") for i in range(1, req.sampling_params.n)]
        return [req] + [c for c in children if c is not None]

    def _group_done(self, rid: str) -> bool:
        group = self._group(rid)
        req = group[0]
        return all(r.is_finished for r in group) and (len(group) == req.sampling_params.n or req.status.value == "abort")

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
        """Yield text deltas as tokens are produced. Closing the iterator early aborts the request."""
        params = params or SamplingParams()
        if params.n != 1:
            raise ValueError("stream() supports n=1; use generate() for parallel sampling")
        rid = self.engine.add_request(prompt, params, chat=chat)
        detok = IncrementalDetokenizer(self.tokenizer)
        req = self.engine.get_request(rid)
        try:
            while not req.is_finished:
                for out in self.engine.step():
                    if out.request_id == rid and (out.new_token_ids or out.finished):
                        text = detok.update(req.output_token_ids, final=out.finished)
                        yield StreamDelta(rid, text, out.new_token_ids, out.finished, out.finish_reason)
        finally:
            if not req.is_finished:
                self.engine.abort(rid)
