"""Record a bundle: run the labs headless and keep every measuring section's record.

    python scripts/record_labs.py [--full] [--labs 01 02 03] [--out data/lab-runs] [--accept-shared]
    python scripts/record_labs.py --full --timings data/lab-timings.json --convert   # and what `make lab` tells
    python scripts/record_labs.py --busy 2     # beside two busy loops: into <cpu kind>/fast-busy2/

Runs each lab notebook top to bottom (nbclient, a python3 kernel; fast mode unless ``--full``) with
``LABKIT_RECORDS`` pointing at ``<out>/<cpu kind>/<fast|full>/``, so every section's record
(``labkit.labs.common.records``) lands in one bundle per CPU kind and mode. The learner's results
summaries go to a temporary folder. ``bundle.json`` beside the records says when, on what CPU and
under what load the bundle was recorded, and which labs ran (and which failed, with the error).

``--busy N`` starts N processes that spin on the CPU for the whole recording (the "two busy loops beside it" a
lab must stand, as ``scripts/time_labs.py --busy``) and writes the bundle under ``<fast|full>-busyN/``, so a
busy bundle never mixes with the quiet one the course site renders from; its Run All times are not timings a
learner should be told, so ``--timings`` is refused with it.

``--accept-shared`` also copies bundles found under ``../shared/lab-runs/<kind>/<mode>/`` (records
recorded on other machines) into ``<out>``; a folder there with no records is skipped with a reason.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run_lab(path: Path, env: dict[str, str], workdir: Path, timeout_s: int) -> str | None:
    """Execute one notebook; None when it ran, else the error's first line."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        client.execute()
    except Exception as e:            # one lab failing must not lose the others' records
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return None


def write_manifest(path: Path, run: dict) -> None:
    """``bundle.json``: every recording run into this bundle (a later run of some labs adds to it), and
    per lab the latest run's outcome."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    data = {"cpu": run["cpu"], "kind": run["kind"], "mode": run["mode"], "cores": run["cores"],
            "labs": {**old.get("labs", {}), **run["labs"]}, "runs": [*old.get("runs", []), run],
            "busy": any(r.get("busy") for r in [*old.get("runs", []), run])}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def accept_shared(shared: Path, out: Path) -> list[str]:
    from labkit.labs.common.records import MODES, find_bundles, load_bundle

    notes = []
    if not shared.is_dir():
        return [f"{shared}: absent, nothing to accept"]
    found = find_bundles(shared)
    for kind_dir in sorted(p for p in shared.iterdir() if p.is_dir()):
        for mode in MODES:
            key = f"{kind_dir.name}/{mode}"
            if key not in found:
                if (kind_dir / mode).is_dir():
                    notes.append(f"{key}: skipped, it holds no records (saved notebooks only)")
                continue
            load_bundle(found[key])           # a damaged bundle is an error naming the file
            dest = out / kind_dir.name / mode
            shutil.copytree(found[key], dest, dirs_exist_ok=True)
            notes.append(f"{key}: copied to {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}")
    return notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="full mode (default: fast mode, LABKIT_FAST=1)")
    ap.add_argument("--labs", nargs="*", default=["01", "02", "03", "04", "05"], help="lab numbers to run")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "lab-runs")
    ap.add_argument("--accept-shared", action="store_true", help="copy bundles from ../shared/lab-runs")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    ap.add_argument("--timings", type=Path, help="also merge each lab's Run All wall time into this file "
                    "(data/lab-timings.json: what `make lab` and each lab's first cell tell the learner)")
    ap.add_argument("--convert", action="store_true", help="with --timings, also time converting the model")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes spinning beside the labs; the bundle "
                    "goes under <mode>-busyN/")
    args = ap.parse_args(argv)
    if args.busy < 0:
        ap.error("--busy: a count of processes, 0 or more")
    if args.busy and args.timings:
        ap.error("--busy with --timings: Run All times beside busy loops are not what a learner should be told")

    from labkit.labs.common.measure import cores, describe_machine, machine_load
    from labkit.labs.common.records import cpu_kind
    from scripts.time_labs import busy_loops

    mode = "full" if args.full else "fast"
    bundle = args.out / cpu_kind() / (f"{mode}-busy{args.busy}" if args.busy else mode)
    bundle.mkdir(parents=True, exist_ok=True)
    timed: list[dict] = []
    with busy_loops(args.busy):
        manifest = {"cpu": describe_machine(), "kind": cpu_kind(), "mode": mode, "cores": cores(),
                    "busy_loops": args.busy,
                    "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "load_before": machine_load(), "labs": {}}
        _record(args, mode, bundle, manifest, timed)
    manifest["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    manifest["load_after"] = machine_load()
    manifest["busy"] = max(x or 0.0 for x in (manifest["load_before"], manifest["load_after"])) > manifest["cores"]
    write_manifest(bundle / "bundle.json", manifest)
    if args.timings:
        from scripts.time_labs import time_conversion, write_timings
        write_timings(args.timings, timed, mode == "fast", time_conversion() if args.convert else None,
                      tool="scripts/record_labs.py")
    if args.accept_shared:
        for note in accept_shared(REPO.parent / "shared" / "lab-runs", args.out):
            print(note)
    return 0 if all(v == "ran" for v in manifest["labs"].values()) else 1


def _record(args, mode: str, bundle: Path, manifest: dict, timed: list[dict]) -> None:
    with tempfile.TemporaryDirectory(prefix="labkit-record-") as tmp:
        env = {"LABKIT_RECORDS": str(bundle.resolve()), "LABKIT_RESULTS": str(Path(tmp) / "results"),
               "PYTHONPATH": str(REPO), "LABKIT_FAST": "1" if mode == "fast" else "0"}
        for lab in args.labs:
            path = next(iter(sorted((REPO / "labs").glob(f"{lab}_*.ipynb"))), None)
            if path is None:
                manifest["labs"][lab] = "no such lab"
                continue
            print(f"recording lab {lab} ({mode} mode) into {bundle} ...", flush=True)
            load_before, start = os.getloadavg()[0], time.perf_counter()
            error = run_lab(path, env, Path(tmp), args.timeout)
            wall_s = round(time.perf_counter() - start, 1)
            manifest["labs"][lab] = error or "ran"
            if error is None:
                timed.append({"lab": path.stem, "wall_s": wall_s, "load_before": round(load_before, 2)})
            print(f"  {error or 'ran'} in {wall_s} s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
