"""``labkit serve`` measured with ``labkit bench``: the README's serving table and the HTTP overhead.

    python -m bench.serve_http                        # 32 chat prompts x 32 tokens, rates 1 and 4 req/s
    python -m bench.serve_http --rates 1 4 --num-prompts 32 --output-len 32 --out-dir results/serve

1. Starts ``labkit serve`` (default model, default EngineConfig) as a separate process on a free
   loopback port, exactly as a user would, and runs ``labkit bench`` against it at each rate
   (result files in ``--out-dir``, loadable with ``labkit.serve_bench.load_results``).
2. Overhead: the same requests (same prompts, ``max_tokens``, ``ignore_eos``, greedy) all at once,
   through HTTP (rate inf) and through ``LLM.generate`` in this process, alternating
   (generate, HTTP, HTTP, generate, ...); output tokens per wall second and per CPU second of each,
   median over rounds. CPU seconds of the HTTP side = server process + client process (read from
   /proc): unlike wall time they do not count the slices a busy neighbour takes (bench/common.py).
   Both sides use one intra-op thread (OMP_NUM_THREADS=1, bench/common.py explains why).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from labkit.serve.cli import DEFAULT_MODEL_NAME
from labkit.serve_bench import BenchResult, compute_metrics
from labkit.serve_bench.client import Target
from labkit.serve_bench.load_generator import LoadShape, run_load
from labkit.serve_bench.workload import build_workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "labkit.serve", "--port", str(port), "--log-level", "warning"],
                            env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("labkit serve did not come up")


def run(target: Target, workload, rate: float, seed: int) -> BenchResult:
    outcome = asyncio.run(run_load(target, workload, LoadShape(request_rate=rate, seed=seed), progress=False))
    settings = {"model": target.model, "endpoint": target.endpoint, "request_rate": rate,
                "num_prompts": len(workload), "output_len": workload[0].output_len}
    return BenchResult(settings, compute_metrics(outcome.records, outcome.duration_s), outcome.records)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def generate_rates(llm, workload) -> tuple[float, float]:
    """Output tokens per wall second and per CPU second of ``LLM.generate``."""
    from labkit import SamplingParams

    params = SamplingParams(max_tokens=workload[0].output_len, ignore_eos=True)
    t0, c0 = time.perf_counter(), cpu_seconds(os.getpid())
    outs = llm.generate([r.prompt for r in workload], params)
    tokens = sum(len(o.token_ids) for o in outs)
    return tokens / (time.perf_counter() - t0), tokens / (cpu_seconds(os.getpid()) - c0)


def http_rates(target: Target, workload, server_pid: int) -> tuple[float, float]:
    """The same for HTTP; CPU = the server's plus this (client) process's."""
    c0 = cpu_seconds(server_pid) + cpu_seconds(os.getpid())
    m = run(target, workload, math.inf, 0).metrics
    cpu = cpu_seconds(server_pid) + cpu_seconds(os.getpid()) - c0
    return m.output_throughput, m.total_output_tokens / cpu


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.serve_http", description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="*", default=[1.0, 4.0], help="none: only the overhead")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2, help="overhead rounds (each: generate and HTTP)")
    p.add_argument("--out-dir", default="results/serve")
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)

    port = free_port()
    server = start_server(port)
    target = Target(f"http://127.0.0.1:{port}", DEFAULT_MODEL_NAME, "chat", ignore_eos=True)
    workload = build_workload("chat", args.num_prompts, output_len=args.output_len)
    try:
        run(target, workload[:4], math.inf, 0)                                   # warm-up
        rows = []
        for rate in args.rates:
            result = run(target, workload, rate, seed=0)
            result.save(Path(args.out_dir) / f"rate_{rate:g}.json")
            rows.append(result)
        from labkit import LLM

        llm = LLM(progress=False)
        generate_rates(llm, workload[:4])                                        # warm-up
        gen, http = [], []
        for i in range(args.rounds):
            order = ("gen", "http") if i % 2 == 0 else ("http", "gen")
            for side in order:
                if side == "gen":
                    gen.append(generate_rates(llm, workload))
                else:
                    http.append(http_rates(target, workload, server.pid))
    finally:
        server.terminate()
        server.wait(30)
    print(f"# labkit serve on {os.uname().nodename}, {os.cpu_count()} CPUs; chat, {args.num_prompts} prompts x "
          f"{args.output_len} tokens (ignore_eos), greedy\n")
    if rows:
        print("| request rate (req/s) | completed | req/s | output tok/s | TTFT median / P99 (ms) | "
              "TPOT median / P99 (ms) | ITL median / P99 (ms) | E2EL median (ms) |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            m = r.metrics
            print(f"| {r.request_rate:g} | {m.completed} | {m.request_throughput:.2f} | {m.output_throughput:.1f} | "
                  f"{m.ttft.median_ms:.0f} / {m.ttft.p99_ms:.0f} | {m.tpot.median_ms:.0f} / {m.tpot.p99_ms:.0f} | "
                  f"{m.itl.median_ms:.0f} / {m.itl.p99_ms:.0f} | {m.e2el.median_ms:.0f} |")
    for i, unit in enumerate(("wall", "CPU")):
        g, h = statistics.median(x[i] for x in gen), statistics.median(x[i] for x in http)
        print(f"\nall at once, output tokens per {unit} second: LLM.generate {g:.1f}, through HTTP {h:.1f} "
              f"(HTTP / generate = {h / g:.2f}; rounds: generate {[round(x[i], 1) for x in gen]}, "
              f"HTTP {[round(x[i], 1) for x in http]})")


if __name__ == "__main__":
    main()
