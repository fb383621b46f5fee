"""labkit's C kernels at every instruction-set level this CPU can run, forced with ``LABKIT_ISA``: the
generic vectors (what a CPU without AVX2 runs, and aarch64), AVX2 with FMA (most laptops), AVX-512 without
AVX512_BF16 (Intel before Cooper Lake, AMD before Zen 4) and AVX-512 with it. At each level, in one child
process (one library per level, built once per source version in the cache, then only loaded):

- the level the build reports is the one asked for, and its bf16 product is the widened one below
  AVX512_BF16 and the dot-product one with it;
- fp32 and bf16 products give a row the same bits at every row count 1..16, at every position, in both
  walks and at 1, 2 and 3 threads; and the linear-form gate's own check (`invariance.linear_difference`)
  finds no difference;
- the widened bf16 product is the fp32 kernel's product of the widened operands rounded to bf16, bit for
  bit (its documented order), and every product is within the tolerance tests/kernels/test_native_kernel.py
  documents against PyTorch's ``F.linear`` (fp32: at most twice its error against float64, plus one ulp
  of the largest value; bf16: within one bf16 step of PyTorch's bf16 product).

- the whole model's logits (the default model, one short prompt, a prefill and three decode steps, fp32 and
  bf16, every product and small op in C, decode steps as one C call a layer where PyTorch's vector exp
  matches the level) are within the documented tolerance of PyTorch's logits on the same tokens: fp32
  within 2^-16 of the largest logit's magnitude, with PyTorch's greedy tokens; bf16 no further from
  PyTorch's fp32 logits than twice PyTorch's own bf16 forward is.

The levels run in one child process, the loader's library swapped level by level, with PyTorch at AVX2
(ATEN_CPU_CAPABILITY) where the CPU has it: the small ops' PyTorch orders (8-lane exp and RMSNorm) are then
ones every level from AVX2 up matches, so the whole-layer call runs at each of them (the generic level has
no vector exp: its layers run op by op, as on such a CPU). A level this CPU lacks is refused by the loader
with its reason, which the child checks too."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.kernels import native

LEVEL_CHECK = r"""
import sys
import torch
import torch.nn.functional as F
from labkit.kernels import invariance, native
from labkit.kernels.cpu_features import cpu_flags

def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))

import os

from labkit import LLM, EngineConfig, SamplingParams
from labkit.kernels import linear_forms
from labkit.kernels.ops import native_ops
from labkit.kernels.ops.native_ops import NativeOps

os.environ[linear_forms.ENV] = "C kernel"       # the fp32 product form is fixed here: no timing probe
os.environ["LABKIT_HUGE_PAGES"] = "0"           # no copy of the weights into huge pages: speed is not measured here
LLMS = {}


def logits(dtype, plain):
    # the logits rows of one greedy generation (prefill, then 3 decode steps): labkit's C kernels at the
    # loaded level, or (plain) PyTorch's ops and products; and how many whole-layer C calls ran
    if dtype not in LLMS:
        LLMS[dtype] = LLM(config=EngineConfig(dtype=dtype, max_num_seqs=1, num_blocks=8), progress=False)
    llm, rows, layers = LLMS[dtype], [], []
    execute, for_input, layer = llm.engine.runner.execute, native_ops.for_input, NativeOps.decode_layer
    llm.engine.runner.execute = lambda d: rows.append(execute(d).clone()) or rows[-1]
    NativeOps.decode_layer = lambda self, *a: layers.append(1) or layer(self, *a)
    if plain:
        native_ops.for_input = lambda *a: None
    os.environ[linear_forms.BF16_ENV] = "0" if plain else "1"
    try:
        with linear_forms.forced(linear_forms.Form.F_LINEAR if plain else linear_forms.Form.NATIVE):
            llm.generate(["Why is the sky blue?"], SamplingParams(max_tokens=4, ignore_eos=True))
    finally:
        llm.engine.runner.execute, native_ops.for_input, NativeOps.decode_layer = execute, for_input, layer
        os.environ.pop(linear_forms.BF16_ENV)
    return torch.cat(rows), len(layers)


def same_context(a, b):
    # rows of a and b computed on the same tokens: up to the first row whose greedy token differs
    differ = (a.argmax(-1) != b.argmax(-1)).nonzero()
    return len(a) if not len(differ) else int(differ[0]) + 1


torch.set_num_threads(1)        # the model on one thread (threads change no bit: the checks above and test_native_threads)
REF = {dtype: logits(dtype, plain=True)[0] for dtype in ("float32", "bfloat16")}

