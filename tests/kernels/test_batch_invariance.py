"""Batch invariance on the real model: a request's logits do not depend on what else runs with it, so
the scheduler's choices never change a token.

Async scheduling plans step N+1 before step N's tokens are known: a request that stops at N still
has a (wasted) row at N+1, and the request waiting for its slot is admitted a step later than the
synchronous engine admits it. Batches, row counts and prefill chunks therefore differ between the two
engines. With a forward whose rounding followed the batch (a product whose bits depend on the row
count, attention over sequences padded to the longest in the step), greedy near-ties flipped: 2 of 8
prompts changed on a Xeon. This test compares every logits row of every request, bit for bit, and the
greedy tokens, sync against async, for the fp32 form the engine runs here, at batch 1 to 16, with chunked
prefill, stop tokens, EOS and ``max_tokens``; tests/kernels/test_form_invariance.py forces every form this CPU
offers in turn (fp32, bf16, q4_1) through prefix hits, batches, chunks, async, speculation and preemption.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

import pytest

from labkit import LLM, EngineConfig, SamplingParams
from labkit.kernels import linear_forms as lf
from labkit.kernels import native
from labkit.traces import load_prompts

pytestmark = pytest.mark.timeout(900)

# Prompts of different lengths (chat-templated: about 30 to 200 tokens), three kinds of traffic.
PROMPTS = load_prompts("chat")[:5] + load_prompts("code")[:1] + load_prompts("json")[:2] + load_prompts("copy")[:1]
SHAPES = [(576, 576), (576, 1536), (960, 576), (3072, 576), (49152, 576)]   # the default model's weights
CONFIGS = {
    "batch 1": dict(max_num_seqs=1),
    "batch 4, chunked prefill": dict(max_num_seqs=4, max_num_batched_tokens=48),
    "batch 16": dict(max_num_seqs=16),
}


def params(tokenizer) -> list[SamplingParams]:
    """Greedy, with max_tokens from 4 to 12; half stop on common tokens, the rest on EOS or length."""
    stops = sorted({ids[-1] for ids in (tokenizer.encode(w) for w in (".", ",", " the", "\n")) if ids})
    return [SamplingParams(temperature=0.0, max_tokens=4 + (7 * i) % 9,
                           stop_token_ids=stops if i % 2 == 0 else ()) for i in range(len(PROMPTS))]


def run(llm: LLM, prompts: list[str], sampling: list[SamplingParams]) -> tuple[list[list[int]], dict[int, list[str]]]:
    """(greedy tokens per prompt, {prompt index: a digest of each logits row it got, in order})."""
    rows: dict[str, list[str]] = {}
    execute = llm.engine.runner.execute

    def recorded(decision):
        logits = execute(decision)
        if logits is not None:
            owners = decision.logits_request_ids
            for rid, row in zip(owners, logits):
                rows.setdefault(rid, []).append(hashlib.sha1(row.float().numpy().tobytes()).hexdigest())
        return logits

    llm.engine.runner.execute = recorded
    outs = llm.generate(prompts, sampling)
    return [o.token_ids for o in outs], {i: rows.get(o.request_id, []) for i, o in enumerate(outs)}


def forms() -> list[str]:
    """The fp32 forms, and bf16 with the kernel or PyTorch's product (each used at every row count)."""
    fp32 = [name for name in lf.INVARIANT if (native.available() if name is lf.Form.NATIVE else
                                              all(lf.pad_rows(*shape) is not None for shape in SHAPES))]
    bf16 = ["bf16, C kernel"] if native.has_bf16() else []
    return fp32 + bf16 + ["bf16, PyTorch", "q4_1"]


@contextmanager
def using(form: str, monkeypatch):
    """The config overrides for ``form``, with the form fixed while the block runs."""
    if form == "q4_1":      # the GGUF's 4-bit codes through PyTorch's int4 kernel, an fp32 residual stream
        yield {"weights": "q4_1"}
        return
    if form.startswith("bf16"):
        monkeypatch.setenv(lf.BF16_ENV, "1" if form.endswith(lf.Bf16Form.NATIVE) else "0")
        yield {"dtype": "bfloat16"}
        return
    with lf.forced(form):
        yield {}


@pytest.mark.slow
# The full sync-vs-async comparison for the fp32 form the engine runs here (labkit's C kernel where it
# builds); every form this CPU offers, bf16 and q4_1 included, goes through tests/kernels/test_form_invariance.py.
@pytest.mark.parametrize("form", [lf.Form.NATIVE] if native.available() else [f for f in forms() if f in lf.INVARIANT][:1])
def test_async_scheduling_changes_no_logit_bit_and_no_token(form, tokenizer, monkeypatch):
    sampling = params(tokenizer)
    with using(form, monkeypatch) as dtype:
        for name, config in CONFIGS.items():
            got = {}
            for async_scheduling in (False, True):
                llm = LLM(config=EngineConfig(async_scheduling=async_scheduling, **config, **dtype), progress=False)
                got[async_scheduling] = run(llm, PROMPTS, sampling)
            (sync_tokens, sync_rows), (async_tokens, async_rows) = got[False], got[True]
            assert async_tokens == sync_tokens, name
            for i in sync_rows:
                # async may compute one more (wasted) row after a stop token: its logits are dropped
                assert len(sync_rows[i]) <= len(async_rows[i]) <= len(sync_rows[i]) + 1, (name, i)
                assert async_rows[i][:len(sync_rows[i])] == sync_rows[i], f"{name}: prompt {i}"
            assert any(len(t) < s.max_tokens for t, s in zip(sync_tokens, sampling)), "no request stopped early"
