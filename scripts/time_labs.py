"""Time each lab's Run All, headless, as a learner's kernel runs it: full mode or FAST, idle or busy.

    python scripts/time_labs.py                       # every lab, full mode, idle
    python scripts/time_labs.py --fast --labs 02 04   # FAST mode, two labs
    python scripts/time_labs.py --busy 2              # two busy-loop processes beside the kernel
    python scripts/time_labs.py --timings data/lab-timings.json --convert      # what `make lab` tells learners

Each notebook runs in a fresh ``python3`` kernel through nbclient (the way ``tests/course/test_notebooks.py``
runs it), in a throw-away copy of the workspace (``LABKIT_RESULTS`` points into a temporary folder, so a
learner's ``results/`` is never touched). ``--busy N`` starts N processes that spin on the CPU for the
whole run, the "two busy-loop processes beside it" a lab must stand. The table gives the wall-clock time of
Run All, the slowest cells, the load average before and after, and the CPU line; ``--json`` writes it.
Nothing here is a test: timings are measured, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABS = REPO / "labs"


def _spin() -> None:   # a busy loop: one process, one core's worth of load
    while True:
        pass


@contextlib.contextmanager
def busy_loops(n: int):
    """Run ``n`` busy-loop processes (one core's load each) for the body, then stop and reap every one.

    Each loop is joined after it is terminated, so none is still alive (or a zombie) when the body's caller
    goes on: a script that ends, or a test that checks nothing is left running, sees no stray process."""
    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(n)]
    for p in spinners:
        p.start()
    try:
        yield spinners
    finally:
        for p in spinners:
            p.terminate()
        for p in spinners:
            p.join(10)
            if p.is_alive():    # SIGTERM ignored: a spinner never handles it, but do not leave one behind
                p.kill()
                p.join(10)


def _cpu_line() -> str:
    sys.path.insert(0, str(REPO))
    from labkit.kernels.cpu_features import describe_cpu
    return describe_cpu()


def notebooks(selected: list[str]) -> list[Path]:
    found = sorted(p for p in LABS.glob("*.ipynb"))
    if not selected:
        return found
    chosen = [p for p in found if any(p.name.startswith(s) for s in selected)]
    if not chosen:
        raise SystemExit(f"--labs {selected}: no notebook in {LABS} starts with these")
    return chosen


def run_one(path: Path, fast: bool, cell_timeout: int, keep: Path | None = None) -> dict:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="labkit-time-") as tmp:
        results = keep if keep is not None else Path(tmp) / "results"
        env = dict(os.environ, PYTHONPATH=str(REPO), LABKIT_RESULTS=str(results))
        env.pop("LABKIT_FAST", None)
        if fast:
            env["LABKIT_FAST"] = "1"
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        cells: list[tuple[float, int, str]] = []
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        with client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                t0 = time.perf_counter()
                client.execute_cell(cell, index)
                first = cell.source.strip().splitlines()[0][:60] if cell.source.strip() else ""
                cells.append((time.perf_counter() - t0, index, first))
        wall = time.perf_counter() - start
    return {"lab": path.stem, "mode": "FAST" if fast else "full", "wall_s": round(wall, 1),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
            "slowest": [{"cell": i, "s": round(s, 1), "source": src} for s, i, src in sorted(cells, reverse=True)[:5]],
            "cells": [{"cell": i, "s": round(s, 2), "source": src} for s, i, src in cells]}


def time_conversion() -> float:
    """Seconds to convert the default model into an empty cache, as a learner's first lab cell does."""
    sys.path.insert(0, str(REPO))
    from labkit.model.loader import convert_gguf, find_default_gguf

    # convert_gguf itself: ensure_default_converted would copy this user's earlier conversion instead
    with tempfile.TemporaryDirectory(prefix="labkit-convert-") as tmp:
        start = time.perf_counter()
        convert_gguf(find_default_gguf(), Path(tmp), progress=False)
        return round(time.perf_counter() - start, 1)


def write_timings(path: Path, rows: list[dict], fast: bool, convert_s: float | None,
                  tool: str = "scripts/time_labs.py") -> None:
    """Merge one mode's Run All times into ``path``: the other mode's times and the conversion are kept when
    they were measured on this CPU, and dropped when the file names another (one file, one CPU)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    cpu = f"{_cpu_line()}, {os.cpu_count()} cores"
    if data.get("cpu") != cpu:
        data = {}
    loads = [row["load_before"] for row in rows]
    data.update(cpu=cpu, measured_on=time.strftime("%Y-%m-%d"),
                load=round(max(loads), 1) if loads else None, tool=tool)
    data.setdefault("full_s", {})
    data.setdefault("fast_s", {})
    data["fast_s" if fast else "full_s"].update({row["lab"][:2]: row["wall_s"] for row in rows})
    if convert_s is not None:
        data["convert_s"] = convert_s
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", nargs="*", default=[], help="name prefixes, e.g. 01 04 (default: every lab)")
    parser.add_argument("--fast", action="store_true", help="LABKIT_FAST=1, as make test runs them")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes running beside the kernel")
    parser.add_argument("--cell-timeout", type=int, default=900)
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--keep-results", type=Path, help="write the labs' results/labNN.json here (to compare "
                        "verdicts between an idle and a busy run) instead of a temporary folder")
    parser.add_argument("--timings", type=Path, help="merge this run's Run All times (by lab number and mode) into "
                        "this file, which `make lab` and each lab's first cell read (data/lab-timings.json)")
    parser.add_argument("--convert", action="store_true", help="also time converting the model into an empty cache")
    args = parser.parse_args(argv)
    if args.busy < 0:
        parser.error("--busy: a count of processes, 0 or more")

    rows = []
    with busy_loops(args.busy):
        print(f"CPU: {_cpu_line()}; cores {os.cpu_count()}; busy-loop processes beside the kernel: {args.busy}",
              flush=True)
        for path in notebooks(args.labs):
            row = run_one(path, args.fast, args.cell_timeout, args.keep_results)
            rows.append(row)
            slow = "; ".join(f"cell {c['cell']} {c['s']} s" for c in row["slowest"][:3])
            print(f"{row['lab']:<28} {row['mode']:<4} {row['wall_s']:>7.1f} s   load {row['load_before']:.1f} -> "
                  f"{row['load_after']:.1f}   slowest: {slow}", flush=True)
    if args.timings:
        write_timings(args.timings, rows, args.fast, time_conversion() if args.convert else None)
    if args.json:
        args.json.write_text(json.dumps({"cpu": _cpu_line(), "busy": args.busy, "rows": rows}, indent=1,
                                        ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
