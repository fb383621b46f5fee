"""``EngineConfig(weights="q4_1")``: the target on the GGUF's own 4-bit codes (labkit/model/q4_model.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit.kernels import native
from labkit.model.agreement import first_divergence, greedy_agreement
from labkit.model.gguf_codes import QuantizedWeight, q4_1_blocks, q8_0_blocks
from labkit.model.q4_model import Q8Head
from labkit.model.quant import Int4Linear
from tests.prompts import PARITY_PROMPTS

GREEDY = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)


def _gguf_bytes(w: np.ndarray, kind: str) -> np.ndarray:
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    return quantize(w, getattr(GGMLQuantizationType, kind))


# ------------------------------------------------------------------------------ reading the blocks

def test_q4_1_blocks_give_the_values_gguf_py_dequantises():
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    w = np.random.default_rng(0).standard_normal((8, 96)).astype(np.float32)
    raw = _gguf_bytes(w, "Q4_1")                                   # [8, 3 blocks * 20 bytes]
    codes, d, m = q4_1_blocks(raw, 96)
    assert codes.shape == (8, 96) and codes.max() <= 15 and d.dtype == np.float16
    got = QuantizedWeight("Q4_1", torch.from_numpy(codes), torch.from_numpy(d), torch.from_numpy(m)).dequantize()
    assert torch.equal(got, torch.from_numpy(dequantize(raw, GGMLQuantizationType.Q4_1)))
    # the codes are positions in [min, max]: the largest weight of each block has code 15
    assert (codes.reshape(8, 3, 32).max(-1) == 15).all()


def test_q8_0_blocks_give_the_values_gguf_py_dequantises():
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    w = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    raw = _gguf_bytes(w, "Q8_0")
    codes, d = q8_0_blocks(raw, 64)
    got = QuantizedWeight("Q8_0", torch.from_numpy(codes), torch.from_numpy(d), None).dequantize()
    assert torch.equal(got, torch.from_numpy(dequantize(raw, GGMLQuantizationType.Q8_0)))


def test_the_default_models_codes_are_the_ones_its_fp32_weights_came_from(model_dir, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from labkit.model.gguf_codes import _cache_file, gguf_source, read_quantized

    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    fresh = read_quantized(gguf_source(model_dir), 9, 3)            # parses the GGUF, keeps the blocks
    assert _cache_file(gguf_source(model_dir)).is_file()
    quantized = read_quantized(gguf_source(model_dir), 9, 3)        # from the cached blocks
    fp32 = load_file(str(model_dir / "model.safetensors"))
    assert len(quantized) == 211 and {w.kind for w in quantized.values()} == {"Q4_1", "Q8_0"}
    # q/k rows un-permuted like the loader's, the tied embedding read as the Q8_0 it is
    for name, w in quantized.items():
        assert torch.equal(w.codes, fresh[name].codes) and torch.equal(w.scale, fresh[name].scale), name
        assert torch.equal(w.dequantize(), fp32[name]), name


# ------------------------------------------------------------------------------ the kernels

def _one_hot_product(layer, in_features: int) -> torch.Tensor:
    """layer(I): row k is column k of the weight the layer multiplies with, as the kernel sees it."""
    return layer(torch.eye(in_features)).t()


def test_int4_linear_from_codes_multiplies_with_exactly_those_codes():
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (48, 64), generator=g, dtype=torch.uint8)
    d = (torch.rand(48, 2, generator=g) * 0.02 + 1e-3).half()
    m = (-torch.rand(48, 2, generator=g) * 0.1).half()
    layer = Int4Linear.from_codes(codes, d, m, out_dtype=torch.float32)
    # the kernel's numbers: d and m + 8 d rounded to bf16, (code - 8) * d + zero, output rounded to bf16
    s, z = d.float().bfloat16().float(), (m.float() + 8 * d.float()).bfloat16().float()
    want = ((codes.float().reshape(48, 2, 32) - 8) * s[..., None] + z[..., None]).reshape(48, 64)
    assert layer.dense is None                              # the packed kernel path
    assert torch.equal(_one_hot_product(layer, 64), want.bfloat16().float())
    # 40 output rows do not pack (the kernel takes sixteens): the same numbers, dense
    odd = Int4Linear.from_codes(codes[:40], d[:40], m[:40], out_dtype=torch.float32)
    assert odd.dense is not None
    torch.testing.assert_close(_one_hot_product(odd, 64), want[:40], rtol=2 ** -8, atol=0)


def test_from_codes_rejects_codes_outside_four_bits():
    with pytest.raises(ValueError, match="0..15"):
        Int4Linear.from_codes(torch.full((2, 32), 16), torch.ones(2, 1), torch.zeros(2, 1))


# ------------------------------------------------------------------------------ configuration

def test_weights_must_be_dense_or_q4_1():
    with pytest.raises(ValueError, match="weights"):
        EngineConfig(weights="int3")
    with pytest.raises(ValueError, match="target-int4"):
        EngineConfig(weights="q4_1", speculative=SpecConfig(method="draft", draft_model="target-int4"))


def test_q4_1_needs_a_model_converted_from_a_gguf(tmp_path):
    from bench.common import tiny_model_dir

    with pytest.raises(ValueError, match="weights='q4_1'.*GGUF"):
        LLM(model=str(tiny_model_dir(tmp_path / "tiny")), config=EngineConfig(device="cpu", weights="q4_1"),
            progress=False)


def test_agreement_counts_identical_prompts_and_first_divergences():
    a = greedy_agreement([[1, 2, 3], [1, 2, 3], [4, 5]], [[1, 2, 3], [1, 9, 3], [7, 5]])
    assert a.num_identical == 1 and a.divergences == (None, 1, 0)
    assert a.mean_first_divergence == pytest.approx((3 + 1 + 0) / 3)
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    with pytest.raises(ValueError, match="pair up"):
        greedy_agreement([[1]], [])


# ------------------------------------------------------------------------------ the engine

@pytest.fixture(scope="module")
def q4_llm():
    return LLM(config=EngineConfig(device="cpu", weights="q4_1"), progress=False)


@pytest.fixture(scope="module")
def parity_ids(tokenizer):
    return [tokenizer.encode_prompt(p) for p in PARITY_PROMPTS]


def test_q4_1_reads_a_sixth_of_the_dense_bytes_and_leaves_the_dense_model_alone(llm, q4_llm):
    from labkit.model.llama import decode_weight_bytes

    dense, q4 = llm.engine.runner.model, q4_llm.engine.runner.model
    assert isinstance(q4.layers[0].qkv_proj, Int4Linear) and isinstance(q4.lm_head, Q8Head)
    assert isinstance(dense.layers[0].qkv_proj, torch.nn.Parameter)
    assert q4.embed_tokens is dense.embed_tokens             # the lookup table is shared, not copied
    # without the C kernel the LM head reads the dense fp32 head (4 bytes a weight, not 1.125)
    assert decode_weight_bytes(q4) < decode_weight_bytes(dense) / (5 if q4.lm_head.kernel else 3)


def test_q4_1_lm_head_is_the_dense_fp32_head_on_its_q8_0_codes(llm, q4_llm):
    dense, head = llm.engine.runner.model.lm_head, q4_llm.engine.runner.model.lm_head
    x = torch.randn(3, dense.shape[1], generator=torch.Generator().manual_seed(5))
    if head.kernel:
        codes, scales = head.codes, head.scales
        assert torch.equal((codes.float().reshape(codes.shape[0], -1, 32) * scales[..., None]).reshape(dense.shape), dense)
        assert torch.equal(head(x), native.linear_rows(x, dense))
    else:                                                   # no C kernel: the dense head itself
        assert head.dense.data_ptr() == dense.data_ptr()


def test_q4_1_follows_the_fp32_reference_closely(llm, q4_llm, parity_ids):
    dense = [o.token_ids for o in llm.generate(parity_ids, GREEDY)]
    q4 = [o.token_ids for o in q4_llm.generate(parity_ids, GREEDY)]
    agreement = greedy_agreement(dense, q4)
    # Wrong codes, scales or row order give text unrelated to the reference from the first tokens on.
    assert agreement.mean_first_divergence >= 16, agreement
    assert agreement.num_identical >= 2, agreement


def test_q4_1_output_does_not_depend_on_the_batch_with_the_reference_attention(parity_ids):
    # As in bf16: the int4 kernel is row-invariant, but the bf16 rounding of its inputs turns any
    # last-bit difference upstream into a different token now and then. The reference attention
    # computes each sequence alone, so the batch cannot change a row; cpu_batched can.
    llm = LLM(config=EngineConfig(device="cpu", weights="q4_1", attention_backend="reference"), progress=False)
    batched = [o.token_ids for o in llm.generate(parity_ids[:4], GREEDY)]
    assert batched == [llm.generate([ids], GREEDY)[0].token_ids for ids in parity_ids[:4]]


def test_q4_1_greedy_speculation_reproduces_plain_q4_1_greedy_at_batch_1(q4_llm, parity_ids):
    # The guarantee bf16 has (tests/engine/test_spec_engine.py), with the default attention backend.
    spec = LLM(config=EngineConfig(device="cpu", weights="q4_1",
                                   speculative=SpecConfig(method="ngram", num_speculative_tokens=4)), progress=False)
    for ids in parity_ids[:4]:
        assert spec.generate([ids], GREEDY)[0].token_ids == q4_llm.generate([ids], GREEDY)[0].token_ids
    assert spec.engine.stats()["spec_decode_num_drafts"] > 0


def test_labkit_serve_passes_weights_through():
    import argparse

    from labkit.serve.cli import add_serve_args, engine_config

    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    assert engine_config(parser.parse_args(["--weights", "q4_1"])).weights == "q4_1"
    assert engine_config(parser.parse_args([])).weights == "dense"
    with pytest.raises(SystemExit):
        parser.parse_args(["--weights", "q3"])


def test_int4_linear_gives_a_row_the_same_bits_whatever_rows_are_beside_it():
    # What the batch and speculation invariances above rest on.
    g = torch.Generator().manual_seed(2)
    layer = Int4Linear(torch.randn(96, 64, generator=g) * 0.05, out_dtype=torch.float32)
    x = torch.randn(40, 64, generator=g)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(40)])
    for rows in (2, 5, 16, 17, 40):
        assert torch.equal(layer(x[:rows]), alone[:rows]), rows
