"""labkit's own few-row fp32 product (``csrc/linear_rows.c``), built on this machine on first use.

The C file is compiled once per machine with the C compiler at hand (``$CC``, else ``cc``, ``gcc`` or
``clang``) for this CPU's instruction set (``-march=native``), into the cache directory, and loaded
through ctypes (which releases the GIL during the call, so an async worker thread's product does not
hold up the scheduler). The build is keyed by a hash of the source, the compiler's version line, the
flags and the CPU line, so a changed source, compiler or CPU builds anew and a stale library is never
loaded. Where there is no compiler, or the build fails, `available()` is False, `why_unavailable()` says
why, and labkit keeps to PyTorch's forms (``labkit.model.linear_forms`` only offers this one when it
builds). ``LABKIT_NATIVE=0`` switches it off.

What it computes: ``x @ wᵀ`` for fp32 ``x [T, K]`` and ``w [N, K]`` (and for bf16 on CPUs with
AVX512_BF16, through their bf16 dot-product instruction), with one summation order for every output
whatever T is (the source's header comment has the order), so a row gets the same bits alone or among
16 (tests/test_native_kernel.py).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from labkit.model.cache_dir import cache_root
from labkit.model.cpu_features import describe_cpu

SOURCE = Path(__file__).with_name("csrc") / "linear_rows.c"
VERSION = 3                 # labkit_linear_rows_version() in the source
ENV = "LABKIT_NATIVE"
# -ffp-contract=fast: a*b + c is one fused multiply-add wherever the CPU has one, in every tile alike.
FLAGS = ("-O3", "-ffp-contract=fast", "-fno-math-errno", "-shared", "-fPIC", "-std=gnu11", "-Wno-psabi")
ARCH_FLAGS = (("-march=native",), ("-mcpu=native",), ())   # tried in turn: x86 and most others, Arm, none
BUILD_TIMEOUT_S = 120

_state: dict[str, object] = {}


def compiler() -> str | None:
    """The C compiler to build with: ``$CC`` or the first of cc, gcc, clang on the PATH."""
    env = os.environ.get("CC")
    if env:
        return shutil.which(env) or env
    return next((path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None)


def _version_line(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"the C compiler {cc} does not run: {exc}") from exc
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else cc


def _build(cc: str, target: Path) -> None:
    """Compile the source into ``target`` (written to a temporary name, then renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for arch in ARCH_FLAGS:
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            out = subprocess.run([cc, *FLAGS, *arch, "-o", tmp, str(SOURCE)], capture_output=True, text=True,
                                 timeout=BUILD_TIMEOUT_S)
            if out.returncode == 0:
                os.replace(tmp, target)
                return
            errors.append(f"{' '.join(arch) or 'no -march'}: {out.stderr.strip()[-300:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{' '.join(arch) or 'no -march'}: {exc}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError(f"{cc} could not build {SOURCE.name}: " + " | ".join(errors))


def library_path(cc: str) -> Path:
    """Where the build for this source, compiler, flags and CPU lives in the cache."""
    key = hashlib.sha256("\n".join([SOURCE.read_text(encoding="utf-8"), _version_line(cc), " ".join(FLAGS),
                                    describe_cpu()]).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"linear_rows-{key}.so"


def _load() -> ctypes.CDLL:
    if os.environ.get(ENV, "1") == "0":
        raise RuntimeError(f"switched off by {ENV}=0")
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    path = library_path(cc)
    if not path.exists():
        _build(cc, path)
    lib = ctypes.CDLL(str(path))
    if lib.labkit_linear_rows_version() != VERSION:
        raise RuntimeError(f"{path} is version {lib.labkit_linear_rows_version()}, expected {VERSION}")
    names = {torch.float32: "labkit_linear_rows_f32"}
    if lib.labkit_linear_rows_has_bf16():
        names[torch.bfloat16] = "labkit_linear_rows_bf16"
    kernels = {}
    for dtype, name in names.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3
        fn.restype = None
        kernels[dtype] = fn
    return kernels


@functools.lru_cache(maxsize=1)
def _kernel():
    """The loaded entry point, or None (the reason kept for `why_unavailable`); built at most once."""
    try:
        return _load()
    except (OSError, RuntimeError) as exc:
        _state["why"] = str(exc)
        return None


def available() -> bool:
    """Whether the kernel built and loaded on this machine (builds it on the first call)."""
    return _kernel() is not None


def has_bf16() -> bool:
    """Whether the build has the bf16 product (CPUs with AVX512_BF16's dot-product instruction)."""
    return available() and torch.bfloat16 in _kernel()


def why_unavailable() -> str | None:
    """None when `available()`, else the reason (no compiler, a failed build, switched off)."""
    return None if available() else str(_state.get("why"))


def linear_rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weightᵀ`` for CPU tensors x [T, K] and weight [N, K] -> [T, N], row-invariant; float32, or
    bfloat16 where `has_bf16`."""
    kernels = _kernel()
    if kernels is None:
        raise RuntimeError(f"labkit's C kernel is not available: {why_unavailable()}")
    if (x.dtype != weight.dtype or x.dtype not in (torch.float32, torch.bfloat16)
            or x.device.type != "cpu" or weight.device.type != "cpu"):
        raise ValueError(f"linear_rows takes float32 or bfloat16 CPU tensors of one dtype, got x {x.dtype} on "
                         f"{x.device}, weight {weight.dtype} on {weight.device}")
    if x.dtype not in kernels:
        raise ValueError("linear_rows in bfloat16 needs a CPU with AVX512_BF16 (this build has no bf16 product)")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_rows needs x [T, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}")
    x = x.contiguous()
    weight = weight.contiguous()
    y = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype)
    kernels[x.dtype](x.data_ptr(), weight.data_ptr(), y.data_ptr(), x.shape[0], weight.shape[0], x.shape[1])
    return y
