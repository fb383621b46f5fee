"""The engine produces the same greedy tokens with the Triton attention backend as with the reference.

Without a GPU the kernels run under Triton's interpreter (numpy underneath, roughly 0.1-0.3 s per
kernel call, two calls per layer per step), so the model here is a 2-layer random Llama with the
default tokenizer. What is checked is the engine's use of the backend — K/V written through the
slot mapping, read back through block tables, ragged batches mixing prefill chunks and decodes —
which does not depend on the model's size. The kernels alone are compared with the reference on
random inputs in ``test_triton_paged.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason="triton is not installed")

from labkit import LLM, EngineConfig, SamplingParams  # noqa: E402
from labkit.attention import triton_paged  # noqa: E402

if DEVICE == "cpu" and not triton_paged._runs_interpreted():
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set, so its kernels cannot run on CPU "
                "tensors in this session", allow_module_level=True)

NEW_TOKENS = 6
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """2 layers, 4 query heads over 2 K/V heads (GQA), head dim 16; the default model's tokenizer."""
    from bench.common import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama-triton"), num_layers=2, hidden=64)


def _greedy(model_dir, backend: str, prompts: list[list[int]], **config) -> list[list[int]]:
    cfg = EngineConfig(device=DEVICE, dtype="float32", attention_backend=backend, block_size=8, num_blocks=16,
                       **config)
    llm = LLM(model=str(model_dir), config=cfg, progress=False)
    assert llm.engine.runner.backend.__name__.endswith({"triton": "triton_paged"}.get(backend, backend))
    return [o.token_ids for o in llm.generate(prompts, GREEDY)]


def test_triton_backend_gives_the_reference_greedy_tokens_in_a_ragged_batch(tiny_llama_dir):
    # 11 and 21 prompt tokens: neither a multiple of the block size 8, so blocks end part-filled.
    prompts = [list(range(100, 111)), list(range(500, 521))]
    # A 16-token budget splits the 21-token prompt into chunks, so one step mixes the second
    # prompt's prefill chunk with the first prompt's decode token.
    reference = _greedy(tiny_llama_dir, "reference", prompts, max_num_batched_tokens=16)
    triton = _greedy(tiny_llama_dir, "triton", prompts, max_num_batched_tokens=16)
    assert all(len(t) == NEW_TOKENS for t in reference)
    assert triton == reference
