"""labkit's C kernels on several threads (csrc/threads.c): each output is computed whole, by one thread, in
the one order its kernel's header gives, so the thread count changes no bit. Checked against the one-thread
result for every kernel that splits its work (the products in fp32, bf16, Q8_0 and int4; decode attention),
at thread counts above this machine's core count too (a 2-core machine still runs 4 threads), for shapes
whose outputs do not divide evenly among the threads; on the real model's logits at 1 and 2 threads; and
for the pool's own hazards: two Python threads calling at once, and a child process forked after the
workers started."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams
from labkit.kernels import linear_forms, native
from labkit.kernels.ops import native_ops
from labkit.kernels.ops.native_ops import NativeOps

pytestmark = pytest.mark.skipif(not native.available(), reason=f"C kernel unavailable: {native.why_unavailable()}")

THREADS = (2, 3, 4, 7)
# the model's products (qkv, o, gate_up, down, LM head) and shapes with tails: N % 4, K % 16, N < threads
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576), (13, 100), (3, 40), (1027, 577)]


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
    native.use_threads(None)


def at_threads(n, fn, *args):
    native.use_threads(n)
    try:
        return fn(*args)
    finally:
        native.use_threads(None)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_product_has_the_same_bits_at_every_thread_count_and_every_row_count(shape, dtype):
    if dtype == torch.bfloat16 and not native.has_bf16():
        pytest.skip("no bf16 product in this build (no AVX512_BF16)")
    n, k = shape
    w = rand(n, k, seed=n).to(dtype)
    x = rand(16, k, seed=k).to(dtype)
    for walk in (0, 16):                     # tiles, and the sequential walk
        native.set_sequential_rows(walk)
        try:
            one = at_threads(1, native.linear_rows, x, w)
            for threads in THREADS:
                for rows in (1, 2, 3, 5, 16):
                    y = at_threads(threads, native.linear_rows, x[:rows].clone(), w)
                    assert torch.equal(y, one[:rows]), (walk, threads, rows)    # batch-invariant as well
        finally:
            native.set_sequential_rows(0)
    ref = (x.float() @ w.float().t())
    assert torch.allclose(one.float(), ref, rtol=2e-2 if dtype == torch.bfloat16 else 1e-4, atol=1e-2)


def test_a_split_really_runs_on_more_than_one_thread_and_a_tiny_job_is_not_split():
    """Not a timing: a product worth splitting ran in as many parts as threads were asked for, and a
    tiny one on the calling thread alone."""
    kernels = native.raw_kernels()
    at_threads(3, native.linear_rows, rand(1, 576), rand(49152, 576))
    assert kernels["last_parts"]() == 3
    if native.threading_kind() == "labkit's thread pool":
        assert kernels["workers"]() >= 2
    at_threads(2, native.linear_rows, rand(1, 576), rand(49152, 576))
    assert kernels["last_parts"]() == 2
    at_threads(3, native.linear_rows, rand(1, 8), rand(16, 8))        # 128 multiply-adds: not worth a thread
    assert kernels["last_parts"]() == 2                                # unchanged: no split job ran


def test_the_kernels_share_pytorchs_openmp_runtime_where_it_has_one():
    """Two OpenMP runtimes in one process fight for the cores (each spins its idle workers after its
    work): the kernels link to the runtime PyTorch loaded, so exactly one is mapped."""
    import os

    runtime = native.openmp_runtime()
    if runtime is None:
        assert native.threading_kind() == "labkit's thread pool"
        return
    assert native.threading_kind().startswith("OpenMP")
    with open("/proc/self/maps", encoding="utf-8") as maps:
        mapped = {line.split()[-1] for line in maps if len(line.split()) == 6}
    names = {os.path.basename(p) for p in mapped if native._OPENMP_NAMES.match(os.path.basename(p))}
    assert names == {os.path.basename(runtime)}, names


def test_labkits_own_pool_gives_the_same_bits_as_well():
    """The pool serves where PyTorch has no OpenMP runtime; forced here with LABKIT_NATIVE_THREADS=pool,
    this file's fast tests run again on it in a fresh process."""
    import os
    import subprocess
    import sys

    if os.environ.get(native.THREADS_ENV) == "pool":
        assert native.threading_kind() == "labkit's thread pool"
        return
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m",
                          "not slow", __file__], env={**os.environ, native.THREADS_ENV: "pool"}, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout


