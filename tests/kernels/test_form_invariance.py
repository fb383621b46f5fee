"""Every product form this CPU offers gives a request the same logits whatever the engine did before
and beside it — checked form by form on the real model, not on whichever form the probe picked.

A form is forced in turn (each fp32 form, the bf16 C kernel and PyTorch's bf16 product, PyTorch's and
labkit's int4 products for q4_1); a form the gate does not offer on this CPU is skipped with the gate's
reason (``linear_forms.bf16_torch_refused``, ``quant.int4_offered``), because the engine never uses it
there. For each, greedy requests over prompts of varied lengths (16, 32 and 48 tokens: whole blocks of
16; one shares a 32-token prefix with another) are compared with the same prompt run alone (batch 1, no
prefix cache, whole prefill, synchronous):

- every logits row, bit for bit: a prefix-cache hit (whole-block: the 1-row tail a fully cached prompt
  recomputes; partial: a shared 32-token prefix), a batch of 16, chunked prefill, async scheduling;
- the greedy tokens: speculative verification (k + 1 rows at once) and recompute after preemption.

Why a form can fail this on one CPU and pass on another: see ``labkit/kernels/invariance.py``. The last
test shows that this check catches a product whose bits follow the row count (an emulated one).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.kernels import invariance, native
from labkit.kernels import linear_forms as lf
from labkit.kernels.ops import torch_ops
from labkit.kernels.tuning import bf16
from labkit.model import quant
from labkit.traces import load_prompts
from tests.kernels.test_batch_invariance import run

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

LENGTHS = (16, 32, 33, 48, 21)
NEW_TOKENS = 4


FORMS = [*(f"fp32, {name}" for name in (lf.Form.PADDED, lf.Form.NATIVE)), "bf16, C kernel", "bf16, PyTorch",
         "q4_1, PyTorch", "q4_1, C kernel"]


def _skip_reason(form: str) -> str | None:
    kind, name = form.split(", ", 1)
    if kind == "fp32":
        if name == lf.Form.NATIVE and not native.available():
            return f"labkit's C kernel does not build here: {native.why_unavailable()}"
        return None
    if kind == "bf16":
        if name == lf.Bf16Form.NATIVE:
            return None if native.has_bf16() else f"no bf16 C kernel here: {native.why_unavailable()}"
        why = lf.bf16_torch_refused()
        return None if why is None else f"the gate does not offer PyTorch's bf16 product on this CPU: {why}"
    offered = quant.int4_offered(576, 576, 32)
    return None if name in offered else f"the gate does not offer the {name} int4 product on this CPU"


def _force(form: str, monkeypatch) -> dict:
    kind, name = form.split(", ", 1)
    if kind == "fp32":
        monkeypatch.setenv(lf.ENV, name)
        return {}
    if kind == "bf16":
        monkeypatch.setenv(lf.BF16_ENV, "1" if name == lf.Bf16Form.NATIVE else "0")
        return {"dtype": "bfloat16"}
    monkeypatch.setenv(quant.INT4_ENV, name)
    return {"weights": "q4_1"}


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    text = " ".join(load_prompts("chat")[:12])
    ids = tokenizer.encode(text)
    out = [ids[i * 7:i * 7 + n] for i, n in enumerate(LENGTHS)]
    out[2] = out[1] + ids[500:501]          # shares prompt 1's two whole blocks, then one token more
    return out


def _llm(dtype: dict, **config) -> LLM:
    return LLM(config=EngineConfig(block_size=16, **dtype, **config), progress=False)


def _checked(form: str, monkeypatch, prompts: list[list[int]]) -> None:
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    dtype = _force(form, monkeypatch)
    want_tokens, want_rows = run(_llm(dtype, max_num_seqs=1, enable_prefix_caching=False), prompts,
                                 [greedy] * len(prompts))
    assert all(len(r) == NEW_TOKENS for r in want_rows.values())

    def same_rows(name: str, got) -> None:
        tokens, rows = got
        assert tokens == want_tokens, f"{form}, {name}: tokens"
        for i in range(len(prompts)):
            assert rows[i] == want_rows[i], f"{form}, {name}: logits rows of prompt {i} ({len(prompts[i])} tokens)"

    # Prefix hits: the same engine serves every prompt twice; the second pass hits the cache (whole
    # blocks: a 16/32/48-token prompt recomputes only its last token; prompt 2 hits prompt 1's blocks).
    cached = _llm(dtype, max_num_seqs=1, enable_prefix_caching=True)
    run(cached, prompts[:2], [greedy] * 2)
    same_rows("after prefix-cache hits", run(cached, prompts, [greedy] * len(prompts)))
    assert cached.engine.stats()["prefix_cache_hits"] > 0
    # A batch of 16 (each prompt in it more than once), prefill cut into chunks of at most 24 tokens.
    batch = _llm(dtype, max_num_seqs=16, max_num_batched_tokens=24, enable_prefix_caching=False)
    tokens, rows = run(batch, (prompts * 16)[:16], [greedy] * 16)
    for start in range(0, 16 - len(prompts) + 1, len(prompts)):
        same_rows(f"in a batch of 16 with chunked prefill (rows {start}..)",
                  (tokens[start:start + len(prompts)], {i: rows[start + i] for i in range(len(prompts))}))
    same_rows("with async scheduling", run(_llm(dtype, max_num_seqs=4, async_scheduling=True), prompts,
                                          [greedy] * len(prompts)))
    # Verification rows (k + 1 at once) and recompute after preemption: the greedy tokens.
    spec = _llm(dtype, max_num_seqs=4, speculative=SpecConfig(method="ngram", num_speculative_tokens=3,
                                                               prompt_lookup_min=1, prompt_lookup_max=2))
    assert [o.token_ids for o in spec.generate(prompts, greedy)] == want_tokens, f"{form}: speculative decoding"
    assert spec.engine.stats()["spec_decode_num_draft_tokens"] > 0
    tight = _llm(dtype, max_num_seqs=4, num_blocks=9, enable_prefix_caching=False)
    assert [o.token_ids for o in tight.generate(prompts, greedy)] == want_tokens, f"{form}: after preemption"
    assert tight.engine.stats()["num_preemptions"] > 0


@pytest.mark.parametrize("form", FORMS)
def test_each_offered_form_gives_a_request_the_same_logits_whatever_the_engine_did(form, prompts, monkeypatch):
    why = _skip_reason(form)
    if why is not None:
        pytest.skip(why)
    _checked(form, monkeypatch, prompts)


def _row_count_dependent(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """An emulated bf16 product whose bits follow the row count: one ulp up on every call whose row count is
    not a multiple of 16, as a BLAS with another kernel for the tail rows may give (oneDNN's did on an AMX
    Xeon: a prompt got new bits after a prefix-cache hit there)."""
    y = F.linear(x, w)
    return torch.nextafter(y, torch.full_like(y, float("inf"))) if x.shape[0] % 16 else y


def test_the_check_catches_a_product_whose_bits_follow_the_row_count(prompts, monkeypatch):
    """The same check, with PyTorch's bf16 form replaced by the emulated row-count-dependent product and the
    gate bypassed: it must fail (so it would fail on a CPU where PyTorch's product behaves like this), and
    the gate itself refuses that product."""
    assert invariance.linear_difference(_row_count_dependent, (576, 576), torch.bfloat16) is not None
    monkeypatch.setattr(torch_ops, "_bf16_torch", _row_count_dependent)
    monkeypatch.setattr(bf16, "bf16_form", lambda threads=None: lf.Bf16Form.TORCH)
    with pytest.raises(AssertionError, match="logits rows"):
        _checked("bf16, PyTorch", monkeypatch, prompts[:2])
