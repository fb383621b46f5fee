"""labkit's C kernels, built on this machine on first use: the few-row product of a decode step
(``csrc/linear_rows.c``), paged attention for one query token at a time (``csrc/decode_attention.c``),
the small ops around them with PyTorch's bits (RoPE + K/V write ``csrc/rope_kv.c``; RMSNorm, the residual
add before it and silu(gate) * up ``csrc/norm_act.c``), and a decode step's whole layer in one call
(``csrc/decode_layer.c``); and for the q4_1 model its LM head, an fp32 product with Q8_0 weights
(``csrc/q8_rows.c``), and its layer products with PyTorch's int4 kernel's bits (``csrc/int4_rows.c``).

The C files are compiled once per machine with the C compiler at hand (``$CC``, else ``cc``, ``gcc`` or
``clang``) for this CPU's instruction set (``-march=native``), into the cache directory, and loaded
through ctypes (which releases the GIL during the call, so an async worker thread's product does not
hold up the scheduler). The build is keyed by a hash of the source, the compiler's version line, the
flags and the CPU line, so a changed source, compiler or CPU builds anew and a stale library is never
loaded. A class's set-up records its compiler's version line beside the library it built
(`record_compiler`); a learner's process whose compiler is that same file reads the line there and starts
no compiler process at all. Where there is no compiler, or the build fails, `available()` is False,
`why_unavailable()` says why, and labkit keeps to PyTorch's forms (``labkit.kernels.tuning.forms`` only offers this one when it
builds). ``LABKIT_NATIVE=0`` switches it off. ``LABKIT_ISA=generic|avx2|avx512|avx512bf16`` builds (and
loads, a library per level) the kernels for that instruction-set level instead of this CPU's own, so an
AVX-512 machine runs what an AVX2-only laptop runs (`ISA_LEVELS`).

What it computes: ``x @ wᵀ`` for fp32 ``x [T, K]`` and ``w [N, K]``, and for bf16 (on CPUs with
AVX512_BF16 through their bf16 dot-product instruction, elsewhere with the weights widened to fp32 in
registers: `bf16_kind`), with one summation order for every output whatever T is (the source's header
comment has the order), so a row gets the same bits alone or among 16 (tests/kernels/test_native_kernel.py).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from labkit.cache_dir import cache_root, shared_root
from labkit.kernels.cpu_features import cpu_flags, describe_cpu

CSRC = Path(__file__).with_name("csrc")
SOURCES = ("linear_rows.c", "decode_attention.c", "rope_kv.c", "norm_act.c", "decode_layer.c", "q8_rows.c",
           "int4_rows.c", "threads.c")   # one library
VERSION = 9                 # labkit_linear_rows_version() in the source
ENV = "LABKIT_NATIVE"
# -ffp-contract=off: the kernels write out every fused multiply-add (simd.h's `fmadd` and `FMA`). Left to
# the compiler, contraction is a tuning decision: GCC's -march=znver3 kept some loop-carried a*b + c chains
# unfused and fused others, so a row's bits depended on the tile that computed it.
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC", "-pthread", "-std=gnu11", "-Wno-psabi",
         f"-I{CSRC}")
ARCH_FLAGS = (("-march=native",), ("-mcpu=native",), ())   # tried in turn: x86 and most others, Arm, none
# LABKIT_NATIVE_MARCH=x86-64-v3 (say) builds for that instruction set instead of this CPU's own: how the
# tests check the AVX2 code paths on an AVX-512 machine (with ATEN_CPU_CAPABILITY=avx2 for PyTorch's side).
MARCH_ENV = "LABKIT_NATIVE_MARCH"
# LABKIT_ISA=LEVEL builds for one of these instruction-set levels (x86-64; on other CPUs only "generic", the
# compiler's own vectors): {level: (compiler flags, the /proc/cpuinfo flags the CPU must have)}. The build
# reports the level it got (`isa_level`), and every tuning choice is cached per level (tuning/cache.py).
ISA_ENV = "LABKIT_ISA"
_V3 = ("avx2", "fma", "bmi2", "f16c")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
ISA_LEVELS = {
    "generic": (("-march=x86-64",), ()),
    # Tuned for Zen 3: GCC's Zen tuning is the one that splits loop-carried multiply-add chains when it may
    # contract, so a forced AVX2 build on any machine would show an fma left to the compiler (a tuning, so
    # it runs on every AVX2 CPU; it found the tile-dependent bits this level's generic tuning had hidden).
    "avx2": (("-march=x86-64-v3", "-mtune=znver3"), _V3),
    "avx512": (("-march=x86-64-v4",), _V4),
    "avx512bf16": (("-march=x86-64-v4", "-mavx512bf16"), (*_V4, "avx512_bf16")),
}
ISA_NAMES = ("generic", "avx2", "avx512", "avx512bf16")      # labkit_isa_level() 0..3
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


# A class's set-up (``shared_cache.prepare``) records the compiler it keyed the shared library with, beside it,
# so that a learner's process keys that library without running the compiler at all (`_compiler_line`).
COMPILERS = "compilers.json"


def _compiler_identity(cc: str) -> dict[str, str]:
    """The name ``cc`` is run by, the file it resolves to and the sha256 of that file's bytes: the same bytes
    run by the same name print the same version line (gcc prints the name it was called by; the directory,
    /bin or /usr/bin, does not matter)."""
    real = os.path.realpath(shutil.which(cc) or cc)
    return {"name": Path(cc).name, "file": real, "sha256": hashlib.sha256(Path(real).read_bytes()).hexdigest()}


def record_compiler(kernels: Path) -> str | None:
    """Write this process's compiler (`compiler`): `_compiler_identity` and its version line, as one entry of
    ``kernels/compilers.json`` (other compilers' entries kept). Returns the version line; None where there is
    no compiler."""
    cc = compiler()
    if cc is None:
        return None
    path = kernels / COMPILERS
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    identity = _compiler_identity(cc)
    key = f"{identity['name']} {identity['file']}"
    known = known if isinstance(known, dict) else {}
    known[key] = {**identity, "version": _version_line(cc)}
    kernels.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return known[key]["version"]


def _compiler_line(cc: str) -> str:
    """``cc``'s version line for the library's key: read from the class's shared cache when its set-up recorded
    this very compiler (run by the same name, resolving to the same file with the same bytes), so a learner's
    kernel starts no compiler process; else ``cc --version`` runs, as without a class (a learner with another
    compiler gets a key of its own)."""
    shared = shared_root()
    if shared is not None:
        try:
            identity = _compiler_identity(cc)
            known = json.loads((shared / "kernels" / COMPILERS).read_text(encoding="utf-8"))
            entry = known[f"{identity['name']} {identity['file']}"]
            if {k: entry[k] for k in identity} == identity:
                return str(entry["version"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return _version_line(cc)


# How the kernels run on several threads (csrc/threads.c): on the OpenMP runtime PyTorch loaded, linked to
# that very library so that one set of worker threads serves both (two runtimes fight for the cores), or
# on labkit's own thread pool where the process has no OpenMP runtime. LABKIT_NATIVE_THREADS=pool forces
# the pool (how the tests check it on a machine whose PyTorch has OpenMP).
THREADS_ENV = "LABKIT_NATIVE_THREADS"
_OPENMP_NAMES = re.compile(r"^lib(gomp|iomp5|omp)([-.].*)?\.so(\.\d+)*$")


def openmp_runtime() -> str | None:
    """The path of the OpenMP runtime loaded in this process (PyTorch's libgomp, or a GOMP-compatible
    libiomp5 or libomp), or None (none loaded, no /proc to ask, or `THREADS_ENV` = pool)."""
    if os.environ.get(THREADS_ENV, "openmp") == "pool":
        return None
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and _OPENMP_NAMES.match(os.path.basename(fields[5].strip())):
            return fields[5].strip()
    return None


def _compile(cc: str, arch: tuple, tmp: str, runtime: str | None) -> subprocess.CompletedProcess:
    """One build: all sources in one command, or with an OpenMP runtime, compiled with -fopenmp and linked
    to ``runtime`` itself rather than the compiler's own (which would load a second runtime)."""
    sources = [str(CSRC / name) for name in SOURCES]
    if runtime is None:
        return subprocess.run([cc, *FLAGS, *arch, "-o", tmp, *sources, "-lm"], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    with tempfile.TemporaryDirectory() as objects:
        out = subprocess.run([cc, *FLAGS, *arch, "-fopenmp", "-DLABKIT_OPENMP", "-c", *sources], cwd=objects,
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if out.returncode != 0:
            return out
        return subprocess.run([cc, "-shared", "-pthread", "-o", tmp, *sorted(Path(objects).glob("*.o")), runtime,
                               "-lm"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def forced_isa() -> str | None:
    """The level ``LABKIT_ISA`` asks for (None: this CPU's own); a RuntimeError names a level that is not
    one of `ISA_LEVELS` or that this CPU cannot run (it would fault on the first instruction it lacks)."""
    level = os.environ.get(ISA_ENV, "").strip().lower()
    if not level or level == "native":
        return None
    if level not in ISA_LEVELS:
        raise RuntimeError(f"{ISA_ENV}={level!r}: choose one of native, {', '.join(ISA_NAMES)}")
    if level != "generic" and platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError(f"{ISA_ENV}={level} is an x86-64 level; this CPU is {platform.machine()} (only generic)")
    missing = [flag for flag in ISA_LEVELS[level][1] if flag not in cpu_flags()]
    if missing:
        raise RuntimeError(f"{ISA_ENV}={level} needs {', '.join(missing)}, which this CPU does not have")
    return level


def _arch_choices() -> tuple:
    """The -march flags to try in turn: ``LABKIT_ISA``'s level, ``LABKIT_NATIVE_MARCH``, or this CPU's own."""
    level = forced_isa()
    if level is not None:
        return (ISA_LEVELS[level][0],) if platform.machine() in ("x86_64", "AMD64") else ((),)
    march = os.environ.get(MARCH_ENV)
    return ((f"-march={march}",),) if march else ARCH_FLAGS


def _build(cc: str, target: Path, runtime: str | None) -> None:
    """Compile the source into ``target`` (written to a temporary name, then renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for arch in _arch_choices():
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            out = _compile(cc, arch, tmp, runtime)
            if out.returncode == 0:
                os.replace(tmp, target)
                return
            errors.append(f"{' '.join(arch) or 'no -march'}: {out.stderr.strip()[-300:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{' '.join(arch) or 'no -march'}: {exc}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError(f"{cc} could not build {', '.join(SOURCES)}: " + " | ".join(errors))


def library_path(cc: str, runtime: str | None = None) -> Path:
    """Where the build for these sources, compiler, flags, CPU and OpenMP runtime lives in the cache."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(CSRC.glob("*.[ch]"))]
    key = hashlib.sha256("\n".join([*texts, _compiler_line(cc), " ".join(FLAGS), describe_cpu(),
                                    os.environ.get(MARCH_ENV, ""), runtime or "pool",
                                    " ".join(" ".join(a) for a in _arch_choices())]).encode()).hexdigest()[:16]
    shared = shared_root()
    if shared is not None and (shared / "kernels" / f"labkit-{key}.so").is_file():
        return shared / "kernels" / f"labkit-{key}.so"     # built once by a class's set-up (shared_cache.prepare)
    return cache_root() / "kernels" / f"labkit-{key}.so"


# Every exported entry point's ctypes signature is read from its C definition (``csrc/*.c``: a line
# ``[MACRO ...] void|int labkit_NAME(params) {``), so the C source is the one owner of each signature and a changed
# prototype changes the binding with it. A pointer of any type is passed as ``c_void_p``.
_C_TYPES = {"int64_t": ctypes.c_int64, "int": ctypes.c_int, "float": ctypes.c_float}
_DEFINITION = re.compile(r"^(?:[A-Z_]+\s+)*(void|int)\s+(labkit_\w+)\s*\(([^)]*)\)\s*\{", re.MULTILINE)


def c_type(param: str):
    """The ctypes type of one C parameter declaration (``const float *x`` -> ``c_void_p``)."""
    words = param.replace("*", " * ").split()
    if "*" in words:
        return ctypes.c_void_p
    kind = " ".join(w for w in words[:-1] if w != "const")
    if kind not in _C_TYPES:
        raise ValueError(f"no ctypes type for the C parameter {param.strip()!r}")
    return _C_TYPES[kind]


def prototypes(sources: dict[str, str] | None = None) -> dict[str, tuple]:
    """``{name: (restype, argtypes)}`` for every ``labkit_*`` function defined in ``sources`` (file name ->
    C text; default: ``csrc/*.c``)."""
    if sources is None:
        sources = {name: (CSRC / name).read_text(encoding="utf-8") for name in SOURCES}
    out: dict[str, tuple] = {}
    for text in sources.values():
        for ret, name, params in _DEFINITION.findall(text):
            if name in out:
                raise ValueError(f"{name} is defined twice")
            args = [] if params.strip() in ("", "void") else [c_type(p) for p in params.split(",")]
            out[name] = (ctypes.c_int if ret == "int" else None, args)
    return out


def bind(lib) -> None:
    """Give every entry point of ``lib`` the signature of its C definition (one compiled out for this
    instruction set is not there to bind)."""
    for name, (restype, argtypes) in prototypes().items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.restype, fn.argtypes = restype, argtypes


def _load() -> dict:
    if os.environ.get(ENV, "1") == "0":
        raise RuntimeError(f"switched off by {ENV}=0")
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    runtime = openmp_runtime()
    path = library_path(cc, runtime)
    if not path.exists():
        try:
            _build(cc, path, runtime)
        except RuntimeError:
            if runtime is None:
                raise
            runtime = None          # no -fopenmp here (clang without libomp, say): labkit's own pool
            path = library_path(cc, None)
            if not path.exists():
                _build(cc, path, None)
    lib = ctypes.CDLL(str(path))
    _state["path"] = str(path)
    _state["threads"] = (f"OpenMP, PyTorch's runtime ({os.path.basename(runtime)})" if lib.labkit_threads_openmp()
                         else "labkit's thread pool")
    if lib.labkit_linear_rows_version() != VERSION:
        raise RuntimeError(f"{path} is version {lib.labkit_linear_rows_version()}, expected {VERSION}")
    bind(lib)
    kernels: dict = {torch.float32: lib.labkit_linear_rows_f32, torch.bfloat16: lib.labkit_linear_rows_bf16}
    _state["bf16_kind"] = lib.labkit_linear_rows_has_bf16()
    _state["isa"] = ISA_NAMES[lib.labkit_isa_level()]
    for dtype, suffix in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        kernels[("attention", dtype)] = getattr(lib, f"labkit_decode_attention_{suffix}")
        kernels[("rope_write_kv", dtype)] = getattr(lib, f"labkit_rope_write_kv_{suffix}")
    kernels["set_threads"] = lib.labkit_set_threads
    kernels["workers"] = lib.labkit_pool_workers
    kernels["last_parts"] = lib.labkit_last_parts
    kernels["set_sequential"] = lib.labkit_linear_rows_set_sequential
    kernels["q8_set_sequential"] = lib.labkit_q8_set_sequential
    for name in ("rms_norm", "add_rms_norm", "q8_rows", "decode_layer", "int4_rows", "decode_layer_q4"):
        kernels[name] = getattr(lib, f"labkit_{name}")
    exp_fn = _torch_vector_exp()
    if exp_fn is not None and lib.labkit_set_vector_exp(*exp_fn):
        kernels["silu_mul"] = lib.labkit_silu_mul
    return kernels


# PyTorch's float vector exp on this CPU (its `Vectorized<float>::exp`, SLEEF's 1-ulp expf, exported by
# libtorch_cpu): by the lanes of PyTorch's vector for its CPU capability.
_SLEEF_EXP = {"AVX512": ("Sleef_expf16_u10", 16), "AVX2": ("Sleef_expf8_u10", 8)}


def _torch_vector_exp() -> tuple[int, int] | None:
    """(address, lanes) of the vector exp PyTorch's silu uses here, or None where it is not found (then
    `silu_mul` is not offered and PyTorch's silu runs)."""
    name, lanes = _SLEEF_EXP.get(torch.backends.cpu.get_cpu_capability(), (None, 0))
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, lanes
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def _kernel():
    """The loaded entry point, or None (the reason kept for `why_unavailable`); built at most once."""
    try:
        return _load()
    except (OSError, RuntimeError) as exc:
        _state["why"] = str(exc)
        return None


def raw_kernels() -> dict:
    """The loaded ctypes functions by name, called without checks (``ops.native_ops.NativeOps``, which checks
    once what the public functions below check per call). Empty where `available` is False."""
    return _kernel() or {}


def available() -> bool:
    """Whether the kernel built and loaded on this machine (builds it on the first call)."""
    return _kernel() is not None


def has_bf16() -> bool:
    """Whether the build has the bf16 product: every build since the widened form (`bf16_kind`)."""
    return available() and torch.bfloat16 in _kernel()


def bf16_kind() -> str | None:
    """How this build's bf16 product multiplies: ``"dot"`` (AVX512_BF16's dot-product instruction) or
    ``"widened"`` (bf16 weights widened to fp32 in registers, the fp32 kernel's order), None without a build."""
    return {1: "dot", 2: "widened"}.get(int(_state.get("bf16_kind", 0))) if available() else None


def isa_level() -> str | None:
    """The instruction-set level the loaded build targets (one of `ISA_NAMES`; ``LABKIT_ISA`` forces one),
    None without a build."""
    return str(_state["isa"]) if available() else None


def library_file() -> Path | None:
    """The built library this process loaded (the class's shared one or the user's own), or None."""
    return Path(_state["path"]) if available() else None


def why_unavailable() -> str | None:
    """None when `available()`, else the reason (no compiler, a failed build, switched off)."""
    return None if available() else str(_state.get("why"))


# The threads the kernels run on: torch.get_num_threads() of the thread that calls them (one in the labs,
# which measure on one thread; every core in a learner's own script or `labkit serve`), told to the C side
# per calling thread (csrc/threads.c) when it changes. Each output is computed whole by one thread in its
# one order, so the count changes no bit (tests/kernels/test_native_threads.py).
_threads_told = threading.local()


def use_threads(threads: int | None = None) -> None:
    """Pin the calling thread's kernel calls to ``threads`` threads (tests, benchmarks); None (the default)
    follows ``torch.get_num_threads()`` again."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be an int >= 1 or None, got {threads!r}")
    _threads_told.pinned = threads
    sync_threads()


def sync_threads() -> int:
    """Tell the C side the calling thread's count (pinned, else ``torch.get_num_threads()``) if it changed;
    returns it. Called by every public function here and once per forward by ``ops.native_ops.for_input``."""
    n = getattr(_threads_told, "pinned", None) or torch.get_num_threads()
    kernels = _kernel()
    told = (id(kernels), n)             # per loaded library: a rebuilt one starts again at one thread
    if kernels is not None and getattr(_threads_told, "told", None) != told:
        kernels["set_threads"](n)
        _threads_told.told = told
    return n


def threading_kind() -> str:
    """How the kernels run on several threads here: on PyTorch's OpenMP runtime, or labkit's own pool."""
    return str(_state.get("threads")) if available() else "no C kernel"


def _ready() -> dict:
    """The loaded kernels, told this thread's thread count; or RuntimeError saying why there are none."""
    kernels = _kernel()
    if kernels is None:
        raise RuntimeError(f"labkit's C kernel is not available: {why_unavailable()}")
    sync_threads()
    return kernels


def set_sequential_rows(max_rows: int) -> None:
    """`linear_rows` walks the weights one row after the other for products of at most ``max_rows``
    rows, and in 4-row tiles above (0: always tiles). The same bits either way (tested); only the
    speed differs, by CPU, so ``tuning.walks.prepare`` times both once per machine and sets the crossover."""
    if _set_walk("set_sequential", max_rows):
        _state["sequential_rows"] = max_rows


def set_q8_sequential_rows(max_rows: int) -> None:
    """`set_sequential_rows` for `q8_rows`, whose own crossover ``tuning.walks.prepare_q8`` times."""
    if _set_walk("q8_set_sequential", max_rows):
        _state["q8_sequential_rows"] = max_rows


def q8_sequential_rows() -> int:
    """The crossover `set_q8_sequential_rows` last set (0 until then)."""
    return int(_state.get("q8_sequential_rows", 0))


def _set_walk(setter: str, max_rows: int) -> bool:
    if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 0:
        raise ValueError(f"max_rows must be an int >= 0, got {max_rows!r}")
    kernels = _kernel()
    if kernels is not None:
        kernels[setter](max_rows)
    return kernels is not None


def sequential_rows() -> int:
    """The crossover `set_sequential_rows` last set (0 until then)."""
    return int(_state.get("sequential_rows", 0))


def linear_rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weightᵀ`` for CPU tensors x [T, K] and weight [N, K] -> [T, N], row-invariant; float32 or
    bfloat16 (`bf16_kind` says how)."""
    kernels = _ready()
    if (x.dtype != weight.dtype or x.dtype not in (torch.float32, torch.bfloat16)
            or x.device.type != "cpu" or weight.device.type != "cpu"):
        raise ValueError(f"linear_rows takes float32 or bfloat16 CPU tensors of one dtype, got x {x.dtype} on "
                         f"{x.device}, weight {weight.dtype} on {weight.device}")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_rows needs x [T, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}")
    x = x.contiguous()
    weight = weight.contiguous()
    y = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype)
    if kernels[x.dtype](x.data_ptr(), weight.data_ptr(), y.data_ptr(), x.shape[0], weight.shape[0], x.shape[1]):
        raise MemoryError("linear_rows could not allocate its scratch memory")
    return y


def decode_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slots: torch.Tensor,
                     lens: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of R single query tokens over their paged contexts (``csrc/decode_attention.c``).

    query [R, H, D] fp32; key_cache and value_cache: the layer's pool, any shape ending in [Hkv, D], fp32
    or bf16, contiguous; slots [R, L] or [1, L] int64 (row r's context position l is slot
    ``slots[r, l]``, or ``slots[0, l]`` for every row); lens [R] int64 (row r sees positions
    0..lens[r] - 1). Returns [R, H, D] fp32."""
    kernels = _ready()
    R, H, D = query.shape
    hkv = key_cache.shape[-2]
    if (query.dtype != torch.float32 or key_cache.dtype != value_cache.dtype
            or ("attention", key_cache.dtype) not in kernels or key_cache.shape[-1] != D or H % hkv
            or not key_cache.is_contiguous() or not value_cache.is_contiguous()):
        raise ValueError(f"decode_attention takes an fp32 query [R, H, D] and contiguous fp32 or bf16 caches [..., Hkv, D] "
                         f"with H a multiple of Hkv; got query {query.dtype} {tuple(query.shape)}, caches "
                         f"{key_cache.dtype} {tuple(key_cache.shape)}")
    if slots.dtype != torch.int64 or lens.dtype != torch.int64 or slots.dim() != 2 or slots.shape[0] not in (1, R) \
            or lens.shape != (R,):
        raise ValueError(f"decode_attention needs int64 slots [R or 1, L] and lens [R]; got {slots.dtype} "
                         f"{tuple(slots.shape)} and {lens.dtype} {tuple(lens.shape)}")
    query, slots, lens = query.contiguous(), slots.contiguous(), lens.contiguous()
    out = torch.empty(R, H, D, dtype=torch.float32)
    stride = 0 if slots.shape[0] == 1 else slots.shape[1]
    failed = kernels[("attention", key_cache.dtype)](
        query.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), slots.data_ptr(), stride, lens.data_ptr(),
        out.data_ptr(), R, H, hkv, D, scale)
    if failed:
        raise MemoryError("decode_attention could not allocate its scratch memory")
    return out


# The small ops' calls themselves, without checks: the public functions below check their input and call
# these; ``ops.native_ops.NativeOps`` checks once per forward and calls them straight (at about 60 calls a step the
# checks cost more than the C work). ``fn`` is the kernel from `raw_kernels`; ``bf`` 1 for bf16.

def rms_norm_unchecked(fn, x: torch.Tensor, weight: torch.Tensor, eps: float, lanes: int, bf: int) -> torch.Tensor:
    out = torch.empty_like(x)
    fn(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1], eps, lanes, bf)
    return out


def add_rms_norm_unchecked(fn, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, lanes: int,
                           bf: int) -> tuple[torch.Tensor, torch.Tensor]:
    total, out = torch.empty_like(x), torch.empty_like(x)
    fn(x.data_ptr(), delta.data_ptr(), total.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1],
       eps, lanes, bf)
    return total, out


def silu_mul_unchecked(fn, gate_up: torch.Tensor, bf: int) -> torch.Tensor:
    rows, inner = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inner, dtype=gate_up.dtype)
    fn(gate_up.data_ptr(), out.data_ptr(), rows, inner, bf)
    return out


def rope_write_kv_unchecked(fn, heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                            slots: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor, num_heads: int,
                            num_kv_heads: int) -> torch.Tensor:
    q = torch.empty(heads.shape[0], num_heads, cos.shape[-1], dtype=heads.dtype)
    fn(heads.data_ptr(), cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), slots.data_ptr(), q.data_ptr(),
       key_pool.data_ptr(), value_pool.data_ptr(), heads.shape[0], num_heads, num_kv_heads, cos.shape[-1])
    return q


