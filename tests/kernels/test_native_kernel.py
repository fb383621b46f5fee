"""labkit's C kernel for few-row fp32 products: built on this machine, correct, row-invariant, and
admitted by the linear-form gate only for being row-invariant and as accurate as F.linear."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from labkit.kernels import linear_forms as lf
from labkit.kernels import native
from labkit.kernels.ops.torch_ops import linear
from labkit.kernels.tuning import cache, forms, walks

needs_kernel = pytest.mark.skipif(not native.available(), reason=f"C kernel unavailable: {native.why_unavailable()}")

# (out, in): the default model's shapes, plus an in_features that leaves a tail after the vector lanes
# and an out_features that leaves rows after the 4-row tiles.
SHAPES = [(576, 576), (64, 1536), (1027, 100), (9, 7), (3, 48)]


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_the_kernel_builds_wherever_a_c_compiler_is_found():
    if native.compiler() is None:
        pytest.skip("no C compiler on this machine: labkit keeps to PyTorch's forms")
    assert native.available(), native.why_unavailable()
    assert native.why_unavailable() is None


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 16])
def test_the_kernel_computes_x_times_w_transposed_as_accurately_as_f_linear(shape, rows):
    x, w = rand(rows, shape[1], seed=rows), rand(*shape, seed=shape[0])
    exact = x.double() @ w.double().t()
    got = native.linear_rows(x, w)
    assert got.shape == (rows, shape[0]) and got.dtype == torch.float32
    err = (got.double() - exact).abs().max().item()
    ref = (F.linear(x, w).double() - exact).abs().max().item()
    assert err <= 2 * ref + exact.abs().max().item() * 2.0 ** -23, (err, ref)


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_gets_the_same_bits_at_every_row_count_and_position(shape):
    x, w = rand(16, shape[1], seed=1), rand(*shape, seed=2)
    full = native.linear_rows(x, w)
    for t in range(1, 16):
        assert torch.equal(native.linear_rows(x[:t], w), full[:t]), t
        assert torch.equal(native.linear_rows(x[t:t + 1], w), full[t:t + 1]), t
    assert torch.equal(native.linear_rows(x[5:12], w), full[5:12])


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_both_walks_give_a_row_the_same_bits_at_every_row_count(shape, dtype):
    """The sequential walk (one weight row after another) and the tiles sum in one order: a row gets
    the same bits either way, alone or among 16, whatever the crossover."""
    if dtype == torch.bfloat16 and not native.has_bf16():
        pytest.skip("no bf16 product in this build")
    x, w = rand(16, shape[1], seed=3).to(dtype), rand(*shape, seed=4).to(dtype)
    before = native.sequential_rows()
    try:
        native.set_sequential_rows(0)
        batch = native.linear_rows(x, w)
        for crossover in (1, 3, 16):
            native.set_sequential_rows(crossover)
            assert native.sequential_rows() == crossover
            for i in range(16):
                assert torch.equal(native.linear_rows(x[i:i + 1], w), batch[i:i + 1]), (crossover, i)
                assert torch.equal(native.linear_rows(x[:i + 1], w), batch[:i + 1]), (crossover, i)
    finally:
        native.set_sequential_rows(before)
    with pytest.raises(ValueError, match="max_rows"):
        native.set_sequential_rows(-1)


def test_the_crossover_is_the_last_row_count_up_to_which_the_sequential_walk_wins_clearly():
    times = {1: {"tiles": 2.0, "sequential": 1.0}, 2: {"tiles": 2.0, "sequential": 1.5},
             4: {"tiles": 2.0, "sequential": 1.99}, 8: {"tiles": 2.0, "sequential": 1.0}}
    assert lf.sequential_up_to(times) == 2          # a near tie at 4 ends it, whatever 8 says
    assert lf.sequential_up_to({1: {"tiles": 1.0, "sequential": 2.0}}) == 0


@needs_kernel
def test_the_walk_is_timed_once_per_machine_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "cache_path", lambda: tmp_path / "linear_forms.json")
    before = native.sequential_rows()
    fast = {rows: {"tiles": 2.0, "sequential": 1.0 if rows <= 4 else 3.0} for rows in lf.WALK_ROWS}
    monkeypatch.setattr(walks, "time_walks", lambda sweep: fast)
    try:
        walks.prepare([rand(64, 96)])
        assert native.sequential_rows() == 4
        monkeypatch.setattr(walks, "time_walks", lambda sweep: pytest.fail("timed again although cached"))
        native.set_sequential_rows(0)
        walks.prepare([rand(64, 96)])
        assert native.sequential_rows() == 4
    finally:
        native.set_sequential_rows(before)


@needs_kernel
def test_a_weight_row_gets_the_same_bits_whichever_tile_computes_it():
    # 1027 rows: 1024 in 4-row tiles, the last 3 one at a time; a slice puts other rows in each path.
    x, w = rand(6, 100, seed=3), rand(1027, 100, seed=4)
    full = native.linear_rows(x, w)
    for lo, hi in [(1024, 1027), (1, 4), (2, 9), (1023, 1027)]:
        assert torch.equal(native.linear_rows(x, w[lo:hi]), full[:, lo:hi]), (lo, hi)


@needs_kernel
def test_the_order_probe_cannot_tell_a_batch_from_a_single_row():
    w, _ = lf.order_probe(64, 1152)
    xs = lf.probe_rows(1152, 17)
    full = native.linear_rows(xs, w.float())
    assert all(torch.equal(native.linear_rows(xs[i:i + 1], w.float()), full[i:i + 1]) for i in range(17))


@needs_kernel
def test_non_contiguous_input_is_read_as_its_values():
    x, w = rand(8, 96, seed=5), rand(40, 96, seed=6)
    assert torch.equal(native.linear_rows(x[::2], w), native.linear_rows(x[::2].contiguous(), w))
    assert torch.equal(native.linear_rows(x.t().contiguous().t(), w), native.linear_rows(x, w))


@needs_kernel
def test_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="one dtype"):
        native.linear_rows(torch.ones(2, 16, dtype=torch.bfloat16), torch.ones(4, 16))
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        native.linear_rows(torch.ones(2, 16, dtype=torch.float64), torch.ones(4, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        native.linear_rows(torch.ones(2, 16), torch.ones(4, 8))
    with pytest.raises(ValueError, match=r"\[T, K\]"):
        native.linear_rows(torch.ones(16), torch.ones(4, 16))


@pytest.fixture
def rebuild(monkeypatch, tmp_path):
    """A fresh build state with a private cache; the process's kernel is restored afterwards."""
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path))
    native._kernel.cache_clear()
    native._state.clear()
    yield tmp_path
    monkeypatch.undo()
    native._kernel.cache_clear()
    native._state.clear()


