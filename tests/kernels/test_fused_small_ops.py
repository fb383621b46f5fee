"""The small ops around the products in one C call each: RMSNorm (with the residual add
before it), silu(gate) * up, and RoPE with the K/V write in bf16. Each must give PyTorch's bits, so
that taking them out of the token's path changes no output: checked op by op against PyTorch, and on
the real model's logits with every fused op on and off, in fp32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from labkit import LLM, EngineConfig, SamplingParams
from labkit.kernels import native
from labkit.kernels.ops import native_ops, torch_ops
from labkit.kernels.ops.native_ops import NativeOps

needs_kernel = pytest.mark.skipif(not native.available(), reason=f"C kernel unavailable: {native.why_unavailable()}")
needs_silu = pytest.mark.skipif(not native.has_silu_mul(), reason="PyTorch's vector exp was not found on this CPU")
DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def lanes_for(dtype, n, eps=1e-5):
    lanes = native_ops._native_norm_lanes(dtype, n, eps)
    if lanes is None:
        pytest.skip(f"no lane count gives PyTorch's RMSNorm bits here for {dtype} x {n}")
    return lanes


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [576, 64, 577, 2048, 8192 + 48])   # the model's width, small, a tail, cascade levels
def test_rms_norm_in_c_gives_pytorchs_bits_for_every_row_and_row_count(dtype, n):
    lanes = lanes_for(dtype, n)
    w = rand(n, seed=n).to(dtype)
    for i, scale in enumerate((1e-6, 1e-3, 0.1, 1.0, 30.0, 1e4)):
        x = rand(40, n, seed=i, scale=scale).to(dtype)
        ref = torch_ops.rms_norm(x, w, 1e-5)
        out = native.rms_norm(x, w, 1e-5, lanes)
        assert torch.equal(out, ref), scale
        # each row alone gets the bits it got among 40 (PyTorch's one-row path included)
        for t in (0, 7, 39):
            assert torch.equal(native.rms_norm(x[t:t + 1].clone(), w, 1e-5, lanes), ref[t:t + 1])
            assert torch.equal(torch_ops.rms_norm(x[t:t + 1].clone(), w, 1e-5), ref[t:t + 1])


@needs_kernel
def test_a_wrong_lane_count_is_caught_by_the_check():
    """The sum's order matters: with the other lane count some rows differ in fp32, which is why the
    check runs on fp32 rows before a lane count is trusted."""
    lanes = lanes_for(torch.float32, 576)
    other = 16 if lanes == 8 else 8
    x, w = rand(64, 576, seed=3), rand(576, seed=4)
    assert not torch.equal(native.rms_norm(x, w, 1e-5, other), torch_ops.rms_norm(x, w, 1e-5))


class Config:
    hidden_size, intermediate_size, rms_norm_eps = 576, 1536, 1e-5


@needs_kernel
def test_where_the_c_norm_differs_pytorchs_runs(monkeypatch):
    real = native.rms_norm
    monkeypatch.setattr(native_ops, "_norm_lanes", {})
    monkeypatch.setattr(native_ops, "_native_ops", {})
    monkeypatch.setattr(native, "rms_norm", lambda x, w, eps, lanes: real(x, w, eps, lanes) * 1.0000001)
    assert native_ops._native_norm_lanes(torch.float32, 576, 1e-5) is None
    ops = native_ops.for_input(torch.zeros(1, 576), Config())
    x, w = rand(3, 576, seed=5), rand(576, seed=6)
    assert ops._norm is None and ops._layer is None
    assert torch.equal(ops.rms_norm(x, w, 1e-5), torch.rms_norm(x, (576,), w, 1e-5))


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_residual_add_and_norm_in_one_call_give_pytorchs_bits_and_leave_the_inputs(dtype):
    lanes = lanes_for(dtype, 576)
    x, d, w = rand(9, 576, seed=7).to(dtype), rand(9, 576, seed=8, scale=5).to(dtype), rand(576, seed=9).to(dtype)
    x0, d0 = x.clone(), d.clone()
    total, normed = native.add_rms_norm(x, d, w, 1e-5, lanes)
    assert torch.equal(total, x0 + d0)
    assert torch.equal(normed, torch_ops.rms_norm(x0 + d0, w, 1e-5))
    assert torch.equal(x, x0) and torch.equal(d, d0)


@needs_kernel
@needs_silu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inner", [1536, 1536 + 7, 100, 8])   # the model's, tails after the vector pairs, tiny
def test_silu_times_up_in_c_gives_pytorchs_bits(dtype, inner):
    for i, scale in enumerate((0.01, 1.0, 8.0, 40.0)):
        gu = rand(17, 2 * inner, seed=i, scale=scale).to(dtype)
        ref = F.silu(gu[:, :inner]) * gu[:, inner:]
        assert torch.equal(native.silu_mul(gu), ref), scale
        assert torch.equal(native.silu_mul(gu[5:6].clone()), ref[5:6])     # a row alone: the same bits
    edge = torch.tensor([[0.0, -0.0, 88.7, -88.7, 100.0, -104.0, float("inf"), float("-inf")] * 4
                         + [1.0] * 32], dtype=dtype)
    assert torch.equal(native.silu_mul(edge).nan_to_num(9.0), (F.silu(edge[:, :32]) * edge[:, 32:]).nan_to_num(9.0))


@needs_kernel
@needs_silu
def test_where_the_c_silu_differs_pytorchs_runs(monkeypatch):
    real = native.silu_mul
    monkeypatch.setattr(native_ops, "_swiglu_exact", {})
    monkeypatch.setattr(native_ops, "_native_ops", {})
    monkeypatch.setattr(native, "silu_mul", lambda gu: real(gu) * 1.0000001)
    assert not native_ops._native_swiglu_exact(torch.float32, 1536)
    ops = native_ops.for_input(torch.zeros(1, 576), Config())
    gu = rand(2, 3072, seed=1)
    assert ops._silu is None and ops._layer is None
    assert torch.equal(ops.swiglu(gu), F.silu(gu[:, :1536]) * gu[:, 1536:])


@needs_kernel
def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="weight"):
        native.rms_norm(rand(2, 8), rand(9), 1e-5, 8)
    with pytest.raises(ValueError, match="delta"):
        native.add_rms_norm(rand(2, 8), rand(3, 8), rand(8), 1e-5, 8)
    if native.has_silu_mul():
        with pytest.raises(ValueError, match="gate_up"):
            native.silu_mul(rand(2, 7))


@needs_kernel
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (6, 2, 8)])
def test_bf16_rope_and_kv_write_in_c_give_pytorchs_bits(heads, kv_heads, head_dim):
    from labkit.attention.reference import write_kv
    from labkit.model.llama import Rotary

    g = torch.Generator().manual_seed(heads)
    rotary = Rotary(head_dim, 10000.0, 512, "cpu")
    T, num_slots = 23, 32
    x = (torch.randn(T, (heads + 2 * kv_heads) * head_dim, generator=g) * 3).to(torch.bfloat16)
    positions = torch.randint(0, 512, (T,), generator=g)
    slots = torch.randperm(num_slots, generator=g)[:T]
    pools = [torch.zeros(num_slots // 4, 4, kv_heads, head_dim, dtype=torch.bfloat16) for _ in range(4)]
    split = x.view(T, -1, head_dim)
    qk = rotary(split[:, :heads + kv_heads], positions)
    write_kv(qk[:, heads:], split[:, heads + kv_heads:], pools[0], pools[1], slots)
    q = native.rope_write_kv(x, rotary.cos, rotary.signed_sin, positions, slots, pools[2], pools[3], heads, kv_heads)
    assert q.dtype == torch.bfloat16 and torch.equal(q, qk[:, :heads])
    assert torch.equal(pools[0], pools[2]) and torch.equal(pools[1], pools[3])


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "q4_1"])
def test_the_fused_small_ops_change_no_logit_bit(dtype, monkeypatch):
    """The real model, prefill and decode at batch 3: every logits row with the fused ops (RMSNorm, the
    residual add and RMSNorm, SwiGLU, RoPE + K/V write, and a decode step's whole layer in one call)
    equals the row with PyTorch's kernels for all of them, bit for bit; and the fused ops did run, in C.
    q4_1: the fp32 model on the GGUF's 4-bit codes, whose whole-layer call runs labkit's int4 product
    in place of PyTorch's."""
    weights = "q4_1" if dtype == "q4_1" else "dense"
    dtype = "float32" if dtype == "q4_1" else dtype
    llm = LLM(config=EngineConfig(dtype=dtype, weights=weights, max_num_seqs=3), progress=False)
    execute = llm.engine.runner.execute
    calls: dict[str, int] = {}
    for name in ("rms_norm", "add_rms_norm", "swiglu", "rope_write_kv", "decode_layer"):
        real = getattr(NativeOps, name)
        monkeypatch.setattr(NativeOps, name, lambda self, *a, _real=real, _name=name: calls.__setitem__(
            _name, calls.get(_name, 0) + 1) or _real(self, *a))

    def logits_of() -> list[torch.Tensor]:
        rows: list[torch.Tensor] = []
        monkeypatch.setattr(llm.engine.runner, "execute", lambda d: rows.append(execute(d).clone()) or rows[-1])
        llm.generate(["Why is the sky blue?", "Write a haiku about tea.", "1, 2, 3,"],
                     SamplingParams(max_tokens=5, ignore_eos=True))
        # one sequence alone: its prefill is one attention call, so it runs as whole-layer calls too
        llm.generate(["Name three rivers."], SamplingParams(max_tokens=3, ignore_eos=True))
        return rows

    fused = logits_of()
    ops = native_ops.for_input(torch.zeros(1, 1, dtype=getattr(torch, dtype)), llm.engine.runner.model.config)
    assert ops is not None and ops._norm is not None and (ops._silu is not None or not native.has_silu_mul())
    # prefill op by op; decode steps as one C call a layer, where every product is the C kernel (bf16:
    # where the one-time timing chose it on this machine)
    from labkit.kernels import linear_forms

    whole_layer = (native_ops._native_int4_exact() if weights == "q4_1" else
                   dtype == "float32" or linear_forms.bf16_uses_kernel())
    assert set(calls) == {"rms_norm", "add_rms_norm", "swiglu", "rope_write_kv"} | ({"decode_layer"} if whole_layer else set())
    ran = dict(calls)
    # PyTorch's kernels for every small op
    monkeypatch.setattr(native_ops, "for_input", lambda *a: None)
    plain = logits_of()
    assert calls == ran                                  # nothing fused ran in the plain arm
    assert len(fused) == len(plain) and all(torch.equal(a, b) for a, b in zip(fused, plain))