def rope_write_kv(heads: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                  slots: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor, num_heads: int,
                  num_kv_heads: int) -> torch.Tensor:
    """RoPE on the q and k heads of ``heads`` [T, (H + 2 Hkv) * D] (the fused QKV output, fp32 or bf16), the
    rotated k and the v written to the pools' ``slots`` (the same dtype); returns q [T, H, D]. ``cos`` and
    ``sin`` are the fp32 rotary tables [P, D] (``Rotary.cos``, ``Rotary.signed_sin``). The same bits as ``Rotary.forward``
    followed by ``write_kv`` (``csrc/rope_kv.c``). Positions must be below P and slots inside the pools,
    as the engine's are: they are not range-checked here (a reduction per call would cost more than the
    kernel)."""
    T, D = heads.shape[0], cos.shape[-1]
    dtype = heads.dtype
    if (dtype not in (torch.float32, torch.bfloat16)
            or any(t.dtype != dtype or not t.is_cpu or not t.is_contiguous() for t in (heads, key_pool, value_pool))
            or any(t.dtype != torch.float32 or not t.is_cpu or not t.is_contiguous() for t in (cos, sin))
            or any(t.dtype != torch.int64 or not t.is_cpu or not t.is_contiguous() or t.numel() != T
                   for t in (positions, slots))
            or cos.shape != sin.shape or heads.numel() != T * (num_heads + 2 * num_kv_heads) * D
            or key_pool.shape[-2:] != (num_kv_heads, D) or value_pool.shape != key_pool.shape):
        raise ValueError("rope_write_kv takes contiguous CPU heads [T, (H + 2 Hkv) * D] and pools [..., Hkv, D] of one "
                         "dtype (fp32 or bf16), fp32 tables [P, D], and contiguous int64 positions and slots [T]")
    return rope_write_kv_unchecked(_loaded(("rope_write_kv", dtype)), heads, cos, sin, positions, slots, key_pool,
                                   value_pool, num_heads, num_kv_heads)


