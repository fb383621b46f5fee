"""Memory and verdicts of a class on one machine: N learners' kernels running a lab at the same time.

    python scripts/class_memory.py --learners 1 8 --fast              # shared weights (prepared if needed)
    python scripts/class_memory.py --learners 1 8 --fast --private    # each kernel with its own copy

Each learner is a fresh ``python3`` kernel running the lab through nbclient with a results folder and a
labkit cache of its own (as each user of a hub has), and, unless ``--private``, ``LABKIT_SHARED_CACHE``
set to the class's shared cache (``labkit.model.shared_cache.prepare``; ``--shared DIR``). When every
kernel has finished the lab, with the lab still open (kernel alive), the script reads each kernel's RSS
and PSS (proportional set size: a page shared by k processes counts 1/k to each) from
``/proc/PID/smaps_rollup``, and where the weight pack is mapped, how much of it is resident.

Reported per run: RSS and PSS of one kernel, the class's total PSS, the marginal PSS of a learner
((total at N - total at 1) / (N - 1)), and how many learners the machine's memory holds at that margin.
While the learners run, a probe kernel answers a trivial cell every second: the slowest answer says
whether a learner's open dashboard would have stayed responsive. ``--keep-results DIR`` keeps each
learner's ``results/labNN.json`` (``DIR/learnerK``) so that ``scripts/compare_verdicts.py`` can check
every verdict against an idle run. Nothing here is a test: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def smaps_rollup(pid: int) -> dict[str, int]:
    """kB fields of /proc/PID/smaps_rollup."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0])
    return out


def mapping_kb(pid: int, needle: str) -> dict[str, int]:
    """Rss, Pss and Anonymous (kB: pages copied out of the file) of the mappings of ``pid`` whose path
    contains ``needle``."""
    total, inside = {"Rss": 0, "Pss": 0, "Anonymous": 0}, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()[0] if line.split() else ""
        if "-" in head and not head.endswith(":"):
            inside = needle in line
        elif inside and head[:-1] in total:
            total[head[:-1]] += int(line.split()[1])
    return total


def mem_total_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise RuntimeError("no MemTotal in /proc/meminfo")


class Learner(threading.Thread):
    """One learner's kernel: runs the lab, then waits (lab open) until the measurement is taken."""

    def __init__(self, index: int, lab: Path, env: dict, ready: threading.Barrier, measured: threading.Event):
        super().__init__(daemon=True)
        self.index, self.lab, self.env, self.ready, self.measured = index, lab, env, ready, measured
        self.pid: int | None = None
        self.wall_s = 0.0
        self.error: str | None = None

    def run(self) -> None:
        import nbformat
        from nbclient import NotebookClient

        nb = nbformat.read(self.lab, as_version=4)
        client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(self.lab.parent)}})
        try:
            with client.setup_kernel(env=self.env):
                self.pid = client.km.provisioner.process.pid
                start = time.perf_counter()
                try:
                    for i, cell in enumerate(nb.cells):
                        if cell.cell_type == "code":
                            client.execute_cell(cell, i)
                except Exception as exc:      # noqa: BLE001 - reported in the table, the others go on
                    self.error = f"{type(exc).__name__}: {str(exc)[:200]}"
                self.wall_s = time.perf_counter() - start
                self.ready.wait()
                self.measured.wait()
        except threading.BrokenBarrierError:
            pass


