"""labkit's C kernels for the q4_1 model: the LM head on its Q8_0 codes (``native.q8_rows``,
``q4_model.Q8Head``: exactly the dense fp32 head's values, in the fp32 C product's order, row-invariant,
with either walk), and the layer products on 4-bit codes (``native.int4_rows``: PyTorch's int4 kernel's
bits, so that a q4_1 layer can run as one C call)."""

from __future__ import annotations

import pytest
import torch

from labkit.kernels import linear_forms as lf
from labkit.kernels import native
from labkit.kernels.ops import native_ops
from labkit.kernels.ops.torch_ops import linear
from labkit.kernels.tuning import cache, walks
from labkit.model.gguf_codes import QuantizedWeight
from labkit.model.q4_model import Q8Head
from labkit.model.quant import Int4Linear

needs_kernel = pytest.mark.skipif(not native.available(), reason=f"C kernel unavailable: {native.why_unavailable()}")


def q8_weight(out_features: int, in_features: int, seed: int = 0):
    """(codes int8, fp32 scales from fp16, the dequantised fp32 weight)."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(-128, 128, (out_features, in_features), generator=g, dtype=torch.int8)
    scales = (torch.rand(out_features, in_features // 32, generator=g) * 0.02 + 1e-5).half().float()
    dense = (codes.float().reshape(out_features, -1, 32) * scales[..., None]).reshape(out_features, in_features)
    return codes, scales, dense


@pytest.fixture
def walk():
    """Set the Q8_0 walk for a test, and put the machine's back after it."""
    before = native.q8_sequential_rows()
    yield native.set_q8_sequential_rows
    native.set_q8_sequential_rows(before)


def test_a_scale_times_a_code_is_exact_in_fp32():
    # What makes the head exact: every fp16 scale times every int8 code, computed in fp64, fits fp32.
    codes, scales, dense = q8_weight(64, 128)
    exact = (codes.double().reshape(64, -1, 32) * scales.double()[..., None]).reshape(64, 128)
    assert torch.equal(dense.double(), exact)


@needs_kernel
@pytest.mark.parametrize("shape", [(4099, 576), (48, 64), (9, 32), (6, 1152)])
@pytest.mark.parametrize("sequential", [0, 16])
def test_q8_rows_gives_the_fp32_kernels_bits_for_the_dequantised_weight(shape, sequential, walk):
    codes, scales, dense = q8_weight(*shape)
    walk(sequential)
    for rows in (1, 2, 3, 5, 16):
        x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(rows)) * 3
        assert torch.equal(native.q8_rows(x, codes, scales), native.linear_rows(x, dense)), rows


@needs_kernel
def test_q8_rows_gives_a_row_the_same_bits_alone_and_among_others_in_either_walk(walk):
    codes, scales, _ = q8_weight(1027, 576, seed=3)
    x = torch.randn(16, 576, generator=torch.Generator().manual_seed(4))
    alone = torch.cat([native.q8_rows(x[i:i + 1], codes, scales) for i in range(16)])
    for sequential in (0, 1, 4, 16):
        walk(sequential)
        for rows in (2, 7, 16):
            assert torch.equal(native.q8_rows(x[:rows], codes, scales), alone[:rows]), (sequential, rows)


@needs_kernel
def test_q8_rows_names_what_is_wrong_with_its_input():
    codes, scales, _ = q8_weight(8, 64)
    x = torch.randn(2, 64)
    with pytest.raises(ValueError, match="q8_rows.*fp32 x"):
        native.q8_rows(x.double(), codes, scales)
    with pytest.raises(ValueError, match="multiple of 32"):
        native.q8_rows(torch.randn(2, 48), codes[:, :48], scales[:, :1])
    with pytest.raises(ValueError, match="scales"):
        native.q8_rows(x, codes, scales[:, :1])
    with pytest.raises(ValueError, match="int8 codes"):
        native.q8_rows(x, codes.to(torch.int16), scales)


@needs_kernel
def test_the_q8_walk_is_timed_once_per_machine_and_then_read_from_the_cache(tmp_path, monkeypatch, walk):
    monkeypatch.setattr(cache, "cache_path", lambda: tmp_path / "linear_forms.json")
    codes, scales, _ = q8_weight(64, 96 + 32)
    fast = {rows: {"tiles": 2.0, "sequential": 1.0 if rows <= 2 else 3.0} for rows in lf.WALK_ROWS}
    monkeypatch.setattr(walks, "time_q8_walks", lambda c, s: fast)
    lf.prepare_q8(codes, scales)
    assert native.q8_sequential_rows() == 2
    monkeypatch.setattr(walks, "time_q8_walks", lambda c, s: pytest.fail("timed again although cached"))
    walk(0)
    lf.prepare_q8(codes, scales)
    assert native.q8_sequential_rows() == 2


