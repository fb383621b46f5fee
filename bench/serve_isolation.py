"""Does a hostile request stall anyone else's stream? ``labkit serve`` on the default model, 8 streams.

    python -m bench.serve_isolation                       # about 2 minutes on a 2-core CPU

Starts the server as its own process on a free loopback port (default model and settings), then runs
windows of the same 8 innocent chat streams (64 tokens each, ignore_eos): quiet ones, and one in which,
once every stream is decoding, a ninth client sends, one after another, the bodies that once froze the server: a prompt just
under the body limit, 30,000 chat messages, and the longest prompt that could still fit the context
(tokenised for real). Reports each window's longest gap between two chunks of one stream, and for each
hostile body its status, how long its answer took, and the longest gap of any stream that overlapped
that time. A stall shows as gaps during the hostile bodies far above the quiet window's; both windows
share the machine, so compare them, not their absolute values.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

import httpx

from bench.serve_soak import free_port
from labkit.config import DEFAULT_MAX_MODEL_LEN
from labkit.serve.limits import default_max_body_bytes

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TOKENS = 64          # each innocent stream's length: long enough to outlast the hostile bodies


def start_server(port: int) -> subprocess.Popen:
    """``labkit serve`` on the default model; returns once ``/health`` answers (the model loads first)."""
    proc = subprocess.Popen([sys.executable, "-m", "labkit.serve", "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("labkit serve did not start")


def stream_times(base_url: str, i: int, times: list[float]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Count to ten, number {i}."}],
            "max_tokens": TOKENS, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=600) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                times.append(time.monotonic())


def hostile_bodies(max_chars: int) -> list[tuple[str, str, bytes]]:
    limit = default_max_body_bytes(DEFAULT_MAX_MODEL_LEN)
    words = "a quick brown fox. "
    big = json.dumps({"model": MODEL, "prompt": words * ((limit - 300) // len(words)), "max_tokens": 1})
    messages = [{"role": "user", "content": "hi"}] * 30_000
    many = json.dumps({"model": MODEL, "messages": messages, "max_tokens": 1}, separators=(",", ":"))
    fits = json.dumps({"model": MODEL, "prompt": (words * (max_chars // len(words) + 1))[:max_chars],
                       "max_tokens": 1})
    return [("prompt just under the body limit", "/v1/completions", big.encode()),
            ("30,000 chat messages", "/v1/chat/completions", many.encode()),
            (f"longest prompt that could fit ({max_chars:,} characters)", "/v1/completions", fits.encode())]


def window(base_url: str, hostile: list[tuple[str, str, bytes]]) -> tuple[str, list[str]]:
    """The median and longest gap between two chunks of a stream, and a line per hostile body."""
    streams: list[list[float]] = [[] for _ in range(8)]
    threads = [threading.Thread(target=stream_times, args=(base_url, i, times)) for i, times in enumerate(streams)]
    for t in threads:
        t.start()
    sent = []
    while not all(len(times) >= 2 for times in streams):       # every stream is decoding
        time.sleep(0.05)
    for name, path, body in hostile:
        t0 = time.monotonic()
        resp = httpx.post(base_url + path, content=body, headers={"content-type": "application/json"}, timeout=300)
        sent.append((name, resp.status_code, t0, time.monotonic()))
    for t in threads:
        t.join()
    gaps = [(a, b) for times in streams for a, b in zip(times, times[1:])]
    lines = []
    for name, status, t0, t1 in sent:
        during = max((b - a for a, b in gaps if a < t1 and b > t0), default=0.0)
        lines.append(f"{name}: HTTP {status} in {t1 - t0:.2f} s; longest gap of a stream meanwhile {during:.2f} s")
    lengths = sorted(b - a for a, b in gaps)
    return f"median {lengths[len(lengths) // 2]:.2f}, longest {lengths[-1]:.2f}", lines


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    port = free_port()
    proc = start_server(port)
    base_url = f"http://127.0.0.1:{port}"
    try:
        from labkit.model.loader import resolve_model_dir
        from labkit.model.tokenizer import Tokenizer
        from labkit.serve.prompt import longest_token_bytes

        max_chars = (DEFAULT_MAX_MODEL_LEN - 1) * longest_token_bytes(Tokenizer(resolve_model_dir(None, False)))
        window(base_url, [])                      # warm-up
        quiet, _ = window(base_url, [])
        busy, answers = window(base_url, hostile_bodies(max_chars))
        quiet_after, _ = window(base_url, [])
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print(f"gaps between two chunks of a stream (s): quiet window {quiet}; hostile window {busy}; "
          f"quiet again {quiet_after}")
    print("\n".join(answers))


if __name__ == "__main__":
    main()
