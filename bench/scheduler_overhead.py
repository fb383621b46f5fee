"""Host time per step vs running requests, and the concurrency where it saturates (lab 03).

    python -m bench.scheduler_overhead            # 1, 16, 64, 256, 1,024, 4,096 running requests
    python -m bench.scheduler_overhead --quick    # 1, 64, 256, 1,024
    python -m bench.scheduler_overhead --tiny     # 1, 64 (smoke: seconds)
    python -m bench.scheduler_overhead --against /tmp/old    # before/after: another checkout vs this one

``--against DIR`` times another labkit checkout (e.g. ``git worktree add /tmp/old 7427a32``) and this one
in alternating processes, the order swapped each round, with the same self-contained timer (it uses
only ``LLM(model="sim")``, ``add_request``, ``step`` and the runner's ``execute``, so any version runs it).

The simulated model (``LLM(model="sim")``: Llama-3-8B on an H100 profile) is filled with n running
requests in steady decode. Per step, measured on this machine: the engine's host work (deciding,
sampling, bookkeeping, stats and events: the step's wall time less the simulated runner's own work,
which stands in for the model), its split, and the simulated accelerator time (``model_s``). Each
figure is the step with the least host time of a few (other programs only add time; its parts add up),
with the median step beside it, and the garbage collector's mean time per step (the best step
usually had no collection; a full one scans the whole heap and lands in a few steps). The saturation
concurrency solves ``a + b·n = 5 ms`` (vLLM's ~5 ms Llama-8B / H100 decode step, blog 2025-01-27) on
the least-squares line through the rows' scheduler time. The host-path grid crosses the engine's two host-path switches
(list-built vs persistent batch, sync vs async) at 1, 64 and 1,024 running requests, per request,
best step and mean with the garbage collector on; then sync vs async scheduling on the real model at
batch 16 (SmolLM2-135M-Instruct, or ``--model``), on one and on two torch threads. When the engine has a host-path optimisation
switch (``labkit.labs.lab03_batching.overhead.host_path_switch``; today ``batched_sampling``) the sweep
runs with it off and on, interleaved at each concurrency so a change in the machine's load hits both.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from bench.common import REPO, Section, load_average, report
from labkit.kernels.cpu_features import describe_cpu
from labkit.labs.lab03_batching.overhead import (
    PROFILES,
    RUNGS,
    OverheadRow,
    before_after,
    host_path_switch,
    measure_overhead,
    remedies,
    saturation_concurrency,
)

ACCELERATOR_S = 0.005
SIZES = {"full": [1, 16, 64, 256, 1024, 4096], "quick": [1, 64, 256, 1024], "tiny": [1, 64]}
HEADERS = ["running requests", "engine host µs/step (best)", "µs per request", "median µs/step",
           "of it: deciding", "sampling", "update and bookkeeping", "stats and events",
           "scheduler µs/step (StepStats.host_s)", "sim runner µs (not counted)",
           "garbage collector µs/step (mean)", "accelerator ms/step (simulated)", "host share of a 5 ms step"]


def row(r: OverheadRow) -> list[str]:
    update_s = r.scheduler_s - r.schedule_s - r.sample_s
    median = "" if r.engine_host_median_s is None else f"{1e6 * r.engine_host_median_s:,.0f}"
    share = r.engine_host_s / (r.engine_host_s + ACCELERATOR_S)
    return [f"{r.num_running:,}", f"{1e6 * r.engine_host_s:,.0f}", f"{1e6 * r.engine_host_s / r.num_running:.2f}",
            median, f"{1e6 * r.schedule_s:,.0f}", f"{1e6 * r.sample_s:,.0f}", f"{1e6 * update_s:,.0f}",
            f"{1e6 * r.stats_events_s:,.0f}", f"{1e6 * r.scheduler_s:,.0f}", f"{1e6 * r.runner_s:,.0f}",
            f"{1e6 * r.gc_s:,.0f}", f"{1e3 * r.model_s:.2f}", f"{share:.0%}"]


def section(label: str, rows: list[OverheadRow]) -> Section:
    sat = saturation_concurrency(rows, ACCELERATOR_S)
    return Section(f"Host time per step, {label}", HEADERS, [row(r) for r in rows],
                   [f"saturation concurrency (scheduler CPU = 5 ms): {'none' if sat is None else f'{sat:,.0f}'} running requests",
                    f"load average: {load_average()}", f"cpu: {describe_cpu()}"])


REMEDY_HEADERS = ["rung", "engine host µs/step (best)", "µs per request (best)", "µs per request (median)",
                  "µs per request (mean, GC incl.)", "of it: deciding", "input prep", "sampling", "update",
                  "stats and events", "accelerator ms (simulated)", "step ms (virtual clock)",
                  "step ÷ max(host, model)", "accelerator busy", "tokens/s (simulated)"]


def remedy_rows(run) -> list[list[str]]:
    out = []
    for name, r in run.rows.items():
        n = r.num_running
        update_s = r.scheduler_s - r.schedule_s - r.sample_s
        bound = max(r.engine_host_s, r.model_s)
        out.append([name, f"{1e6 * r.engine_host_s:,.0f}", f"{1e6 * r.engine_host_s / n:.2f}",
                    f"{1e6 * r.engine_host_median_s / n:.2f}", f"{1e6 * r.engine_host_mean_s / n:.2f}",
                    f"{1e6 * r.schedule_s:,.0f}", f"{1e6 * r.prepare_s:,.0f}", f"{1e6 * r.sample_s:,.0f}",
                    f"{1e6 * update_s:,.0f}", f"{1e6 * r.stats_events_s:,.0f}", f"{1e3 * r.model_s:.2f}",
                    f"{1e3 * r.step_s:.2f}", f"{r.step_s / bound:.2f}", f"{r.busy_share:.0%}", f"{r.tokens_per_s:,.0f}"])
    return out


def remedy_sections(sizes: list[int], steps: int, rounds: int):
    """The host-path remedies one at a time (sync vs async, list-built vs persistent batch), per profile."""
    for profile in PROFILES:
        for n in sizes:
            run = remedies(n, profile, steps=steps, rounds=rounds)
            yield Section(f"Host-path remedies, {profile}, {n:,} running requests (simulated accelerator)",
                          REMEDY_HEADERS, remedy_rows(run),
                          [f"rungs interleaved ({' → '.join(name for name, _ in RUNGS)}), {rounds} rounds of {steps} "
                           "steady decode steps; per rung the round with the least engine host time",
                           "engine host = deciding + input preparation + sampling + update + stats/events (the sim "
                           "runner's stand-in work left out); step = the virtual clock, which every piece of host "
                           "work advances; async overlaps it with the simulated accelerator",
                           f"load average: {load_average()} (highest seen {run.load})", f"cpu: {describe_cpu()}"])


# The host path's two switches, crossed: each arm is an EngineConfig override.
HOST_PATH_ARMS: dict[str, dict] = {
    "list-built, sync": {},
    "persistent batch, sync": {"persistent_batch": True},
    "list-built, async": {"async_scheduling": True},
    "persistent batch, async": {"persistent_batch": True, "async_scheduling": True},
}
HOST_PATH_PROFILE = ("smollm2-135m", "h100-sxm")     # a small model: its short step is where host time shows


def host_path_grid(sizes: list[int], steps: int, rounds: int) -> Section:
    """µs per request of the engine's host path, list-built vs persistent batch, sync vs async: the four arms
    interleaved (A B C D, A B C D ...) at each concurrency, with the garbage collector on as in a real run.
    Best: the step with the least host time over all rounds; mean: the lowest round mean (collections and
    everything else the step pays included)."""
    from labkit.labs.common.measure import machine_load

    rows, load, at_target = [], machine_load(), {}
    for n in sizes:
        tries: dict[str, list[OverheadRow]] = {name: [] for name in HOST_PATH_ARMS}
        for _ in range(rounds):
            for name, overrides in HOST_PATH_ARMS.items():
                tries[name].append(measure_overhead(n, overrides, steps, model_profile=HOST_PATH_PROFILE[0],
                                                    hardware=HOST_PATH_PROFILE[1]))
            load = max(load or 0.0, machine_load() or 0.0)
        for name, got in tries.items():
            best = min(got, key=lambda r: r.engine_host_s)
            mean = min(r.engine_host_mean_s for r in got)
            if n == TARGET_RUNNING:
                at_target[name] = (best.engine_host_s, best.engine_host_s + best.runner_s)
            update_s = best.scheduler_s - best.schedule_s - best.sample_s
            rows.append([f"{n:,}", name, f"{1e6 * best.engine_host_s / n:.2f}", f"{1e6 * mean / n:.2f}",
                         f"{1e6 * best.gc_s / n:.2f}", f"{1e6 * best.schedule_s / n:.2f}", f"{1e6 * best.prepare_s / n:.2f}",
                         f"{1e6 * best.sample_s / n:.2f}", f"{1e6 * update_s / n:.2f}",
                         f"{1e6 * best.stats_events_s / n:.2f}"])
    return Section("Host path per request: list-built vs persistent batch, sync vs async (simulated accelerator, "
                   f"{' / '.join(HOST_PATH_PROFILE)})",
                   ["running requests", "arm", "µs per request (best step)", "µs per request (mean, GC on)",
                    "of the best round: GC µs per request (mean)", "deciding", "input prep", "sampling", "update",
                    "stats and events"], rows,
                   [f"arms interleaved at each concurrency, {rounds} rounds of {steps} steady decode steps; host = "
                    "the step's engine work less the simulated runner's stand-in (input preparation counted)",
                    "target: persistent batch ≤ 2 µs per request at 1,024 running",
                    *target_notes(at_target),
                    f"load average: {load_average()} (highest seen {load})", f"cpu: {describe_cpu()}"])


TARGET_RUNNING, TARGET_STEP_S = 256, 1e-3      # the host's whole step at 256 running, ≤ 1 ms


def target_notes(at_target: dict[str, tuple[float, float]]) -> list[str]:
    """One line per arm: its best step at TARGET_RUNNING against the 1 ms target."""
    return [f"target: ≤ {1e3 * TARGET_STEP_S:g} ms a step at {TARGET_RUNNING} running, {name}: "
            f"{1e3 * host:.2f} ms engine host ({1e3 * whole:.2f} ms with the sim runner's stand-in work), "
            f"{'met' if host <= TARGET_STEP_S else 'NOT met'}" for name, (host, whole) in at_target.items()]


def _load(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def real_model_async_section(model, threads_list: list[int], batch: int, max_tokens: int, rounds: int) -> Section:
    """Sync vs async scheduling on the real model (default SmolLM2-135M-Instruct), batch ``batch``, greedy:
    interleaved ``generate`` rounds on the wall clock, once per torch thread count. On a 2-core machine one
    torch thread leaves the scheduler's thread a core of its own; two share both cores with it."""
    from labkit.labs.lab03_batching.overhead import real_model_async

    rows = []
    for threads in threads_list:
        real = real_model_async(batch, max_tokens, rounds, model=model, threads=threads)
        c = real.comparison
        v, sync, fast = c.verdict, c.arms["sync"], c.arms["async"]
        rows.append([str(real.threads), f"{sync.best:,.1f}", f"{sync.median:,.1f}", f"{fast.best:,.1f}",
                     f"{fast.median:,.1f}", f"{v.ratio:.3f}", f"{v.ratio_min:.3f} – {v.ratio_max:.3f}",
                     f"{v.direction} ({v.confidence})", "yes" if real.identical else "NO",
                     f"{_load(c.load_before)} → {_load(c.load_after)}"])
    return Section(f"Async vs sync scheduling on the real model ({model or 'SmolLM2-135M-Instruct'}), batch {batch}, "
                   f"{max_tokens} greedy tokens each",
                   ["torch threads", "sync tokens/s (best)", "sync tokens/s (median)", "async tokens/s (best)",
                    "async tokens/s (median)", "async ÷ sync (median of rounds)", "range over rounds", "verdict",
                    "identical greedy output", "load average (before → after)"], rows,
                   [f"{rounds} interleaved rounds after one warm-up, wall clock (the forward's thread and the "
                    "scheduler's thread overlap; a CPU clock would add them up); tokens/s = batch × tokens ÷ the "
                    "generate call (prefill included)",
                    "async: the forward and its sampling run on a worker thread, the next step is scheduled and the "
                    "previous one applied meanwhile",
                    "target: async ≥ 1.0× sync, identical greedy output",
                    f"load average: {load_average()}", f"cpu: {describe_cpu()}"])