def _bf_of(x: torch.Tensor, weight: torch.Tensor, what: str) -> int:
    """1 for bf16, 0 for fp32, for a contiguous CPU x [T, n] and weight [n] of one dtype (else ValueError)."""
    if (x.dtype not in (torch.float32, torch.bfloat16) or weight.dtype != x.dtype or not x.is_cpu or not weight.is_cpu
            or x.dim() != 2 or weight.shape != (x.shape[1],) or not x.is_contiguous() or not weight.is_contiguous()):
        raise ValueError(f"{what} takes a contiguous fp32 or bf16 CPU x [T, n] and weight [n] of its dtype; got x "
                         f"{x.dtype} {tuple(x.shape)}, weight {weight.dtype} {tuple(weight.shape)}")
    return int(x.dtype == torch.bfloat16)


def _loaded(name):
    """The loaded kernel ``name``, or a RuntimeError that says why it is not there."""
    kernels = _ready()
    if name not in kernels:
        why = " (PyTorch's vector exp was not found)" if name == "silu_mul" else ""
        raise RuntimeError(f"this build has no {name}{why}")
    return kernels[name]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, lanes: int) -> torch.Tensor:
    """RMSNorm of each row of x [T, n] (fp32 or bf16) in one call, summing the squares in PyTorch's
    order for ``lanes``-lane vectors (``csrc/norm_act.c``); ``ops.native_ops`` checks the lanes that give
    PyTorch's bits on this machine before it calls this."""
    bf = _bf_of(x, weight, "rms_norm")
    return rms_norm_unchecked(_loaded("rms_norm"), x, weight, eps, lanes, bf)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                 lanes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rms_norm(x + delta)) in one call: the residual add and the next RMSNorm. x and delta
    are left as they are."""
    bf = _bf_of(x, weight, "add_rms_norm")
    if delta.shape != x.shape or delta.dtype != x.dtype or not delta.is_cpu or not delta.is_contiguous():
        raise ValueError(f"add_rms_norm needs delta like x {x.dtype} {tuple(x.shape)}; got {delta.dtype} "
                         f"{tuple(delta.shape)}")
    return add_rms_norm_unchecked(_loaded("add_rms_norm"), x, delta, weight, eps, lanes, bf)


def has_silu_mul() -> bool:
    """Whether this build can call PyTorch's vector exp (`silu_mul` is offered)."""
    return available() and "silu_mul" in _kernel()


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up [T, 2I] = (gate | up), fp32 or bf16, in one call (``csrc/norm_act.c``):
    PyTorch's bits, with its own vector exp, which ``ops.native_ops`` checks on this machine first."""
    if (gate_up.dtype not in (torch.float32, torch.bfloat16) or not gate_up.is_cpu or gate_up.dim() != 2
            or gate_up.shape[1] % 2 or not gate_up.is_contiguous()):
        raise ValueError(f"silu_mul takes a contiguous fp32 or bf16 CPU gate_up [T, 2I]; got {gate_up.dtype} "
                         f"{tuple(gate_up.shape)}")
    return silu_mul_unchecked(_loaded("silu_mul"), gate_up, int(gate_up.dtype == torch.bfloat16))


