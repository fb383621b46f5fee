"""Where one decode step's time goes: ms per step by stage, process CPU clock, one thread.

    python -m bench.decode_profile                 # batch 1, 24 steps x 3 rounds (under a minute)
    python -m bench.decode_profile --batch 16
    python -m bench.decode_profile --batch 16 --dtype bfloat16
    python -m bench.decode_profile --weights q4_1  # the GGUF's 4-bit codes (the products' glue shows in "layer matmuls")

Each stage of labkit's forward is timed by wrapping the function that computes it (the layer
matmuls, the LM head, RMSNorm, SwiGLU, RoPE, the KV write, the paged attention); "other" is the rest
of the forward (residual adds, views, Python); "outside the forward" is the engine around it
(scheduler, input tensors, sampler, events). The wrappers cost about a microsecond a call, so the
stages add up to a little more than the plain step, which is timed separately without them.

A third arm runs the same steps with every few-row matmul replaced by the output it gave at its
first call (no weight is read): what the non-matmul work costs when the weight stream does not
evict it from the caches. The difference between that and the timed arm's non-matmul stages is
the price of running small ops between matrix sweeps (cold caches), which fewer ops reduce.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

from bench.common import Section, environment_rows, load_average, median, report, set_clock, set_threads

STAGES = ("whole layer (one C call)", "layer matmuls", "LM head matmul", "RMSNorm (with the residual add before it)", "SwiGLU (silu(gate) x up)",
          "RoPE", "KV write", "RoPE + KV write (one C call)", "paged attention",
          "other (residual adds, views, Python)", "outside the forward (engine)")
NORM, OTHER = STAGES[3], STAGES[9]
NAMED = STAGES[:9]      # timed directly; "other" and "outside" are what is left


class Profiler:
    """Runs batch-``batch`` decode steps (fp32 or bf16) and times them, plain, by stage, or with matmuls stubbed."""

    def __init__(self, batch: int, model: str | None = None, dtype: str = "float32", weights: str = "dense"):
        from labkit import LLM, EngineConfig
        from labkit.traces import load_prompts

        self.llm = LLM(model=model, config=EngineConfig(device="cpu", dtype=dtype, weights=weights, max_num_seqs=batch,
                                           max_num_batched_tokens=8192), progress=False)
        self.engine = self.llm.engine
        chat, code = load_prompts("chat", "heldout"), load_prompts("code", "heldout")
        singles = [self.llm.tokenizer.encode_prompt(p) for pair in zip(chat, code) for p in pair]
        self.prompts = [singles[i % len(singles)] for i in range(batch)]
        self.acc: dict[str, float] = {}
        self.timed_acc: dict[str, float] = {}

    def _steps(self, steps: int) -> float:
        """Prefill, one warm step, then ``steps`` timed decode steps: CPU seconds per step."""
        from labkit import SamplingParams

        for p in self.prompts:
            self.engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=steps + 3, ignore_eos=True))
        self.engine.step()
        self.engine.step()
        self.acc.clear()
        t0 = time.process_time()
        for _ in range(steps):
            self.engine.step()
        elapsed = time.process_time() - t0
        self.timed_acc = dict(self.acc)
        while self.engine.has_unfinished_requests():
            self.engine.step()
        return elapsed / steps

    def plain(self, steps: int) -> dict[str, float]:
        return {"step": self._steps(steps)}

    @contextmanager
    def _patched(self, stub: bool):
        import torch

        from labkit.kernels import native
        from labkit.kernels.ops import native_ops, torch_ops
        from labkit.kernels.ops.native_ops import NativeOps
        from labkit.model import llama

        model = self.engine.runner.model
        backend = self.engine.runner.backend
        lm_head = model.lm_head
        acc = self.acc
        # PyTorch's ops are timed where every caller reaches them (torch_ops' functions: TorchOps' methods
        # and NativeOps' fallbacks call them by module name); the C ones as NativeOps' methods
        saved = [*((torch_ops, name, getattr(torch_ops, name)) for name in ("linear", "rms_norm", "add_rms_norm", "swiglu")),
                 *((NativeOps, name, getattr(NativeOps, name))
                   for name in ("linear", "rms_norm", "add_rms_norm", "swiglu", "rope_write_kv", "decode_layer")),
                 (llama.Rotary, "forward", llama.Rotary.forward), (backend, "write_kv", backend.write_kv),
                 (backend, "paged_attention", backend.paged_attention),
                 (native, "rope_write_kv", native.rope_write_kv),
                 (self.engine.runner, "execute", self.engine.runner.execute)]
        cached: dict[tuple, object] = {}
        depth = [0]

        def timed(stage, fn, nests=True):
            def wrapper(*args, **kwargs):
                if depth[0] and nests:          # inside another stage (add_rms_norm's own rms_norm)
                    return fn(*args, **kwargs)
                depth[0] += nests
                t0 = time.process_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    acc[stage] = acc.get(stage, 0.0) + time.process_time() - t0
                    depth[0] -= nests
            return wrapper

        def timed_linear(real_linear):
            def linear(*args):
                if depth[0]:                    # NativeOps.linear's own fallback to torch_ops.linear
                    return real_linear(*args)
                x, weight = args[-2:]
                stage = "LM head matmul" if weight is lm_head else "layer matmuls"
                if stub and x.shape[0] <= 16:
                    key = (x.shape[0], tuple(weight.shape) if isinstance(weight, torch.Tensor) and weight is not lm_head
                           else id(weight))
                    if key not in cached:
                        depth[0] += 1
                        try:
                            cached[key] = real_linear(*args)
                        finally:
                            depth[0] -= 1
                    return cached[key]
                depth[0] += 1
                t0 = time.process_time()
                try:
                    return real_linear(*args)
                finally:
                    acc[stage] = acc.get(stage, 0.0) + time.process_time() - t0
                    depth[0] -= 1
            return linear

        layer_call = native_ops.DECODE_LAYER_CALL
        # the stubbed arm runs the ops one by one: products inside one C call cannot be stubbed
        native_ops.DECODE_LAYER_CALL = layer_call and not stub
        torch_ops.linear = timed_linear(torch_ops.linear)
        NativeOps.linear = timed_linear(NativeOps.linear)
        torch_ops.rms_norm = timed(NORM, torch_ops.rms_norm)
        torch_ops.add_rms_norm = timed(NORM, torch_ops.add_rms_norm)
        torch_ops.swiglu = timed("SwiGLU (silu(gate) x up)", torch_ops.swiglu)
        # the C forms, called through NativeOps on the CPU
        NativeOps.rms_norm = timed(NORM, NativeOps.rms_norm)
        NativeOps.add_rms_norm = timed(NORM, NativeOps.add_rms_norm)
        NativeOps.swiglu = timed("SwiGLU (silu(gate) x up)", NativeOps.swiglu)
        NativeOps.rope_write_kv = timed("RoPE + KV write (one C call)", NativeOps.rope_write_kv)
        NativeOps.decode_layer = timed("whole layer (one C call)", NativeOps.decode_layer)
        llama.Rotary.forward = timed("RoPE", llama.Rotary.forward)
        backend.write_kv = timed("KV write", backend.write_kv)
        native.rope_write_kv = timed("RoPE + KV write (one C call)", native.rope_write_kv)
        backend.paged_attention = timed("paged attention", backend.paged_attention)
        self.engine.runner.execute = timed("forward", self.engine.runner.execute, nests=False)
        try:
            yield
        finally:
            native_ops.DECODE_LAYER_CALL = layer_call
            for owner, name, value in saved:
                if owner is self.engine.runner:
                    delattr(owner, name)        # back to the class's method
                else:
                    setattr(owner, name, value)

    def staged(self, steps: int, stub: bool = False) -> dict[str, float]:
        with self._patched(stub):
            step = self._steps(steps)
        acc = {k: v / steps for k, v in self.timed_acc.items()}
        named = sum(acc.get(s, 0.0) for s in NAMED)
        acc[OTHER] = acc.get("forward", 0.0) - named
        acc["outside the forward (engine)"] = step - acc.get("forward", 0.0)
        acc["step"] = step
        return acc


def run(args) -> list[Section]:
    threads = set_threads(1)
    set_clock("cpu", threads)
    env = Section("Environment", ["item", "value"], environment_rows(threads))
    from labkit.kernels.ops import native_ops
    native_ops.DECODE_LAYER_CALL = not args.per_op
    env.rows.append(["decode layers", "op by op (--per-op)" if args.per_op else
                     "one C call each where the step allows (NativeOps.decode_layer)"])
    prof = Profiler(args.batch, args.model, args.dtype, args.weights)
    from labkit.kernels import linear_forms
    if args.weights == "q4_1":
        env.rows.append(["weights", "q4_1: the GGUF's Q4_1 codes (bf16 activations inside the products: PyTorch's int4 "
                                    "kernel op by op, labkit's with its bits inside the whole-layer call), the LM head "
                                    "on its Q8_0 codes in fp32 (native.q8_rows)"])
    if args.dtype == "float32":
        busy = " (timed while busy: provisional)" if linear_forms.timed_while_busy("float32", threads) else ""
        env.rows.append(["labkit fp32 linear forms", linear_forms.describe(threads) + busy])
    else:
        env.rows.append(["labkit bf16 products", linear_forms.bf16_report(threads)])
    prof.plain(4)
    if args.weights == "q4_1":
        from labkit.model import quant
        env.rows.append(["labkit int4 products (row-invariance gate)", quant.int4_report()])
    rounds: list[dict] = []
    for r in range(args.rounds):
        arms = [("plain", lambda: prof.plain(args.steps)), ("staged", lambda: prof.staged(args.steps)),
                ("stubbed", lambda: prof.staged(args.steps, stub=True))]
        rounds.append({name: fn() for name, fn in (arms if r % 2 == 0 else arms[::-1])})
    ms = lambda arm, key: f"{median([r[arm].get(key, 0.0) for r in rounds]) * 1e3:.2f}"  # noqa: E731
    rows = [[s, ms("staged", s), ms("stubbed", s) if "matmul" not in s else "(stubbed)"] for s in STAGES]
    rows.append(["step, with the stage timers", ms("staged", "step"), ms("stubbed", "step")])
    rows.append(["step, plain (no timers)", ms("plain", "step"), ""])
    kind = "q4_1" if args.weights == "q4_1" else "fp32" if args.dtype == "float32" else "bf16"
    return [env, Section(f"Batch-{args.batch} {kind} decode step, ms per step by stage (median of {args.rounds} rounds)",
                         ["stage", "ms per step", "ms per step, matmuls stubbed (warm caches)"], rows,
                         [f"{args.steps} decode steps per round after a prefill and a warm step; one held-out "
                          f"prompt per sequence; process CPU clock, one thread; load average now: {load_average()}",
                          "per token: divide by the batch size",
                          "the stubbed arm always runs the ops one by one (products inside one C call cannot "
                          "be stubbed)"])]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--model", default=None, help="model directory (default: the lab model)")
    p.add_argument("--weights", choices=("dense", "q4_1"), default="dense",
                   help="q4_1: the GGUF's own 4-bit codes (with --dtype float32)")
    p.add_argument("--per-op", action="store_true",
                   help="run each layer op by op (no whole-layer C call), to see where its time goes")
    args = p.parse_args(argv)
    if args.weights == "q4_1" and args.dtype != "float32":
        p.error("--weights q4_1 runs with --dtype float32 (its residual stream)")
    for name in ("batch", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> list[Section]:
    return report("Where an fp32 decode step's time goes", "bench.decode_profile", argv, run(parse_args(argv)))


if __name__ == "__main__":
    main()