def test_without_a_compiler_the_kernel_is_unavailable_and_never_offered(rebuild, monkeypatch):
    monkeypatch.setenv("CC", str(rebuild / "no-such-compiler"))
    assert not native.available()
    assert "no-such-compiler" in native.why_unavailable()
    assert lf.Form.NATIVE not in lf.candidates()
    with pytest.raises(ValueError, match="not available here"):
        with lf.forced(lf.Form.NATIVE):
            pass
    with pytest.raises(RuntimeError, match="not available"):
        native.linear_rows(torch.ones(1, 16), torch.ones(4, 16))


def test_the_switch_turns_it_off(rebuild, monkeypatch):
    monkeypatch.setenv(native.ENV, "0")
    assert not native.available() and native.ENV in native.why_unavailable()


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler on this machine")
def test_the_build_is_cached_and_keyed_by_the_source(rebuild, monkeypatch):
    assert native.available(), native.why_unavailable()
    built = list((rebuild / "kernels").glob("labkit-*.so"))
    assert len(built) == 1
    native._kernel.cache_clear()
    monkeypatch.setattr(native, "_build", lambda *a: pytest.fail("rebuilt although the cache had the library"))
    assert native.available()
    runtime = native.openmp_runtime()
    assert native.library_path(native.compiler(), runtime) == built[0]
    changed = rebuild / "csrc"
    shutil.copytree(native.CSRC, changed)
    (changed / "simd.h").write_text((changed / "simd.h").read_text(encoding="utf-8") + "\n/* changed */\n",
                                    encoding="utf-8")
    monkeypatch.setattr(native, "CSRC", changed)
    assert native.library_path(native.compiler(), runtime) != built[0]


@pytest.mark.skipif(native.compiler() is None or native.openmp_runtime() is None,
                    reason="no C compiler, or no OpenMP runtime in this process")
