"""A decode step with the weights mapped from a class's shared cache against one with its own copy.

    python -m bench.shared_weights                 # batch 1 and 16, the pack on a huge-page tmpfs (root)
    python -m bench.shared_weights --on-disk       # the pack in a disk file's page cache (4 KiB pages)

One process builds two engines on the default model: "own copy" reads the weights into this process's
memory (in 2 MiB pages where Linux offers them), "shared pack" maps the weight pack that
``labkit.model.shared_cache.prepare`` writes for a class (a temporary cache here). Both use the same
product forms. Rounds alternate which goes first; each round times ``--steps`` decode steps of each on
the process CPU clock (one thread), and the table gives the median ms per step and the median of the
per-round ratios. It also checks that the two engines produced the same tokens.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from bench.common import (
    Section,
    environment_rows,
    interleaved,
    load_average,
    median,
    now,
    report,
    set_clock,
    set_threads,
)


class Arm:
    """One engine and a fixed batch of greedy requests it decodes from a prefilled start."""

    def __init__(self, batch: int, steps: int):
        from labkit import LLM, EngineConfig
        from labkit.traces import load_prompts

        self.llm = LLM(config=EngineConfig(device="cpu", dtype="float32", max_num_seqs=batch), progress=False)
        chat = [self.llm.tokenizer.encode_prompt(p) for p in load_prompts("chat", "heldout")]
        self.prompts = [chat[i % len(chat)] for i in range(batch)]
        self.steps = steps
        self.tokens: list[list[int]] = []

    def run(self) -> float:
        """Seconds (the benchmark's clock: process CPU time) per decode step over ``steps`` steps (after the prefill and one warm step)."""
        from labkit import SamplingParams

        engine = self.llm.engine
        ids = [engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=self.steps + 2, ignore_eos=True))
               for p in self.prompts]
        engine.step()
        engine.step()
        t0 = now()
        for _ in range(self.steps):
            engine.step()
        elapsed = now() - t0
        while engine.has_unfinished_requests():
            engine.step()
        self.tokens = [list(engine.get_request(i).output_token_ids) for i in ids]
        for i in ids:
            engine.release(i)
        return elapsed / self.steps


def run(args: argparse.Namespace):
    from labkit.model import shared_cache, weight_pack

    threads = set_threads(args.threads)
    clock = set_clock("auto", threads)
    yield Section("Environment", ["", ""], environment_rows(threads))
    with tempfile.TemporaryDirectory(prefix="labkit-shared-bench-") as tmp:
        root = Path(tmp) / "shared"
        packs = shared_cache.prepare(root, progress=False, in_memory=not args.on_disk, tune=False)
        try:
            rows, notes = [], []
            for batch in args.batch:
                os.environ.pop(shared_cache.ENV, None)
                own = Arm(batch, args.steps)
                os.environ[shared_cache.ENV] = str(root)
                try:
                    shared = Arm(batch, args.steps)
                    where = shared_cache.describe()
                finally:
                    os.environ.pop(shared_cache.ENV, None)
                mapped = weight_pack.mapped_from(shared.llm.engine.runner.model.layers[0].qkv_proj)
                if mapped is None or not mapped.startswith(str(packs)):
                    raise RuntimeError("the shared engine's weights are not mapped from the pack")
                rounds = interleaved({"own": own.run, "shared": shared.run}, args.rounds)
                same = own.tokens == shared.tokens
                ratio = median([r["shared"] / r["own"] for r in rounds])
                rows.append([str(batch), f"{median([r['own'] for r in rounds]) * 1e3:.2f}",
                             f"{median([r['shared'] for r in rounds]) * 1e3:.2f}", f"{ratio:.3f}",
                             "yes" if same else "NO"])
                del own, shared
            notes.append(f"shared pack: {where}")
            notes.append(f"{args.steps} decode steps per round, {args.rounds} rounds alternating the order; "
                         f"{clock} clock, {threads} thread(s); load average now: {load_average()}")
            yield Section("Decode step: weights mapped from the class's shared pack vs the process's own copy",
                          ["batch", "own copy, ms/step", "shared pack, ms/step", "shared / own (median of rounds)",
                           "same tokens"], rows, notes)
        finally:
            if os.path.ismount(packs):
                subprocess.run(["umount", "--lazy", str(packs)], check=False)   # freed when the last mapping goes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=lambda s: [int(b) for b in s.split(",")], default=[1, 16],
                   help="comma-separated batch sizes (default 1,16)")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--on-disk", action="store_true", help="keep the pack in a disk file (no huge-page tmpfs)")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 3, 16
    if min(args.batch) < 1 or args.steps < 1 or args.rounds < 1:
        p.error("--batch, --steps and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    return report("Shared weights for a class: a decode step's speed", "bench.shared_weights", argv,
                  run(parse_args(argv)))


if __name__ == "__main__":
    main()
