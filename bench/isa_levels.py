"""labkit's products at every instruction-set level this CPU can run: bf16 vs fp32 vs PyTorch's bf16.

    python -m bench.isa_levels                             # every level this CPU runs, rows 1 and 16, one thread
    python -m bench.isa_levels --levels avx2,avx512 --rows 1,4,16 --rounds 9

Each level runs in a child process with ``LABKIT_ISA=<level>`` (labkit's C kernels built for that level:
``generic`` the compiler's own vectors without AVX2, ``avx2`` AVX2 + FMA as most laptops have, ``avx512``
AVX-512 without AVX512_BF16, ``avx512bf16`` with it), ``ATEN_CPU_CAPABILITY`` set to PyTorch's nearest
level (default, avx2, avx512) and ``ONEDNN_MAX_CPU_ISA`` to oneDNN's (PyTorch's bf16 matmuls: SSE41, AVX2,
AVX512_CORE, AVX512_CORE_BF16), so both sides run what a CPU of that level runs. On a CPU with AMX one more
level, ``amx``, runs labkit's ``avx512bf16`` build against PyTorch with oneDNN allowed AMX
(``AVX512_CORE_AMX``): labkit has no AMX kernel, so this is the AMX machine's own row. In each child, one sweep
through every weight matrix of the default model (qkv, o, gate_up, down per layer, then the LM head, as a
decode step streams them) at T rows, timed in interleaved rounds on the process CPU clock, one thread:

- labkit fp32: the C kernel on the fp32 weights (538 MB);
- labkit bf16: the C kernel on the bf16 weights (half the bytes): below AVX512_BF16 the weights widened to
  fp32 in registers, the fp32 kernel's order; with it, the bf16 dot-product instruction;
- PyTorch bf16: labkit's row-invariant PyTorch bf16 form (``torch_ops._bf16_torch``), what bf16 ran on
  before the widened kernel, where the gate offers it;
- PyTorch fp32: ``F.linear``.

Ratios are medians of per-round ratios (both sides saw the same machine load). Under each level's table:
the bf16 form the engine's probe picks at that level and thread count (the gate and the one-time timing,
``linear_forms.bf16_report``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from bench.common import Section, load_average, median, report

LEVELS = ("generic", "avx2", "avx512", "avx512bf16", "amx")
# labkit's build per level (``LABKIT_ISA``): its own name, but AMX is not a labkit level (no AMX kernel).
LABKIT = {"generic": "generic", "avx2": "avx2", "avx512": "avx512", "avx512bf16": "avx512bf16", "amx": "avx512bf16"}
ATEN = {"generic": "default", "avx2": "avx2", "avx512": "avx512", "avx512bf16": "avx512", "amx": "avx512"}
# oneDNN (PyTorch's bf16 matmuls) picks its own instructions from the CPU, whatever ATEN_CPU_CAPABILITY says:
# its ceiling per level, so PyTorch's bf16 runs without AVX512_BF16 where the level has none.
ONEDNN = {"generic": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE", "avx512bf16": "AVX512_CORE_BF16",
          "amx": "AVX512_CORE_AMX"}
FORMS = ("labkit fp32", "labkit bf16", "PyTorch bf16", "PyTorch fp32")


def child(level: str, rows: list[int], rounds: int) -> dict:
    """Time the four forms at this process's level (its environment set by the parent); a JSON-able dict."""
    import torch.nn.functional as F

    from bench.common import interleaved, set_clock, set_threads, timed
    from labkit.kernels import linear_forms, native
    from labkit.kernels.cpu_features import describe_cpu
    from labkit.kernels.ops import torch_ops
    from labkit.model.loader import load_model

    set_threads(1)
    clock = set_clock("auto", 1)
    if not native.available():
        return {"level": level, "why": native.why_unavailable()}
    fp32 = load_model(None, torch.device("cpu"), torch.float32, progress=False)[0].linear_weights()
    bf16 = load_model(None, torch.device("cpu"), torch.bfloat16, progress=False)[0].linear_weights()
    linear_forms.prepare_bf16(bf16, torch_ops._bf16_torch)         # the gate and the probe at this level
    fns = {"labkit fp32": (fp32, native.linear_rows), "labkit bf16": (bf16, native.linear_rows),
           "PyTorch bf16": (bf16, torch_ops._bf16_torch), "PyTorch fp32": (fp32, F.linear)}
    out = {"level": level, "isa": native.isa_level(), "bf16_kind": native.bf16_kind(), "cpu": describe_cpu(),
           "torch_isa": torch.backends.cpu.get_cpu_capability(), "clock": clock,
           "bf16_form": linear_forms.bf16_report(1), "bytes": {"fp32": sum(w.numel() * 4 for w in fp32)}, "rows": {}}
    for t in rows:
        g = torch.Generator().manual_seed(t)
        xs = {k: torch.randn(t, k, generator=g) for k in {w.shape[1] for w in fp32}}

        def sweep(weights, fn):
            inputs = {k: x.to(weights[0].dtype) for k, x in xs.items()}
            return lambda: timed(lambda: [fn(inputs[w.shape[1]], w) for w in weights])[0]

        runs = {name: sweep(*fns[name]) for name in FORMS}
        for run in runs.values():
            run()                                   # warm-up
        out["rows"][t] = interleaved(runs, rounds)
    return out