def test_where_openmp_does_not_build_the_kernels_run_on_labkits_own_pool(rebuild, monkeypatch):
    """A compiler without -fopenmp (clang without libomp, say) still gives the kernels, on the pool."""
    import subprocess

    real = native._compile
    monkeypatch.setattr(native, "_compile", lambda cc, arch, tmp, runtime: real(cc, arch, tmp, None) if runtime is None
                        else subprocess.CompletedProcess([cc], 1, "", "unrecognized option '-fopenmp'"))
    assert native.available(), native.why_unavailable()
    assert native.threading_kind() == "labkit's thread pool"
    x, w = torch.randn(3, 64), torch.randn(4096, 64)
    native.use_threads(2)
    try:
        assert torch.allclose(native.linear_rows(x, w), x @ w.t(), atol=1e-4)
        assert native.raw_kernels()["last_parts"]() == 2 and native.raw_kernels()["workers"]() >= 1
    finally:
        native.use_threads(None)


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler on this machine")
def test_a_library_of_another_version_is_refused(rebuild, monkeypatch):
    monkeypatch.setattr(native, "VERSION", native.VERSION + 1)
    assert not native.available()
    assert "expected" in native.why_unavailable()


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_a_broken_compiler_reports_its_error(rebuild, monkeypatch):
    fake = rebuild / "cc"
    fake.write_text("#!/bin/sh\necho 'fake cc 1.0'\necho 'nope' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    assert not native.available()
    assert "could not build" in native.why_unavailable() and "nope" in native.why_unavailable()


# ----------------------------------------------------------------------------- the gate's second rule

@needs_kernel
def test_the_gate_admits_the_kernel_at_every_row_count_for_its_row_invariance():
    exact = lf.exact_forms(64, 1152, max_rows=6)
    assert all(lf.Form.NATIVE in exact[t] for t in exact), exact


def test_the_gate_refuses_an_own_order_form_that_is_not_row_invariant(monkeypatch):
    def split_by_rows(x, w):        # F.linear's order alone, a reversed sum in a batch
        if x.shape[0] == 1:
            return F.linear(x, w)
        return (x[:, None, :] * w[None]).flip(-1).cumsum(-1)[..., -1]

    monkeypatch.setattr(forms, "OWN_ORDER", frozenset({"own"}))
    exact = lf.exact_forms(64, 1152, max_rows=4, forms={"F.linear": F.linear, "own": split_by_rows})
    assert all(exact[t] == ["F.linear"] for t in exact), exact


def test_the_gate_refuses_an_own_order_form_that_is_invariant_but_less_accurate(monkeypatch):
    def rows_in_bf16(x, w):         # each row alone, rounded through bf16: invariant, and worse
        return torch.cat([F.linear(r[None].bfloat16(), w.bfloat16()).float() for r in x])

    monkeypatch.setattr(forms, "OWN_ORDER", frozenset({"own"}))
    exact = lf.exact_forms(64, 1152, max_rows=4, forms={"F.linear": F.linear, "own": rows_in_bf16})
    assert all(exact[t] == ["F.linear"] for t in exact), exact


@needs_kernel
def test_with_the_kernel_chosen_a_decode_row_equals_its_verification_row():
    w = rand(960, 576, seed=7)
    x = rand(5, 576, seed=8)
    with lf.forced(lf.Form.NATIVE):
        batch = linear(x, w)
        assert all(torch.equal(linear(x[i:i + 1], w), batch[i:i + 1]) for i in range(5))


@needs_kernel
def test_the_kernel_call_releases_the_gil():
    # ctypes releases the GIL around a foreign call unless the function carries FUNCFLAG_PYTHONAPI (as
    # PyDLL's do): an async worker's product must not hold up the scheduler thread.
    assert all(not fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI for fn in native._kernel().values())


# ----------------------------------------------------------------------------- bf16

needs_bf16 = pytest.mark.skipif(not native.has_bf16(), reason="no bf16 product in this build (needs AVX512_BF16)")


@needs_bf16
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rows", [1, 3, 16])
def test_the_bf16_kernel_rounds_the_product_as_f_linear_does(shape, rows):
    x, w = rand(rows, shape[1], seed=rows).bfloat16(), rand(*shape, seed=shape[0]).bfloat16()
    exact = x.double() @ w.double().t()
    got, ref = native.linear_rows(x, w), F.linear(x, w)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, shape[0])
    # both round an fp32 sum to bf16: at most one bf16 step (2**-7 relative) apart, and as close to exact
    assert ((got.double() - ref.double()).abs() <= ref.double().abs() * 2.0 ** -7 + 1e-30).all()
    assert (got.double() - exact).abs().max() <= (ref.double() - exact).abs().max() * 1.01 + exact.abs().max() * 2.0 ** -8