def steady_decode_host(sizes: list[int], steps: int, arms: dict[str, dict] | None = None) -> None:
    """One JSON line per host-path arm and size: the host time of steady decode steps (wall and CPU, less
    the simulated runner's own time), on whatever labkit is importable. Self-contained: ``--against``
    runs its source. ``arms``: EngineConfig overrides by name (default: the engine as configured)."""
    import json
    import statistics
    import time

    from labkit import LLM, EngineConfig, SamplingParams

    for (arm, overrides), n in [(a, n) for a in (arms or {"default": {}}).items() for n in sizes]:
        config = EngineConfig(max_num_seqs=n, max_model_len=256, max_num_batched_tokens=max(1024, 8 * n), **overrides)
        engine = LLM(model="sim", config=config, model_profile="llama-3-8b", hardware="h100-sxm", progress=False).engine
        for i in range(n):
            engine.add_request([97 + i % 26] * 8, SamplingParams(max_tokens=steps + 6, ignore_eos=True))
        for _ in range(3):                      # the prefill step, then warm-up decodes
            engine.step()
        execute, runner_s = engine.runner.execute, [0.0]

        def timed(decision, execute=execute, runner_s=runner_s):
            t0 = time.perf_counter()
            logits = execute(decision)
            runner_s[0] = time.perf_counter() - t0
            return logits
        engine.runner.execute = timed
        walls, cpus, preps = [], [], []
        for _ in range(steps):
            c0, t0 = time.process_time(), time.perf_counter()
            engine.step()
            # The forward's input preparation is host work (the rungs count it); a checkout whose simulated
            # runner does not time it apart (no last_prepare_s) has it left out, as the stand-in is.
            prep = getattr(engine.runner, "last_prepare_s", 0.0)
            walls.append(time.perf_counter() - t0 - runner_s[0] + prep)
            cpus.append(time.process_time() - c0 - runner_s[0] + prep)
            preps.append(prep)
        best = min(range(steps), key=walls.__getitem__)
        print(json.dumps({"arm": arm, "n": n, "best_s": walls[best], "best_prep_s": preps[best],
                          "median_cpu_s": statistics.median(cpus)}), flush=True)