Q8_GROUP = 32


def q8_rows(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``x @ wᵀ`` for fp32 x [T, K] and a Q8_0 weight ``w = scales * codes`` (codes int8 [N, K], scales
    fp32 [N, K / 32], one per group of 32 along K) -> fp32 [T, N] (``csrc/q8_rows.c``): the bits
    `linear_rows` gives for the dequantised fp32 weight (exact: an fp16 scale times an 8-bit code fits
    fp32), reading about a quarter of its bytes. Row-invariant."""
    fn = _loaded("q8_rows")
    if (x.dtype != torch.float32 or codes.dtype != torch.int8 or scales.dtype != torch.float32
            or not (x.is_cpu and codes.is_cpu and scales.is_cpu) or x.dim() != 2 or codes.dim() != 2
            or x.shape[1] != codes.shape[1] or codes.shape[1] % Q8_GROUP
            or scales.shape != (codes.shape[0], codes.shape[1] // Q8_GROUP)):
        raise ValueError(f"q8_rows takes fp32 x [T, K], int8 codes [N, K] and fp32 scales [N, K / {Q8_GROUP}] on the "
                         f"CPU, K a multiple of {Q8_GROUP}; got x {x.dtype} {tuple(x.shape)}, codes {codes.dtype} "
                         f"{tuple(codes.shape)}, scales {scales.dtype} {tuple(scales.shape)}")
    x, codes, scales = x.contiguous(), codes.contiguous(), scales.contiguous()
    y = torch.empty(x.shape[0], codes.shape[0], dtype=torch.float32)
    fn(x.data_ptr(), codes.data_ptr(), scales.data_ptr(), y.data_ptr(), x.shape[0], codes.shape[0], x.shape[1])
    return y


# PyTorch's int4 CPU kernel packs output rows in blocks of 64 where its CPU capability is AVX512 and of 32
# where it is AVX2 (with other arithmetic too: csrc/int4_rows.c); its other forms are not written here.
_INT4_BLOCKS = {"AVX512": 64, "AVX2": 32}


@functools.cache
def int4_block() -> int | None:
    """The block of PyTorch's int4 form on this machine (64 or 32), or None where labkit has no such form
    (PyTorch's capability is fixed for the process; asked at every q4_1 layer call)."""
    return _INT4_BLOCKS.get(torch.backends.cpu.get_cpu_capability())


def int4_rows(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor, group_size: int,
              block: int | None = None) -> torch.Tensor:
    """``torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_zeros)`` for bf16 x [T, K]
    and a weight PyTorch packed in its form for ``block`` (default: `int4_block`; N a multiple of it), with
    that kernel's bits (``csrc/int4_rows.c``; ``ops.native_ops._native_int4_exact`` checks them on this machine
    before the engine uses it) -> bf16 [T, N]. Row-invariant."""
    fn = _loaded("int4_rows")
    block = int4_block() if block is None else block
    T, K = x.shape if x.dim() == 2 else (0, 0)
    N = scales_zeros.shape[1] if scales_zeros.dim() == 3 else 0
    if block not in _INT4_BLOCKS.values():
        raise ValueError(f"int4_rows: block must be one of {sorted(_INT4_BLOCKS.values())} (PyTorch's int4 forms), "
                         f"got {block} (this CPU's PyTorch capability: {torch.backends.cpu.get_cpu_capability()})")
    if (x.dtype != torch.bfloat16 or scales_zeros.dtype != torch.bfloat16 or packed.dtype != torch.uint8
            or not (x.is_cpu and packed.is_cpu and scales_zeros.is_cpu) or x.dim() != 2 or N % block or not N
            or group_size < 1 or K % group_size or scales_zeros.shape != (K // group_size, N, 2)
            or packed.numel() != N * K // 2):
        raise ValueError(f"int4_rows takes bf16 x [T, K], uint8 packed codes [N, K / 2] and bf16 scales_zeros "
                         f"[K / group_size, N, 2] on the CPU, N a multiple of {block}; got x {x.dtype} "
                         f"{tuple(x.shape)}, packed {packed.dtype} {tuple(packed.shape)}, scales_zeros "
                         f"{scales_zeros.dtype} {tuple(scales_zeros.shape)}, group_size {group_size}")
    x, packed, scales_zeros = x.contiguous(), packed.contiguous(), scales_zeros.contiguous()
    y = torch.empty(T, N, dtype=torch.bfloat16)
    failed = fn(x.data_ptr(), packed.data_ptr(), scales_zeros.data_ptr(), y.data_ptr(), T, N, K, group_size, block)
    if failed:
        raise RuntimeError("int4_rows: " + ("no scratch memory" if failed == 1 else
                                            f"this build has no form for block {block}"))
    return y
