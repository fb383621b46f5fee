"""4-bit weight-only quantisation (``labkit.model.quant``) and the 4-bit copy of the target as a draft."""

from __future__ import annotations

import pytest
import torch

from labkit.model import quant


def test_quantize_groups_recovers_q4_1_codes_exactly():
    # A weight that *is* Q4_1 (codes 0..15 using the full range in every group, fp16 scale/min):
    # re-quantising must give back the same codes, so the 4-bit copy loses nothing but rounding.
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (64, 128), generator=g, dtype=torch.int32)
    codes[:, ::32], codes[:, 1::32] = 0, 15
    scale = (torch.rand(64, 4, generator=g) * 0.01 + 1e-3).half().float()
    minimum = (torch.randn(64, 4, generator=g) * 0.05).half().float()
    w = quant.dequantize_groups(codes, scale, minimum)
    got_codes, got_scale, got_min = quant.quantize_groups(w)
    assert torch.equal(got_codes, codes)
    torch.testing.assert_close(got_scale, scale, rtol=1e-5, atol=0)
    assert torch.equal(got_min, minimum)


def test_quantize_groups_rejects_a_width_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="multiple of group_size"):
        quant.quantize_groups(torch.randn(4, 40))


@pytest.mark.parametrize("rows", [1, 3, 16])
def test_int4_linear_equals_a_dense_matmul_with_its_dequantised_weight(rows):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(256, 128, generator=g) * 0.05
    x = torch.randn(rows, 128, generator=g)
    layer = quant.Int4Linear(w)
    codes, scale, minimum = quant.quantize_groups(w)
    # The kernel's own numbers: scale and zero point rounded to bf16, (code - 8) * scale + zero.
    s, z = scale.bfloat16().float(), (minimum + 8 * scale).bfloat16().float()
    dense = ((codes.reshape(256, -1, 32).float() - 8) * s[..., None] + z[..., None]).reshape(256, 128)
    want = x.bfloat16().float() @ dense.t()
    got = layer(x)
    assert got.shape == (rows, 256) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
    # ... and that is close to the original weight's product (4-bit error, not a wrong formula).
    err = (got.float() - x @ w.t()).abs().mean() / (x @ w.t()).abs().mean()
    assert err < 0.15


def test_int4_linear_stores_about_half_a_byte_per_weight():
    layer = quant.Int4Linear(torch.randn(512, 256))
    dense_fp32 = 512 * 256 * 4
    assert layer.nbytes() < dense_fp32 / 6


def test_quantized_copy_tracks_the_target_and_leaves_it_untouched():
    from labkit.attention import reference
    from labkit.attention.metadata import AttentionMetadata
    from labkit.kv.paged_kv import PagedKVCache
    from labkit.model.llama import LlamaModel, decode_weight_bytes
    from labkit.model.loader import ModelConfig

    cfg = ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5,
                      rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    target = LlamaModel(cfg)
    with torch.no_grad():
        for p in target.parameters():
            p.normal_(0, 0.08)
        for layer in target.layers:
            layer.input_layernorm.fill_(1.0)
            layer.post_attention_layernorm.fill_(1.0)
        target.norm.fill_(1.0)
    before = {n: p.clone() for n, p in target.named_parameters()}
    copy = quant.quantized_copy(target)
    assert all(torch.equal(before[n], p) for n, p in target.named_parameters())
    assert not any(t.is_meta for t in [*copy.parameters(), *copy.buffers()])

    def logits(model, dtype):
        cache = PagedKVCache(cfg.num_hidden_layers, 4, 16, cfg.num_key_value_heads, cfg.head_dim, dtype, "cpu")
        ids = torch.randint(0, cfg.vocab_size, (20,), generator=torch.Generator().manual_seed(1))
        meta = AttentionMetadata.build([20], [20], [[0, 1]], list(range(20)), 16)
        return model(ids, torch.arange(20), cache.layer_caches(16), meta, torch.arange(20), reference)

    want, got = logits(target, torch.float32), logits(copy, torch.bfloat16)
    assert got.shape == want.shape
    cosine = torch.nn.functional.cosine_similarity(got.float(), want, dim=-1)
    assert cosine.min() > 0.9, cosine.min()           # a close copy (a wrong formula gives ~0) ...
    assert not torch.equal(got.float(), want)         # ... not an exact one
    assert decode_weight_bytes(copy) < decode_weight_bytes(target) / 4


def test_without_the_cpu_kernel_int4_linear_falls_back_to_the_same_numbers(monkeypatch):
    # CUDA (or a torch without the CPU kernel) keeps the dequantised bf16 matrix instead.
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(128, 64, generator=g) * 0.05, torch.randn(4, 64, generator=g)
    packed = quant.Int4Linear(w)
    monkeypatch.setattr(quant, "int4_kernel_available", lambda device: False)
    dense = quant.Int4Linear(w)
    assert dense.dense is not None and packed.dense is None
    torch.testing.assert_close(dense(x).float(), packed(x).float(), rtol=2e-2, atol=2e-2)