def _commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown commit"


def against(other: Path, sizes: list[int], steps: int, rounds: int, arms: dict[str, dict] = HOST_PATH_ARMS) -> Section:
    """``other`` (before) and this checkout (after), alternating processes, on every host-path arm; per
    side the best step of all rounds and the median of the rounds' median CPU times."""
    code = inspect.getsource(steady_decode_host) + f"\nsteady_decode_host({sizes!r}, {steps}, {arms!r})\n"
    got: dict[str, dict[tuple[str, int], list[dict]]] = {"before": defaultdict(list), "after": defaultdict(list)}
    for r in range(rounds):
        sides = [("before", other), ("after", REPO)]
        for label, tree in sides if r % 2 == 0 else sides[::-1]:
            env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
            done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"timing {tree} failed:\n{done.stderr[-2000:]}")
            for line in done.stdout.splitlines():
                d = json.loads(line)
                got[label][d["arm"], d["n"]].append(d)
    rows = []
    for arm in arms:
        for n in sizes:
            best = {side: min(got[side][arm, n], key=lambda x: x["best_s"]) for side in ("before", "after")}
            b, a = best["before"]["best_s"], best["after"]["best_s"]
            pb, pa = (best[side].get("best_prep_s", 0.0) for side in ("before", "after"))
            mb, ma = (statistics.median(x["median_cpu_s"] for x in got[side][arm, n]) for side in ("before", "after"))
            rows.append([arm, f"{n:,}", f"{1e6 * b:,.0f}", f"{1e6 * a:,.0f}", f"{1e6 * b / n:.2f}", f"{1e6 * a / n:.2f}",
                         f"{a / b:.2f}", f"{1e6 * pb:,.0f}", f"{1e6 * pa:,.0f}", f"{(a - pa) / (b - pb):.2f}",
                         f"{1e6 * mb:,.0f}", f"{1e6 * ma:,.0f}", f"{ma / mb:.2f}"])
    return Section(f"Host time per steady decode step, before ({other}, {_commit(other)}) vs after (this checkout, "
                   f"{_commit(REPO)})",
                   ["host path", "running requests", "before µs/step (best)", "after µs/step (best)",
                    "before µs per request", "after µs per request", "after ÷ before (best)",
                    "of it input prep, before µs", "after µs", "after ÷ before without input prep",
                    "before median CPU µs/step", "after median CPU µs/step", "after ÷ before (median CPU)"],
                   rows, [f"{rounds} rounds of alternating processes (order swapped each round), {steps} steps each; "
                          "host = step time less the simulated runner's own time (Llama-3-8B / H100 profile); the "
                          "forward's input preparation (list-built or persistent batch) is host time, as in the rungs",
                          f"load average: {load_average()}", f"cpu: {describe_cpu()}"])