@needs_kernel
def test_the_q8_walks_are_really_timed(walk):
    codes, scales, _ = q8_weight(256, 576)
    times = walks.time_q8_walks(codes, scales)
    assert set(times) == set(lf.WALK_ROWS)
    assert all(set(t) == {"tiles", "sequential"} and all(v > 0 for v in t.values()) for t in times.values())


def test_q8_head_multiplies_by_the_dense_heads_values(monkeypatch):
    codes, scales, dense = q8_weight(96, 64)
    head = Q8Head(QuantizedWeight("Q8_0", codes, scales.half(), None), dense)
    x = torch.randn(3, 64)
    if native.available():
        assert head.kernel and head.nbytes() == codes.numel() + scales.numel() * 4
        assert torch.equal(head(x), native.linear_rows(x, dense))
    # without the kernel (no C compiler, LABKIT_NATIVE=0): the dense head itself, 4 bytes a weight
    monkeypatch.setattr(head, "kernel", False)
    assert torch.equal(head(x), linear(x, dense)) and head.nbytes() == dense.numel() * 4


def test_q8_head_times_its_walk_where_the_engine_is_built_not_when_it_loads(monkeypatch):
    timed = []
    monkeypatch.setattr(lf, "prepare_q8", lambda codes, scales: timed.append(tuple(codes.shape)))
    codes, scales, dense = q8_weight(96, 64)
    head = Q8Head(QuantizedWeight("Q8_0", codes, scales.half(), None), dense)
    assert timed == []
    head.tune()
    assert timed == ([(96, 64)] if head.kernel else [])


def test_q8_head_refuses_a_weight_that_is_not_q8_0_or_not_the_heads_shape():
    codes, scales, dense = q8_weight(32, 64)
    with pytest.raises(ValueError, match="Q8_0"):
        Q8Head(QuantizedWeight("Q4_1", codes, scales.half(), scales.half()), dense)
    with pytest.raises(ValueError, match="shaped like"):
        Q8Head(QuantizedWeight("Q8_0", codes, scales.half(), None), dense[:16])


# ------------------------------------------------------------------------------ 4-bit layer products

needs_int4 = pytest.mark.skipif(not native_ops._native_int4_exact(),
                                reason="labkit's int4 product does not match PyTorch's here (PyTorch's AVX2 form, "
                                       "or no C kernel): q4_1 layers run op by op")


def int4_linear(out_features: int, in_features: int, seed: int = 0) -> Int4Linear:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (out_features, in_features), generator=g)
    scale = (torch.rand(out_features, in_features // 32, generator=g) + 0.01) * 0.05
    return Int4Linear.from_codes(codes, scale, -8 * scale * torch.rand(out_features, in_features // 32, generator=g))


@needs_int4
@pytest.mark.parametrize("shape", [(960, 576), (576, 1536), (3072, 576), (64, 32)])
def test_int4_rows_gives_pytorchs_int4_bits_at_every_row_count(shape):
    lin = int4_linear(*shape)
    assert lin.dense is None
    x = (torch.randn(16, shape[1], generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    want = torch.ops.aten._weight_int4pack_mm_for_cpu(x, lin.packed, lin.group_size, lin.scales_zeros)
    for rows in (1, 2, 3, 4, 5, 7, 16):
        assert torch.equal(native.int4_rows(x[:rows], lin.packed, lin.scales_zeros, lin.group_size), want[:rows]), rows
    # a row alone gets the bits it gets among 16
    assert torch.equal(native.int4_rows(x[9:10].clone(), lin.packed, lin.scales_zeros, lin.group_size), want[9:10])


@needs_int4
def test_int4_rows_names_what_is_wrong_with_its_input():
    lin = int4_linear(128, 64)
    x = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="int4_rows.*bf16 x"):
        native.int4_rows(x.float(), lin.packed, lin.scales_zeros, 32)
    with pytest.raises(ValueError, match=f"multiple of {native.int4_block()}"):
        native.int4_rows(x, lin.packed[:80], lin.scales_zeros[:, :80], 32)
    with pytest.raises(ValueError, match="block must be"):
        native.int4_rows(x, lin.packed, lin.scales_zeros, 32, block=48)
    with pytest.raises(ValueError, match="group_size"):
        native.int4_rows(x, lin.packed, lin.scales_zeros, 48)


@needs_int4
def test_where_the_c_int4_product_differs_the_q4_1_layers_run_op_by_op(monkeypatch):
    real = native.int4_rows
    monkeypatch.setattr(native_ops, "_int4_exact", {})
    monkeypatch.setattr(native, "int4_rows", lambda *a: real(*a) * 1.0078125)      # one bf16 ulp at 1
    assert not native_ops._native_int4_exact()
    monkeypatch.setattr(native_ops, "_native_ops", {})
    ops = native_ops.for_input(torch.zeros(1, 576), type("Config", (), dict(hidden_size=576, intermediate_size=1536,
                                                                        rms_norm_eps=1e-5))())
    assert ops is not None and ops._layer_q4 is None