for level in sys.argv[1:]:
    os.environ[native.ISA_ENV] = level
    native._kernel.cache_clear()
    native_ops.forget_checks()                    # checks made against the previous level's library
    needs = [f for f in native.ISA_LEVELS[level][1] if f not in cpu_flags()]
    if needs:
        assert not native.available() and "does not have" in native.why_unavailable(), native.why_unavailable()
        print(level, "refused:", native.why_unavailable())
        continue
    assert native.available(), (level, native.why_unavailable())
    assert native.isa_level() == level, (level, native.isa_level())
    assert native.bf16_kind() == ("dot" if level == "avx512bf16" else "widened"), native.bf16_kind()
    for n, k in ((1027, 100), (9, 7), (64, 577)):
        w, x = rand(n, k, seed=n), rand(16, k, seed=k)
        for dtype in (torch.float32, torch.bfloat16):
            wd, xd = w.to(dtype), x.to(dtype)
            full = native.linear_rows(xd, wd)
            for walk in (0, 16):
                native.set_sequential_rows(walk)
                for threads in (1, 2, 3):
                    native.use_threads(threads)
                    for t in (range(1, 17) if threads == 1 else (1, 2, 5, 16)):
                        assert torch.equal(native.linear_rows(xd[:t], wd), full[:t]), (level, n, k, dtype, walk, threads, t)
                        assert torch.equal(native.linear_rows(xd[t - 1:t], wd), full[t - 1:t]), (level, n, k, dtype, t)
                    native.use_threads(None)
            native.set_sequential_rows(0)
            exact = xd.double() @ wd.double().t()
            ref = F.linear(xd, wd)
            if dtype == torch.float32:
                err, ref_err = (full.double() - exact).abs().max().item(), (ref.double() - exact).abs().max().item()
                assert err <= 2 * ref_err + exact.abs().max().item() * 2.0 ** -23, (level, n, k, err, ref_err)
            else:
                assert ((full.double() - ref.double()).abs() <= ref.double().abs() * 2.0 ** -7 + 1e-30).all(), (level, n, k)
                if native.bf16_kind() == "widened":
                    assert torch.equal(full, native.linear_rows(xd.float(), wd.float()).bfloat16()), (level, n, k)
    for dtype in (torch.float32, torch.bfloat16):
        why = invariance.linear_difference(native.linear_rows, (64, 577), dtype)
        assert why is None, (level, dtype, why)
    f32, layers32 = logits("float32", plain=False)
    ref = REF["float32"]
    assert torch.equal(f32.argmax(-1), ref.argmax(-1)), (level, "fp32 greedy tokens differ from PyTorch's")
    err32 = (f32 - ref).abs().max().item()
    assert err32 <= 2.0 ** -16 * ref.abs().max().item(), (level, err32)
    b16, layers16 = logits("bfloat16", plain=False)
    n, m = same_context(b16, ref), same_context(REF["bfloat16"], ref)
    err16 = (b16[:n] - ref[:n]).abs().max().item()
    torch_err16 = (REF["bfloat16"][:m] - ref[:m]).abs().max().item()
    assert err16 <= 2 * torch_err16, (level, err16, torch_err16)
    assert layers32 == layers16 and (layers32 > 0) == native.has_silu_mul(), (level, layers32, layers16)
    print(level, "ok", native.bf16_kind(), f"logits: fp32 {err32:.2e}; bf16 {err16:.3f} (PyTorch's bf16 {torch_err16:.3f}) "
          f"on {n} rows; {layers32} whole-layer calls")
"""


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler: labkit keeps to PyTorch's forms")
def test_every_isa_level_this_cpu_runs_gives_row_and_thread_invariant_products(tmp_path):
    x86 = platform.machine() in ("x86_64", "AMD64")
    levels = list(native.ISA_NAMES) if x86 else ["generic"]
    env = {**os.environ}
    env.pop(native.ISA_ENV, None)
    env.pop(native.MARCH_ENV, None)
    # PyTorch at AVX2 (where the CPU has it) at every level: its 8-lane vector exp and RMSNorm order are ones
    # every level from AVX2 up matches, so decode steps run as one C call a layer there; one child, one model load
    aten = {"ATEN_CPU_CAPABILITY": "avx2"} if x86 and "avx2" in native.cpu_flags() else {}
    out = subprocess.run([sys.executable, "-c", LEVEL_CHECK, *levels], env={**env, **aten, native.ISA_ENV: levels[0]},
                         capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    stdout = out.stdout
    ran = [line.split()[0] for line in stdout.splitlines() if line.split()[1:2] == ["ok"]]
    assert "generic" in ran and (not x86 or "avx2" in ran or "avx2" not in native.cpu_flags()), stdout
    if native.isa_level() is not None:
        assert native.isa_level() in ran, stdout              # this CPU's own level is among those checked


def test_a_level_the_loader_does_not_know_or_this_cpu_lacks_is_refused_with_its_reason(monkeypatch):
    monkeypatch.setenv(native.ISA_ENV, "avx1024")
    with pytest.raises(RuntimeError, match="LABKIT_ISA='avx1024': choose one of native, generic, avx2"):
        native.forced_isa()
    monkeypatch.setenv(native.ISA_ENV, "avx512bf16")
    monkeypatch.setattr(native, "cpu_flags", lambda: frozenset({"avx2", "fma", "bmi2", "f16c"}))
    with pytest.raises(RuntimeError, match="needs avx512f"):
        native.forced_isa()
    monkeypatch.setenv(native.ISA_ENV, "native")
    assert native.forced_isa() is None
