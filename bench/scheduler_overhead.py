"""Scheduler CPU time per step vs running requests, and the concurrency where it saturates (lab 03, issue 14).

    python -m bench.scheduler_overhead            # 1, 64, 1,024, 4,096 running requests
    python -m bench.scheduler_overhead --quick    # 1, 64, 1,024
    python -m bench.scheduler_overhead --tiny     # 1, 64 (smoke: seconds)

The simulated model (``LLM(model="sim")``: Llama-3-8B on an H100 profile) is filled with n running
requests in steady decode. Per step the engine reports the scheduler's CPU time (``StepStats.scheduler_s``,
measured on this machine) and the simulated accelerator time (``model_s``); "other host" is the rest of
the step's wall time. Each figure is the fastest of a few steps (other programs only add time). The
saturation concurrency solves ``a + b·n = 5 ms`` (vLLM's ~5 ms Llama-8B / H100 decode step, blog
2025-01-27) on the least-squares line through the rows. When the engine has a host-path optimisation
switch (``labkit.labs.lab03_batching.overhead.host_path_switch``; today ``batched_sampling``) the sweep
runs with it off and on, interleaved at each concurrency so a change in the machine's load hits both.
"""

from __future__ import annotations

import argparse

from bench.common import Section, load_average, report
from labkit.labs.lab03_batching.overhead import OverheadRow, before_after, host_path_switch, saturation_concurrency

ACCELERATOR_S = 0.005
SIZES = {"full": [1, 64, 1024, 4096], "quick": [1, 64, 1024], "tiny": [1, 64]}


def row(r: OverheadRow) -> list[str]:
    update_s = r.scheduler_s - r.schedule_s - r.sample_s
    return [f"{r.num_running:,}", f"{1e3 * r.scheduler_s:.3f}", f"{1e3 * r.schedule_s:.3f}", f"{1e3 * r.sample_s:.3f}",
            f"{1e3 * update_s:.3f}", f"{1e3 * r.other_s:.3f}", f"{1e3 * r.model_s:.2f}",
            f"{r.scheduler_share(ACCELERATOR_S):.0%}"]


def section(label: str, rows: list[OverheadRow]) -> Section:
    sat = saturation_concurrency(rows, ACCELERATOR_S)
    return Section(f"Scheduler time per step, {label}",
                   ["running requests", "scheduler CPU ms/step (measured)", "of it: deciding", "sampling",
                    "update and bookkeeping", "other host ms/step",
                    "accelerator ms/step (simulated)", "scheduler share of a 5 ms step"],
                   [row(r) for r in rows],
                   [f"saturation concurrency (scheduler CPU = 5 ms): {'none' if sat is None else f'{sat:,.0f}'} running requests",
                    f"load average: {load_average()}"])


def run(args: argparse.Namespace):
    sizes = SIZES["tiny" if args.tiny else "quick" if args.quick else "full"]
    switch = host_path_switch()
    before, after = before_after(sizes, switch, rounds=1 if args.tiny else 2)
    if switch is None:
        yield section("engine as built (no host-path optimisation switch in this EngineConfig)", before)
        return
    yield section(f"{switch.name}={switch.off!r}", before)
    yield section(f"{switch.name}={switch.on!r} (measured interleaved with the row above)", after)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scheduler_overhead", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="up to 1,024 running requests")
    size.add_argument("--tiny", action="store_true", help="smoke mode: 1 and 64 running requests")
    p.add_argument("--threads", type=int, default=1, help="accepted for bench's common flags (no model runs)")
    p.add_argument("--model", default=None, help="accepted for bench's common flags (the sim is used)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Section]:
    return report("Scheduler CPU time vs concurrency (simulated accelerator)", "bench.scheduler_overhead", argv,
                  run(parse_args(argv)))


if __name__ == "__main__":
    main()