def run(args: argparse.Namespace):
    sizes = SIZES["tiny" if args.tiny else "quick" if args.quick else "full"]
    if args.against is not None:
        steps, rounds = (3, 2) if args.tiny else (15, 4)
        yield against(Path(args.against).resolve(), sizes, steps, rounds)
        return
    switch = host_path_switch()
    steps, rounds = (5, 1) if args.tiny else (10, 2) if args.quick else (15, 3)   # cheap: the model is simulated
    before, after = before_after(sizes, switch, steps=steps, rounds=rounds)
    if switch is None:
        yield section("engine as built (no host-path optimisation switch in this EngineConfig)", before)
        return
    yield section(f"{switch.name}={switch.off!r}", before)
    yield section(f"{switch.name}={switch.on!r} (measured interleaved with the row above)", after)
    yield host_path_grid([1, 64] if args.tiny else [1, 64, TARGET_RUNNING, 1024], *((3, 1) if args.tiny else (20, 3)))
    yield real_model_async_section(args.model, [1] if args.tiny else [1, 2],
                                   *((2, 3, 2) if args.tiny else (16, 16, 3) if args.quick else (16, 32, 4)))
    remedy_sizes = [64] if args.tiny else [256, 1024] if args.quick else [256, 1024, 4096]
    yield from remedy_sections(remedy_sizes, *((3, 1) if args.tiny else (6, 2)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scheduler_overhead", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="up to 1,024 running requests")
    size.add_argument("--tiny", action="store_true", help="smoke mode: 1 and 64 running requests")
    p.add_argument("--against", default=None, metavar="DIR",
                   help="another labkit checkout to time against this one (before/after table)")
    p.add_argument("--threads", type=int, default=1,
                   help="accepted for bench's common flags (the real-model async section runs 1 and 2 threads)")
    p.add_argument("--model", default=None,
                   help="the real-model async section's model (default SmolLM2-135M-Instruct; the rest uses the sim)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Section]:
    return report("Host time per step vs concurrency (simulated accelerator)", "bench.scheduler_overhead", argv,
                  run(parse_args(argv)))


if __name__ == "__main__":
    main()