@needs_bf16
@pytest.mark.parametrize("shape", SHAPES)
def test_a_bf16_row_gets_the_same_bits_at_every_row_count(shape):
    x, w = rand(16, shape[1], seed=9).bfloat16(), rand(*shape, seed=10).bfloat16()
    full = native.linear_rows(x, w)
    assert all(torch.equal(native.linear_rows(x[:t], w), full[:t]) for t in range(1, 16))
    assert all(torch.equal(native.linear_rows(x[t:t + 1], w), full[t:t + 1]) for t in range(16))


@needs_bf16
def test_bf16_nan_and_ties_round_like_torch():
    x = torch.tensor([[1.0, float("nan")], [1.0, 0.0]]).bfloat16()
    w = torch.tensor([[1.0, 1.0], [1.0 + 2 ** -7, 0.0]]).bfloat16()
    got = native.linear_rows(x, w)
    assert torch.isnan(got[0, 0]) and not torch.isnan(got[1, 0])
    assert torch.equal(got[1], F.linear(x[1:], w)[0])


def test_the_bf16_choice_is_one_for_all_row_counts_and_needs_a_clear_win():
    kernel, torch_form = lf.Bf16Form.NATIVE, lf.Bf16Form.TORCH
    assert lf.choose_bf16({kernel: {1: 1.0, 16: 2.0}, torch_form: {1: 2.0, 16: 3.0}})
    assert not lf.choose_bf16({kernel: {1: 1.0, 16: 2.95}, torch_form: {1: 2.0, 16: 2.0}})   # a near tie
    # faster at one row, slower in total: no kernel at all, rather than a mix
    assert not lf.choose_bf16({kernel: {1: 1.0, 16: 9.0}, torch_form: {1: 2.0, 16: 3.0}})


def test_the_bf16_choice_can_be_fixed(monkeypatch):
    """``LABKIT_BF16_KERNEL=0`` / ``1`` asks for PyTorch's form / the C kernel: granted where this CPU offers
    it, else the form it does offer. Before a model registers its weights, the kernel wherever it is built.
    (Whether a model has registered depends on the tests run before: both states are set here.)"""
    from labkit.kernels.tuning import bf16

    monkeypatch.setattr(bf16, "_registered", None)
    monkeypatch.setenv(lf.BF16_ENV, "0")
    assert not lf.bf16_uses_kernel()
    monkeypatch.setenv(lf.BF16_ENV, "1")
    assert lf.bf16_uses_kernel() == native.has_bf16()

    monkeypatch.setattr(bf16, "_registered", object())          # weights registered: the offered forms decide
    monkeypatch.setattr(bf16, "bf16_torch_refused", lambda threads=None: "refused in this test")
    for offered in ([bf16.Bf16Form.NATIVE, bf16.Bf16Form.TORCH], [bf16.Bf16Form.NATIVE], [bf16.Bf16Form.TORCH]):
        monkeypatch.setattr(bf16, "bf16_offered", lambda threads=None, offered=offered: offered)
        for env, want in (("0", bf16.Bf16Form.TORCH), ("1", bf16.Bf16Form.NATIVE)):
            monkeypatch.setenv(lf.BF16_ENV, env)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert bf16.bf16_form() is (want if want in offered else offered[0]), (offered, env)


def bf16_torch_refused_here() -> bool:
    from labkit.kernels.tuning import bf16

    return bf16.Bf16Form.TORCH not in bf16.bf16_offered()


@needs_bf16
@pytest.mark.parametrize("kernel", ["0", "1"])
def test_bf16_linear_gives_a_decode_row_the_bits_of_its_verification_row(kernel, monkeypatch):
    monkeypatch.setenv(lf.BF16_ENV, kernel)
    w, x = rand(3072, 576, seed=11).bfloat16(), rand(5, 576, seed=12).bfloat16()
    batch = linear(x, w)
    assert all(torch.equal(linear(x[i:i + 1], w), batch[i:i + 1]) for i in range(5))
    # "0" asks for PyTorch's form: granted where offered (not where the gate refused it, e.g. on AMX once a
    # model registered its weights; then the kernel serves)
    assert torch.equal(batch, native.linear_rows(x, w)) == lf.bf16_uses_kernel()
    assert lf.bf16_uses_kernel() == (kernel == "1") or kernel == "0" and bf16_torch_refused_here()


