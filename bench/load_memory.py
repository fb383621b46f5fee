"""Load time and memory: labkit vs ``transformers``, each loading the same weights in a fresh process.

    python -m bench.load_memory            # fp32 and bf16, 3 rounds
    python -m bench.load_memory --quick    # fp32, 2 rounds

Every measurement is a child process that imports torch, loads the model and reports, from
``/proc/self/status``, its resident memory after ``import torch`` (the libraries: the same for
both), after the load (steady) and at its peak (``VmHWM``), with the load's wall time. The weights
were converted and read once before, so this is a second load (the one a learner waits for every
time). labkit's resident memory includes its KV pool (the default 512 blocks, allocated at start);
the target is a peak within 1.3x of weights + KV pool.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from bench.common import Section, load_average, median, report
from labkit.kernels.cpu_features import describe_cpu

CHILD = r"""
import json, sys, time
def status():
    with open("/proc/self/status") as f:
        d = dict(line.split(":", 1) for line in f)
    return {k: int(d[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
import torch
torch.set_num_threads(1)
base = status()["VmRSS"]
system, dtype, model = sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[3] or None
start = time.perf_counter()
if system == "labkit":
    from labkit import LLM, EngineConfig
    llm = LLM(model=model, config=EngineConfig(device="cpu", dtype=sys.argv[2]), progress=False)
    net, kv = llm.engine.runner.model, llm.engine.kv_cache.tensor
    weights, kv_bytes = sum(p.numel() * p.element_size() for p in net.parameters()), kv.numel() * kv.element_size()
else:
    from transformers import LlamaForCausalLM
    from labkit.model.loader import resolve_model_dir
    net = LlamaForCausalLM.from_pretrained(str(resolve_model_dir(model, progress=False)), dtype=dtype)
    weights, kv_bytes = sum(p.numel() * p.element_size() for p in net.parameters()), 0
seconds = time.perf_counter() - start
print(json.dumps(dict(status(), base=base, seconds=seconds, weights=weights, kv=kv_bytes)))
"""


def measure(system: str, dtype: str, model: str | None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, system, dtype, model or ""], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode:
        raise RuntimeError(f"{system} {dtype} load failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def section(dtype: str, rounds: int, model: str | None) -> Section:
    runs = {s: [] for s in ("labkit", "transformers")}
    measure("labkit", dtype, model)                      # convert once, warm the page cache
    for _ in range(rounds):
        for system in runs:                              # alternate, so the machine's load hits both
            runs[system].append(measure(system, dtype, model))
    rows = []
    for system, results in runs.items():
        mib = {k: median([r[k] for r in results]) / 2**20 for k in ("base", "VmRSS", "VmHWM", "weights", "kv")}
        owned = mib["weights"] + mib["kv"]
        rows.append([system, f"{median([r['seconds'] for r in results]):.2f}", f"{mib['base']:.0f}",
                     f"{mib['weights']:.0f} + {mib['kv']:.0f}", f"{mib['VmRSS']:.0f}", f"{mib['VmHWM']:.0f}",
                     f"{mib['VmHWM'] / owned:.2f}x", f"{(mib['VmHWM'] - mib['base']) / owned:.2f}x"])
    return Section(f"Load time and memory, {dtype} (fresh process each, second load)",
                   ["system", "load s (wall)", "RSS after import torch (MiB)", "weights + KV pool (MiB)",
                    "RSS after load (MiB)", "peak RSS (MiB)", "peak / (weights + KV)",
                    "(peak - torch's own) / (weights + KV)"],
                   rows, [f"median of {rounds} alternating rounds; one thread; transformers holds no KV pool "
                          "until it generates, and its weights stay memory-mapped from the file: pages become "
                          "resident as a forward pass first reads them (labkit copies them in at load)",
                          f"cpu: {describe_cpu()}", f"load average: {load_average()}"])


def main(argv: list[str] | None = None) -> list[Section]:
    p = argparse.ArgumentParser(prog="python -m bench.load_memory", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--tiny", action="store_true", help="one round, fp32 (smoke)")
    p.add_argument("--model", default=None)
    p.add_argument("--threads", type=int, default=1, help="ignored: every child uses one thread")
    args = p.parse_args(argv)
    dtypes = ["float32"] if args.quick or args.tiny else ["float32", "bfloat16"]
    rounds = 1 if args.tiny else 2 if args.quick else 3
    return report("Load time and memory", "bench.load_memory", argv,
                  (section(d, rounds, args.model) for d in dtypes))


if __name__ == "__main__":
    main()
