"""Training text for the draft: the target answers many chat prompts with our own batched engine.

While it generates, a tapped model runner keeps the target's top-K logits for every token it
samples, so distillation gets the target's whole next-token distribution (soft labels) at no extra
cost: each output token o_i comes with the logits row that produced it::

    prompt p_0 .. p_{P-1} | o_0   o_1   ...  o_{n-1}
    teacher rows          | z_0   z_1   ...  z_{n-1}      z_i = target logits predicting o_i

Continuations are mostly greedy (the traffic the draft is measured on) plus some sampled at
temperature 0.7, which shows the draft more varied contexts with the same kind of labels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from labkit import LLM, EngineConfig, SamplingParams
from labkit.model.runner import ModelRunner


@dataclass
class Sample:
    """One generated answer with the target's top-K logits for each output position."""

    prompt_ids: list[int]
    output_ids: list[int]
    top_ids: torch.Tensor      # [len(output_ids), K] int32
    top_logits: torch.Tensor   # [len(output_ids), K] float16


class TeacherTapRunner(ModelRunner):
    """A ModelRunner that also records the top-K logits of each row it returns (no speculation,
    so a request's row predicts the token at position ``num_tokens``)."""

    def __init__(self, runner: ModelRunner, top_k: int):
        super().__init__(runner.model, runner.kv_cache, runner.device, runner.backend, runner.block_size)
        self.top_k = top_k
        self.rows: dict[str, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}

    def execute(self, sched):
        logits = super().execute(sched)
        end = 0
        for s in sched.scheduled:
            if s.num_logits:
                end += s.num_logits
                values, ids = logits[end - 1].float().topk(self.top_k)
                self.rows.setdefault(s.request_id, {})[s.end] = (ids.to(torch.int32).cpu(), values.half().cpu())
        return logits

    def take(self, request_id: str, prompt_len: int, num_output: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.rows.pop(request_id)
        ids, values = zip(*(rows[prompt_len + i] for i in range(num_output)))
        return torch.stack(ids), torch.stack(values)


def generate_corpus(jobs: list[tuple[str, SamplingParams]], top_k: int = 32, dtype: str = "bfloat16",
                    max_num_seqs: int = 64, time_limit_s: float | None = None) -> list[Sample]:
    """Run every (prompt, params) job through the target; keep prompts, answers and teacher rows.

    ``dtype="bfloat16"`` uses the CPU's bf16 matrix units (several times faster than fp32 here);
    its greedy choices agree with the fp32 target's on almost every token (measured in the recipe).
    With ``time_limit_s`` the run stops early and keeps whatever finished.
    """
    max_len = max(p.max_tokens for _, p in jobs) + 512
    cfg = EngineConfig(dtype=dtype, max_num_seqs=max_num_seqs, max_num_batched_tokens=2048,
                       num_blocks=max_num_seqs * (max_len // 16 + 1))
    llm = LLM(config=cfg, progress=False)
    engine = llm.engine
    tap = TeacherTapRunner(engine.runner, top_k)
    engine.runner = tap
    ids = [engine.add_request(prompt, params) for prompt, params in jobs]
    samples, start = [], time.perf_counter()
    bar = tqdm(total=len(ids), desc="generate (target answers)", unit="answer")
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                req = engine.get_request(out.request_id)
                top_ids, top_logits = tap.take(req.request_id, req.num_prompt_tokens, len(req.output_token_ids))
                samples.append(Sample(list(req.prompt_token_ids), list(req.output_token_ids), top_ids, top_logits))
                bar.update(1)
        bar.set_postfix(tokens=sum(len(s.output_ids) for s in samples))
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            for rid in ids:
                engine.abort(rid)
            break
    bar.close()
    return samples
