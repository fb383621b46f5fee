"""Small numerical building blocks of the Llama forward, checked against the written-out formulas."""

from __future__ import annotations

import pytest
import torch

from labkit.kernels.ops import torch_ops
from labkit.kernels.ops.torch_ops import linear, rms_norm


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Hugging Face LlamaRMSNorm, written out."""
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


@pytest.mark.parametrize("rows", [1, 3, 17, 300])
def test_fused_rms_norm_is_bit_identical_to_the_written_out_form(rows):
    # Greedy parity with transformers depends on this being exact, not merely close.
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 576, generator=g) * 4
    w = torch.randn(576, generator=g)
    assert torch.equal(rms_norm(x, w, 1e-5), hf_rms_norm(x, w, 1e-5))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_upcasts_low_precision_inputs_like_hugging_face(dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(33, 576, generator=g) * 3).to(dtype)
    w = torch.randn(576, generator=g).to(dtype)
    assert torch.equal(rms_norm(x, w, 1e-6), hf_rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 6, 7, 12, 16, 17, 40])
def test_linear_equals_f_linear_for_every_row_count(rows, dtype):
    g = torch.Generator().manual_seed(100 + rows)
    x, w = torch.randn(rows, 96, generator=g).to(dtype), torch.randn(200, 96, generator=g).to(dtype)
    got, want = linear(x, w), torch.nn.functional.linear(x, w)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("rows", [2, 3, 5, 9, 16])
def test_bf16_linear_gives_each_row_the_same_bits_at_any_row_count(rows):
    # One bf16 row is computed as two copies of itself; it must be exactly the row it would be
    # inside a larger batch (speculative verification relies on rows not depending on batch size).
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 96, generator=g).to(torch.bfloat16)
    w = torch.randn(200, 96, generator=g).to(torch.bfloat16)
    batched = linear(x, w)
    for i in range(rows):
        assert torch.equal(linear(x[i:i + 1], w), batched[i:i + 1])


@pytest.mark.parametrize("shape", [(960, 576), (576, 1536), (200, 1152)])
def test_bf16_linear_rows_have_the_same_bits_at_any_row_count_even_on_order_sensitive_sums(shape):
    # The order probe's sums come out differently under any other split of the reduction, so this
    # fails wherever one row and several rows take kernels that sum in different orders (as the
    # one-row gemv and the multi-row gemm do for in_features > 1024 on AVX-512 without AMX).
    from labkit.kernels.tuning.forms import order_probe
    w, one = order_probe(*shape)
    x = torch.cat([one, one * 2, one * 3, one, -one, one * 0.5, one, one, one])
    alone = torch.cat([linear(x[i:i + 1], w) for i in range(len(x))])
    for rows in range(2, len(x) + 1):
        assert torch.equal(linear(x[:rows], w), alone[:rows]), rows


@pytest.mark.parametrize("width", [64, 576, 1536])
def test_one_row_rms_norm_has_the_fused_kernels_bits_across_magnitudes(width):
    # A single fp32 row takes the scalar path (four kernels, the one-element steps on a Python float);
    # it must give torch.rms_norm's bits, not merely close ones, at every scale and eps.
    assert torch_ops._scalar_rms_norm_is_exact()
    g = torch.Generator().manual_seed(width)
    for exponent in range(-8, 9):
        x = torch.randn(1, width, generator=g) * 10.0 ** exponent
        w = torch.randn(width, generator=g)
        for eps in (1e-5, 1e-6):
            assert torch.equal(rms_norm(x, w, eps), torch.rms_norm(x, (width,), w, eps))
            assert torch.equal(rms_norm(x, w, eps), hf_rms_norm(x, w, eps))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_rotary_equals_the_rotate_half_formula_to_the_bit(dtype, rows):
    # Hugging Face: x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1). labkit rolls x
    # and folds the negation into a signed sin table; the bits must not move. Also on a strided view
    # (the q/k heads of the fused QKV output).
    from labkit.model.llama import Rotary

    rotary = Rotary(64, 100000.0, 2048, "cpu")
    g = torch.Generator().manual_seed(rows)
    fused = (torch.randn(rows, 15, 64, generator=g) * 3).to(dtype)
    for x in (fused.contiguous(), fused[:, :12]):
        positions = torch.randint(0, 2048, (rows,), generator=g)
        cos, sin = rotary.cos[positions].to(dtype)[:, None], rotary.sin[positions].to(dtype)[:, None]
        want = x * cos + torch.cat((-x[..., 32:], x[..., :32]), dim=-1) * sin
        assert torch.equal(rotary(x, positions), want)