@pytest.mark.parametrize("rows", [1, 3, 16])
def test_the_q8_product_has_the_same_bits_at_every_thread_count(rows):
    codes = torch.randint(-127, 128, (4099, 576), generator=torch.Generator().manual_seed(1), dtype=torch.int8)
    scales = rand(4099, 576 // 32, seed=2).abs() * 0.01
    x = rand(rows, 576, seed=3)
    one = at_threads(1, native.q8_rows, x, codes, scales)
    for threads in THREADS:
        assert torch.equal(at_threads(threads, native.q8_rows, x, codes, scales), one), threads
    assert torch.equal(one, native.linear_rows(x, (codes.float().view(4099, -1, 32) * scales[..., None]).view(4099, 576)))


@pytest.mark.skipif(native.int4_block() is None, reason="labkit has no form of PyTorch's int4 kernel for this CPU")
@pytest.mark.parametrize("rows", [1, 4, 7])
def test_the_int4_product_has_the_same_bits_at_every_thread_count_and_pytorchs(rows):
    ops = torch.ops.aten
    n, k, group = 1536, 576, 32
    g = torch.Generator().manual_seed(5)
    packed = ops._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32), 1)
    scale = torch.rand(k // group, n, generator=g) * 0.02
    zero = scale * (8 - 8 * torch.rand(k // group, n, generator=g))
    scales_zeros = torch.stack((scale, zero), -1).to(torch.bfloat16)
    x = rand(rows, k, seed=6).to(torch.bfloat16)
    one = at_threads(1, native.int4_rows, x, packed, scales_zeros, group)
    for threads in THREADS:
        assert torch.equal(at_threads(threads, native.int4_rows, x, packed, scales_zeros, group), one), threads
    if native_ops._native_int4_exact():
        assert torch.equal(one, ops._weight_int4pack_mm_for_cpu(x, packed, group, scales_zeros))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads,kv_heads", [(9, 3), (8, 8), (4, 1)])
def test_decode_attention_has_the_same_bits_at_every_thread_count(dtype, heads, kv_heads):
    g = torch.Generator().manual_seed(heads)
    rows, d, slots_total = 5, 64, 300
    k_pool = torch.randn(slots_total, kv_heads, d, generator=g).to(dtype)
    v_pool = torch.randn(slots_total, kv_heads, d, generator=g).to(dtype)
    q = torch.randn(rows, heads, d, generator=g)
    slots = torch.stack([torch.randperm(slots_total, generator=g)[:200] for _ in range(rows)])
    lens = torch.tensor([1, 7, 64, 150, 200])
    one = at_threads(1, native.decode_attention, q, k_pool, v_pool, slots, lens, 0.125)
    for threads in THREADS:
        assert torch.equal(at_threads(threads, native.decode_attention, q, k_pool, v_pool, slots, lens, 0.125), one)
        alone = at_threads(threads, native.decode_attention, q[3:4].clone(), k_pool, v_pool, slots[3:4].clone(),
                           lens[3:4].clone(), 0.125)
        assert torch.equal(alone, one[3:4])


def test_two_python_threads_calling_at_once_each_get_their_own_bits():
    """One job runs on the pool at a time; a second caller computes its own alone: the same bits."""
    w1, w2 = rand(8192, 576, seed=1), rand(4096, 1536, seed=2)
    x1, x2 = rand(3, 576, seed=3), rand(2, 1536, seed=4)
    want = (at_threads(1, native.linear_rows, x1, w1), at_threads(1, native.linear_rows, x2, w2))
    bad: list[str] = []

    def caller(i, x, w):
        native.use_threads(2)             # per Python thread, as torch's count is
        for _ in range(60):
            if not torch.equal(native.linear_rows(x, w), want[i]):
                bad.append(f"caller {i}")

    threads = [threading.Thread(target=caller, args=a) for a in ((0, x1, w1), (1, x2, w2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not bad


def _child_product(queue):
    native.use_threads(2)
    queue.put(native.linear_rows(rand(2, 576, seed=7), rand(4096, 576, seed=8)).sum().item())


def test_a_forked_child_starts_its_own_workers_instead_of_waiting_for_its_parents():
    at_threads(2, native.linear_rows, rand(1, 576), rand(8192, 576))       # the parent's workers are running
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_product, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung in the kernel")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == at_threads(1, native.linear_rows, rand(2, 576, seed=7), rand(4096, 576, seed=8)).sum().item()


def test_the_thread_count_must_be_a_positive_int():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            native.use_threads(bad)
    native.use_threads(3)
    assert native.sync_threads() == 3
    native.use_threads(None)
    assert native.sync_threads() == torch.get_num_threads()


@pytest.mark.slow  # loads the model three times and decodes at two thread counts (~40 s on 2 cores)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "q4_1"])
def test_the_models_logits_are_the_same_on_one_thread_and_two(dtype, monkeypatch):
    """The real model, prefill and decode at batch 3, with labkit's C product for every fp32 product (the
    form the timing probe picks may differ with the thread count; this compares the kernels, not the
    choice): every logits row on two threads equals the row on one, bit for bit."""
    weights = "q4_1" if dtype == "q4_1" else "dense"
    dtype = "float32" if dtype == "q4_1" else dtype
    if dtype == "bfloat16":
        if not native.has_bf16():
            pytest.skip("no bf16 product in this build (no AVX512_BF16)")
        monkeypatch.setenv(linear_forms.BF16_ENV, "1")
    llm = LLM(config=EngineConfig(dtype=dtype, weights=weights, max_num_seqs=3), progress=False)
    execute = llm.engine.runner.execute
    layer_calls = []
    real_layer = NativeOps.decode_layer
    monkeypatch.setattr(NativeOps, "decode_layer", lambda self, *a: layer_calls.append(1) or real_layer(self, *a))

    def logits_at(threads: int) -> list[torch.Tensor]:
        torch.set_num_threads(threads)
        rows: list[torch.Tensor] = []
        monkeypatch.setattr(llm.engine.runner, "execute", lambda d: rows.append(execute(d).clone()) or rows[-1])
        with linear_forms.forced(linear_forms.Form.NATIVE):
            llm.generate(["Why is the sky blue?", "Write a haiku about tea.", "1, 2, 3,"],
                         SamplingParams(max_tokens=6, ignore_eos=True))
        return rows

    one, two = logits_at(1), logits_at(2)
    assert layer_calls, "no decode step ran as one C call a layer"
    assert len(one) == len(two) and all(torch.equal(a, b) for a, b in zip(one, two))