# ----------------------------------------------------------------------------- decode attention

def attention_case(rows=5, heads=9, kv_heads=3, head_dim=64, slots_total=300, length=70, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(slots_total, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(slots_total, kv_heads, head_dim, generator=g).to(dtype)
    q = torch.randn(rows, heads, head_dim, generator=g)
    slots = torch.randperm(slots_total, generator=g)[:length].repeat(rows, 1)
    lens = torch.randint(1, length + 1, (rows,), generator=g)
    return q, k, v, slots, lens


def sdpa_rows(q, k, v, slots, lens, scale):
    out = []
    for r in range(q.shape[0]):
        ctx = slots[min(r, slots.shape[0] - 1), :lens[r]]
        kr, vr = k[ctx].double().transpose(0, 1), v[ctx].double().transpose(0, 1)     # [Hkv, L, D]
        out.append(F.scaled_dot_product_attention(q[r, :, None].double(), kr, vr, scale=scale, enable_gqa=True)[:, 0])
    return torch.stack(out)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(9, 3, 64), (4, 4, 16), (6, 2, 20), (12, 1, 7)])
def test_decode_attention_is_softmax_attention_over_each_rows_prefix(dtype, shape):
    heads, kv_heads, head_dim = shape
    q, k, v, slots, lens = attention_case(heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)
    got = native.decode_attention(q, k, v, slots, lens, head_dim ** -0.5)
    torch.testing.assert_close(got.double(), sdpa_rows(q, k, v, slots, lens, head_dim ** -0.5), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_decode_attention_rows_are_independent_of_the_batch_and_may_share_one_context():
    q, k, v, slots, lens = attention_case(rows=6, seed=3)
    together = native.decode_attention(q, k, v, slots, lens, 0.125)
    shared = native.decode_attention(q, k, v, slots[:1], lens, 0.125)        # one slots row for every row
    assert torch.equal(together, shared)
    for r in range(6):
        alone = native.decode_attention(q[r:r + 1], k, v, slots[r:r + 1], lens[r:r + 1], 0.125)
        assert torch.equal(alone[0], together[r]), r


@needs_kernel
def test_decode_attention_ignores_what_lies_past_a_rows_context():
    q, k, v, slots, lens = attention_case(rows=3, seed=4, length=40)
    lens = torch.tensor([10, 25, 40])
    before = native.decode_attention(q, k, v, slots, lens, 0.125)
    k2, v2 = k.clone(), v.clone()
    k2[slots[0, 10:25]] = float("nan")       # positions only rows 1 and 2 see
    v2[slots[0, 10:25]] = float("nan")
    after = native.decode_attention(q, k2, v2, slots, lens, 0.125)
    assert torch.equal(after[0], before[0]) and torch.isnan(after[1]).all()


@needs_kernel
def test_decode_attention_names_bad_input():
    q, k, v, slots, lens = attention_case(rows=2)
    with pytest.raises(ValueError, match="fp32 query"):
        native.decode_attention(q.bfloat16(), k, v, slots, lens, 0.1)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        native.decode_attention(q[:, :8], k, v, slots, lens, 0.1)
    with pytest.raises(ValueError, match="int64 slots"):
        native.decode_attention(q, k, v, slots.int(), lens, 0.1)
    with pytest.raises(ValueError, match="lens"):
        native.decode_attention(q, k, v, slots, lens[:1], 0.1)


# ----------------------------------------------------------------------------- RoPE and the K/V write

@needs_kernel
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (4, 4, 16), (6, 2, 8)])
def test_rope_and_kv_write_in_c_give_pytorchs_bits(heads, kv_heads, head_dim):
    """``native.rope_write_kv`` equals ``Rotary.forward`` then ``write_kv`` to the bit: q, and the
    rotated k and the v in the pool (the small ops out of the token's path, no bit changed)."""
    from labkit.attention.reference import write_kv
    from labkit.model.llama import Rotary

    g = torch.Generator().manual_seed(heads * head_dim)
    rotary = Rotary(head_dim, 10000.0, 512, "cpu")
    T, num_slots = 37, 64
    x = torch.randn(T, (heads + 2 * kv_heads) * head_dim, generator=g) * 3
    positions = torch.randint(0, 512, (T,), generator=g)
    slots = torch.randperm(num_slots, generator=g)[:T]
    pools = [torch.full((num_slots // 4, 4, kv_heads, head_dim), float("nan")) for _ in range(4)]
    for pool in pools:
        pool.view(-1, kv_heads, head_dim)[slots] = 0.0         # untouched slots stay NaN in both
    split = x.view(T, -1, head_dim)
    qk = rotary(split[:, :heads + kv_heads], positions)
    write_kv(qk[:, heads:], split[:, heads + kv_heads:], pools[0], pools[1], slots)
    q = native.rope_write_kv(x, rotary.cos, rotary.signed_sin, positions, slots, pools[2], pools[3], heads, kv_heads)
    assert torch.equal(q, qk[:, :heads])
    for a, b in ((pools[0], pools[2]), (pools[1], pools[3])):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


@needs_kernel
def test_the_fused_attention_input_changes_no_logit_bit(llm, monkeypatch):
    from labkit import SamplingParams
    from labkit.kernels.ops.native_ops import NativeOps

    execute, fuses = llm.engine.runner.execute, NativeOps.fuses_rope_and_kv_write
    used: list[bool] = []

    def logits_of(fused: bool) -> list[torch.Tensor]:
        rows: list[torch.Tensor] = []
        monkeypatch.setattr(llm.engine.runner, "execute", lambda d: rows.append(execute(d).clone()) or rows[-1])
        monkeypatch.setattr(NativeOps, "fuses_rope_and_kv_write", lambda *a: used.append(
            fused) or (fuses(*a) if fused else False))
        llm.generate(["Why is the sky blue?", "Write a haiku about tea.", "1, 2, 3,"],
                     SamplingParams(max_tokens=5, ignore_eos=True))
        return rows

    fused, plain = logits_of(True), logits_of(False)
    monkeypatch.undo()
    assert True in used and False in used and len(fused) == len(plain)
    assert all(torch.equal(a, b) for a, b in zip(fused, plain))


AVX2_CHECK = """
import torch
from labkit.kernels import native
from labkit.kernels.ops import native_ops
assert torch.backends.cpu.get_cpu_capability() == "AVX2", torch.backends.cpu.get_cpu_capability()
assert native.available(), native.why_unavailable()
assert native.isa_level() == "avx2" and native.bf16_kind() == "widened", (native.isa_level(), native.bf16_kind())
assert native_ops._native_norm_lanes(torch.float32, 576, 1e-5) and native_ops._native_norm_lanes(torch.bfloat16, 576, 1e-5)
assert native.has_silu_mul() and native_ops._native_swiglu_exact(torch.float32, 1536)
g = torch.Generator().manual_seed(0)
codes = torch.randint(-128, 128, (100, 576), generator=g, dtype=torch.int8)
scales = torch.rand(100, 18, generator=g).half().float()
dense = (codes.float().reshape(100, 18, 32) * scales[..., None]).reshape(100, 576)
a = torch.randn(3, 576, generator=g)
assert torch.equal(native.q8_rows(a, codes, scales), native.linear_rows(a, dense))
assert native.int4_block() == 32 and native_ops._native_int4_exact()      # PyTorch's AVX2 int4 form, bit for bit
print("avx2 ok")
"""


@pytest.mark.skipif(native.compiler() is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="needs a C compiler on x86-64")
def test_the_kernels_build_and_give_pytorchs_bits_for_an_avx2_cpu():
    """The AVX2 code paths (8-lane vectors, the 8-lane exp, PyTorch's AVX2 int4 form), built with
    LABKIT_ISA=avx2 (-march=x86-64-v3) and checked against PyTorch's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2): an AVX-512
    machine runs both. A missing header there once failed the whole build on AVX2 CPUs, leaving them
    without any C kernel."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU has no AVX2")
    if "avx2" not in native.cpu_flags() or "fma" not in native.cpu_flags():
        pytest.skip("this CPU has no AVX2 with FMA")
    # LABKIT_ISA=avx2 builds into the cache once per source version, the library tests/kernels/test_isa_levels.py loads
    env = {**os.environ, native.ISA_ENV: "avx2", "ATEN_CPU_CAPABILITY": "avx2"}
    env.pop(native.MARCH_ENV, None)
    out = subprocess.run([sys.executable, "-c", AVX2_CHECK], env=env, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and "avx2 ok" in out.stdout, out.stderr[-2000:]
