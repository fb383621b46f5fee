"""``labkit serve --model sim`` under a long load: is its resident memory flat?

    python -m bench.serve_soak                          # 30 minutes at concurrency 8 (the issue's bar)
    python -m bench.serve_soak --minutes 8 --warmup-minutes 1

Starts the server as its own process on a free loopback port, drives it with ``labkit bench``'s client
(chat prompts, 32 tokens each with ignore_eos, ``--concurrency`` in flight) until the time is up, and
reads the server's VmRSS from /proc every ``--every`` seconds. Reports RSS after the warm-up, at the
end and at its highest, the change in percent (the issue asks for within 5 %), and the growth per
request fitted over the samples after the warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np

from labkit.serve_bench.client import Target
from labkit.serve_bench.load_generator import LoadShape, run_load
from labkit.serve_bench.workload import build_workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "labkit.serve", "--model", "sim", "--port", str(port),
                             "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("labkit serve did not start")


async def soak(base_url: str, pid: int, args) -> tuple[list[tuple[float, int, int]], int]:
    """Samples (seconds, RSS bytes, requests done) and the failed-request count."""
    target = Target(base_url, "sim", "chat", ignore_eos=True)
    workload = build_workload("chat", args.batch, 0, 32)
    samples, done, failed = [], 0, 0
    t0 = time.monotonic()
    next_sample = 0.0
    while time.monotonic() - t0 < args.minutes * 60:
        outcome = await run_load(target, workload, LoadShape(max_concurrency=args.concurrency), progress=False)
        done += len(outcome.records)
        failed += sum(not r.success for r in outcome.records)
        elapsed = time.monotonic() - t0
        if elapsed >= next_sample:
            samples.append((elapsed, rss_bytes(pid), done))
            next_sample = elapsed + args.every
    samples.append((time.monotonic() - t0, rss_bytes(pid), done))
    return samples, failed


def report(samples: list[tuple[float, int, int]], failed: int, warmup_s: float) -> str:
    after = [s for s in samples if s[0] >= warmup_s]
    base, end = after[0][1], after[-1][1]
    peak = max(s[1] for s in after)
    slope = np.polyfit([s[2] for s in after], [s[1] for s in after], 1)[0] if len(after) > 2 else float("nan")
    mb = 1 / 2**20
    lines = [f"requests: {samples[-1][2]} ({failed} failed) in {samples[-1][0] / 60:.1f} min",
             f"RSS after warm-up ({warmup_s / 60:g} min): {base * mb:.1f} MiB; at the end: {end * mb:.1f} MiB; "
             f"highest: {peak * mb:.1f} MiB",
             f"change after warm-up: {100 * (end - base) / base:+.2f} % (highest {100 * (peak - base) / base:+.2f} %); "
             f"fitted growth: {slope:+.1f} bytes per request",
             "samples (min, MiB, requests): " + ", ".join(f"({t / 60:.1f}, {r * mb:.1f}, {n})" for t, r, n in samples)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-minutes", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256, help="requests per load round")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    port = free_port()
    proc = start_server(port)
    try:
        samples, failed = asyncio.run(soak(f"http://127.0.0.1:{port}", proc.pid, args))
    finally:
        proc.terminate()
        proc.wait(30)
    print(report(samples, failed, args.warmup_minutes * 60))


if __name__ == "__main__":
    main()