def probe_latency(stop: threading.Event, env: dict) -> list[float]:
    """Seconds a spare kernel takes to answer ``1 + 1``, once a second until ``stop``."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env=env)
    answers = []
    try:
        while not stop.wait(1.0):
            t0 = time.perf_counter()
            kc.execute_interactive("1 + 1", timeout=120, output_hook=lambda msg: None)
            answers.append(time.perf_counter() - t0)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return answers


def run_class(n: int, lab: Path, fast: bool, shared: Path | None, keep: Path | None, tmp: Path) -> dict:
    ready, measured = threading.Barrier(n + 1), threading.Event()
    learners = []
    for k in range(n):
        home = tmp / f"n{n}" / f"learner{k}"
        env = dict(os.environ, PYTHONPATH=str(REPO), LABKIT_CACHE=str(home / "cache"),
                   LABKIT_RESULTS=str((keep / f"learner{k}") if keep else home / "results"))
        env.pop("LABKIT_FAST", None)
        env.pop("LABKIT_SHARED_CACHE", None)
        if fast:
            env["LABKIT_FAST"] = "1"
        if shared is not None:
            env["LABKIT_SHARED_CACHE"] = str(shared)
        learners.append(Learner(k, lab, env, ready, measured))
    stop = threading.Event()
    latencies: list[float] = []
    probe = threading.Thread(target=lambda: latencies.extend(probe_latency(stop, dict(os.environ))), daemon=True)
    probe.start()
    time.sleep(3)
    load_before = os.getloadavg()[0]
    for learner in learners:
        learner.start()
    ready.wait()
    stop.set()
    rows = []
    for learner in learners:
        roll = smaps_rollup(learner.pid)
        pack = mapping_kb(learner.pid, ".lkw")
        rows.append({"learner": learner.index, "wall_s": round(learner.wall_s, 1), "error": learner.error,
                     "rss_kb": roll["Rss"], "pss_kb": roll["Pss"], "pss_anon_kb": roll.get("Pss_Anon", 0),
                     "pss_file_kb": roll.get("Pss_File", 0), "pss_shmem_kb": roll.get("Pss_Shmem", 0),
                     "pack_rss_kb": pack["Rss"], "pack_pss_kb": pack["Pss"]})
    measured.set()
    for learner in learners:
        learner.join(timeout=60)
    probe.join(timeout=130)
    return {"learners": n, "rows": rows, "load_before": round(load_before, 2),
            "probe_max_s": round(max(latencies), 3) if latencies else None,
            "probe_median_s": round(statistics.median(latencies), 3) if latencies else None,
            "probe_answers": len(latencies)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--lab", default="01", help="the lab's name prefix (default 01)")
    parser.add_argument("--fast", action="store_true", help="LABKIT_FAST=1")
    parser.add_argument("--private", action="store_true", help="no shared cache: each kernel its own weights")
    parser.add_argument("--shared", type=Path, help="the class's shared cache (default: a temporary one, prepared)")
    parser.add_argument("--keep-results", type=Path, help="keep each learner's results here (DIR/nN/learnerK)")
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.learners):
        parser.error("--learners: counts of 1 or more")
    labs = sorted((REPO / "labs").glob(f"{args.lab}*.ipynb"))
    if not labs:
        parser.error(f"--lab {args.lab}: no notebook in labs/ starts with it")

    from labkit.kernels.cpu_features import describe_cpu
    from labkit.model import shared_cache, weight_pack

    with tempfile.TemporaryDirectory(prefix="labkit-class-") as tmp_name:
        tmp = Path(tmp_name)
        shared = None
        if not args.private:
            shared = args.shared or tmp / "shared"
            if not (shared / weight_pack.PACKS).is_dir():
                print(f"preparing the shared cache in {shared} ...", flush=True)
                shared_cache.prepare(shared, progress=False, in_memory=os.geteuid() == 0)
            os.environ[shared_cache.ENV] = str(shared)
            print(shared_cache.describe(), flush=True)
            os.environ.pop(shared_cache.ENV)
        total_kb = mem_total_kb()
        print(f"CPU: {describe_cpu()}; cores {os.cpu_count()}; memory {total_kb / 2**20:.1f} GiB; "
              f"lab {labs[0].stem}{' FAST' if args.fast else ''}; weights {'private' if args.private else 'shared'}",
              flush=True)
        runs = []
        for n in args.learners:
            keep = args.keep_results / f"n{n}" if args.keep_results else None
            run = run_class(n, labs[0], args.fast, shared, keep, tmp)
            runs.append(run)
            pss = [r["pss_kb"] for r in run["rows"]]
            rss = [r["rss_kb"] for r in run["rows"]]
            errors = [r["error"] for r in run["rows"] if r["error"]]
            print(f"{n} learner(s): RSS per kernel {statistics.median(rss) / 1024:.0f} MiB, PSS per kernel "
                  f"{statistics.median(pss) / 1024:.0f} MiB (min {min(pss) / 1024:.0f}, max {max(pss) / 1024:.0f}), "
                  f"total PSS {sum(pss) / 1024:.0f} MiB; weight pack resident {run['rows'][0]['pack_rss_kb'] / 1024:.0f} "
                  f"MiB, its PSS per kernel {run['rows'][0]['pack_pss_kb'] / 1024:.0f} MiB; lab wall "
                  f"{max(r['wall_s'] for r in run['rows']):.0f} s; probe kernel answered in at most "
                  f"{run['probe_max_s']} s (median {run['probe_median_s']} s, {run['probe_answers']} answers)"
                  + (f"; ERRORS: {errors}" if errors else ""), flush=True)
        by_n = {run["learners"]: sum(r["pss_kb"] for r in run["rows"]) for run in runs}
        if len(by_n) >= 2:
            lo, hi = min(by_n), max(by_n)
            marginal = (by_n[hi] - by_n[lo]) / (hi - lo)
            first = by_n[lo] / lo
            holds = int((total_kb * 0.9 - first) // marginal) + 1 if marginal > 0 else None
            print(f"marginal learner: {marginal / 1024:.0f} MiB PSS ({marginal / 2**20:.2f} GiB); the first "
                  f"{first / 1024:.0f} MiB; a machine of {total_kb / 2**20:.1f} GiB holds about {holds} learners "
                  f"with this lab open (90 % of its memory, nothing else running)", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"cpu": describe_cpu(), "mem_total_kb": total_kb, "lab": labs[0].stem,
                                             "fast": args.fast, "shared": not args.private, "runs": runs}, indent=1))
        if shared is not None and os.path.ismount(shared / weight_pack.PACKS) and args.shared is None:
            os.system(f"umount --lazy {shared / weight_pack.PACKS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