def level_section(found: dict, rows: list[int]) -> Section:
    level = found["level"]
    if "why" in found:
        return Section(f"ISA level {level}: not run", ["reason"], [[found["why"]]])
    table = []
    for t in rows:
        results = found["rows"][str(t)]
        ms = {name: 1e3 * median([r[name] for r in results]) for name in FORMS}
        vs = {name: median([r[name] / r["labkit bf16"] for r in results]) for name in FORMS}
        table.append([str(t)] + [f"{ms[n]:.1f}" for n in FORMS] +
                     [f"{vs['labkit fp32']:.2f}x", f"{vs['PyTorch bf16']:.2f}x",
                      f"{found['bytes']['fp32'] / 2 / (ms['labkit bf16'] / 1e3) / 1e9:.1f}"])
    kind = {"widened": "bf16 weights widened to fp32 in registers, the fp32 kernel's order",
            "dot": "the AVX512_BF16 dot-product instruction"}[found["bf16_kind"]]
    notes = [f"cpu: {found['cpu']}; forced: LABKIT_ISA={LABKIT[level]} (the build reports {found['isa']}), "
             f"ATEN_CPU_CAPABILITY={ATEN[level]} (PyTorch runs {found['torch_isa']}), ONEDNN_MAX_CPU_ISA={ONEDNN[level]}",
             f"ms per sweep of every weight matrix of the default model ({found['clock']} clock, one thread), medians "
             f"of {len(found['rows'][str(rows[0])])} interleaved rounds; speed-ups are medians of per-round ratios",
             f"labkit bf16 here: {kind}",
             f"the bf16 form the engine uses at this level, one thread: {found['bf16_form']}"]
    return Section(f"ISA level {level}: weight sweep, 1 thread", [
        "rows T", *(f"{n} (ms)" for n in FORMS), "labkit bf16 speed-up vs labkit fp32",
        "labkit bf16 speed-up vs PyTorch bf16", "labkit bf16 GB/s read"], table, notes)


def available_levels() -> list[str]:
    from labkit.kernels import native
    from labkit.kernels.cpu_features import has_amx

    out = []
    for level in LEVELS:
        if level == "amx" and not has_amx():
            continue
        os.environ[native.ISA_ENV] = LABKIT[level]
        try:
            native.forced_isa()
            out.append(level)
        except RuntimeError:
            pass
        finally:
            os.environ.pop(native.ISA_ENV, None)
    return out


def run(args) -> list[Section]:
    sections = [Section("Environment", ["item", "value"], [["load average at start", load_average()]])]
    from labkit.kernels.cpu_features import describe_cpu, has_amx

    sections[0].rows.append(["cpu", describe_cpu()])
    for level in args.levels:
        if level == "amx" and not has_amx():
            sections.append(Section("ISA level amx: not run", ["reason"], [["this CPU has no AMX (amx_tile, amx_bf16)"]]))
            continue
        env = {**os.environ, "LABKIT_ISA": LABKIT[level], "ATEN_CPU_CAPABILITY": ATEN[level], "ONEDNN_MAX_CPU_ISA": ONEDNN[level]}
        out = subprocess.run([sys.executable, "-m", "bench.isa_levels", "--child", level,
                              "--rows", ",".join(map(str, args.rows)), "--rounds", str(args.rounds)],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sections.append(Section(f"ISA level {level}: failed", ["stderr"], [[out.stderr.strip()[-500:]]]))
            continue
        found = json.loads(out.stdout.strip().splitlines()[-1])
        sections.append(level_section(found, args.rows))
    sections[0].rows.append(["load average at the end", load_average()])
    return sections


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default=None, help=f"comma-separated, from {', '.join(LEVELS)} (default: all this "
                                                   "CPU runs)")
    p.add_argument("--rows", default="1,16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.rows = [int(t) for t in args.rows.split(",")]
    if args.levels is not None:
        args.levels = [level for level in args.levels.split(",") if level]
        bad = [level for level in args.levels if level not in LEVELS]
        if bad:
            p.error(f"levels: choose from {', '.join(LEVELS)}; got {', '.join(bad)}")
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.rounds)))
        return []
    if args.levels is None:
        args.levels = available_levels()
    return report("labkit's products at each instruction-set level", "bench.isa_levels", argv, run(args))


if __name__ == "__main__":
    main()
