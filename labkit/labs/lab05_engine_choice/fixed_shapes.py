"""Build for fixed shapes, or run any shape? TensorRT-LLM's idea measured on labkit's own decode step.

TensorRT-LLM's TensorRT backend compiles an engine ahead of time for maximum shapes (``max_batch_size``,
``max_seq_len``, ``max_num_tokens``) and tunes kernels per optimization profile; its PyTorch backend
captures CUDA graphs for a list of batch sizes and pads a batch up to the nearest one
(``enable_padding``). The analogue here, on the CPU the lab runs on:

    decode batch sizes (continuous batching):   3   5   8   16  13   2 ...
    fixed:    bucket = next of (1, 2, 4, 8, 16):   4   8   8   16  16   2    one graph per bucket,
              compiled once (torch.compile(dynamic=False)); padded rows are computed and thrown away
    dynamic:  one graph for every size (torch.compile(dynamic=True)), run at the exact size
    eager:    no build at all, exact size (labkit's default)

What is compiled is the dense half of each layer's decode step (``LlamaLayer.attention_output_and_mlp``:
O projection, residual, RMSNorm, SwiGLU) over ``num_layers`` layers with the default model's shapes;
the weights are random (the time of a matrix product does not depend on the values), and the
fixed arm's real rows are checked against eager's. Measured: CPU time per decode step (``measure.compare``,
interleaved rounds), the padding waste of the bucket set on the batch trace, the build time of each
arm, and the rebuild when the shape set changes (a batch larger than the largest bucket arrives).

Every ``torch.compile`` here runs with Inductor's on-disk graph cache off, so a build is a cold build
(what a first deployment pays), and under ``quiet_dynamo`` (dynamo's recompile warnings stay out of
the learner's output; the recompile limit is raised so each bucket keeps its own graph).
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from labkit.labs.common.measure import Comparison, compare, cpu_clock, measuring
from labkit.model.llama import LlamaLayer
from labkit.model.loader import read_model_config, resolve_model_dir
from labkit.model.model_config import ModelConfig

BUCKETS = (1, 2, 4, 8, 16)
_STEP_IDS = itertools.count()


# ------------------------------------------------------------------------- buckets and padding

def check_buckets(buckets: Sequence[int]) -> tuple[int, ...]:
    b = tuple(buckets)
    if not b or any(not isinstance(x, int) or x < 1 for x in b) or list(b) != sorted(set(b)):
        raise ValueError(f"buckets must be increasing positive integers, got {buckets!r}")
    return b


def bucket_for(batch: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket that holds ``batch`` rows (TensorRT-LLM's ``enable_padding`` rounding)."""
    b = check_buckets(buckets)
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if batch > b[-1]:
        raise ValueError(f"batch {batch} exceeds the largest bucket {b[-1]}: the shape set must be rebuilt")
    return next(x for x in b if x >= batch)


def padding_waste(batches: Sequence[int], buckets: Sequence[int] = BUCKETS) -> float:
    """Share of the rows the fixed arm computes that are padding: Σ(bucket − batch) / Σ bucket."""
    if not batches:
        raise ValueError("batches must not be empty")
    padded = [bucket_for(b, buckets) for b in batches]
    return (sum(padded) - sum(batches)) / sum(padded)


def batch_trace(num_steps: int, max_batch: int = 16, seed: int = 0, arrivals_per_step: float = 0.3,
                min_len: int = 4, max_len: int = 32) -> list[int]:
    """Decode batch sizes a continuous-batching engine sees: requests arrive at random (Bernoulli
    arrivals, up to two a step), each decodes for a random number of steps, at most ``max_batch`` run."""
    if num_steps < 1 or max_batch < 1:
        raise ValueError(f"num_steps and max_batch must be >= 1, got {num_steps!r}, {max_batch!r}")
    rng = random.Random(seed)
    running: list[int] = []
    waiting = 0
    trace = []
    while len(trace) < num_steps:
        waiting += sum(rng.random() < arrivals_per_step for _ in range(2))
        while waiting and len(running) < max_batch:
            running.append(rng.randint(min_len, max_len))
            waiting -= 1
        if not running:
            continue
        trace.append(len(running))
        running = [left - 1 for left in running if left > 1]
    return trace


# ------------------------------------------------------------------------------ the decode step

@contextmanager
def quiet_dynamo(recompile_limit: int = 64) -> Iterator[None]:
    """Dynamo and Inductor as this module uses them: no recompile warnings in the learner's output,
    a recompile limit above the number of buckets, and no on-disk graph cache (cold builds)."""
    import torch._dynamo
    import torch._inductor.config

    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with torch._dynamo.config.patch(recompile_limit=recompile_limit), \
                torch._inductor.config.patch(fx_graph_cache=False):
            yield
    finally:
        logger.setLevel(level)


def hide_dynamo_warnings() -> None:
    """For the whole kernel: dynamo's warnings (recompile limits, graph breaks) are for the engine's
    developers, not the learner; the lab reports builds and rebuilds itself, in numbers."""
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)


def default_config() -> ModelConfig:
    """The shapes of the lab's default model (SmolLM2-135M-Instruct)."""
    return read_model_config(resolve_model_dir(None, progress=False) / "config.json")


def dense_layers(cfg: ModelConfig, num_layers: int, seed: int = 0) -> list[LlamaLayer]:
    """``num_layers`` layers with ``cfg``'s shapes and random weights (fp32)."""
    g = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(num_layers):
        layer = LlamaLayer(cfg, torch.float32, "cpu")
        for p in layer.parameters():
            p.data.normal_(0.0, 0.02, generator=g)
        layers.append(layer)
    return layers


def _fresh_step() -> Callable:
    """A new code object per arm, so each arm's graphs sit in their own dynamo cache."""
    src = "def step(layer, x, attn):\n    return attention_output_and_mlp(layer, x, attn)\n"
    scope = {"attention_output_and_mlp": LlamaLayer.attention_output_and_mlp}
    exec(compile(src, f"<labkit.fixed_shapes.step.{next(_STEP_IDS)}>", "exec"), scope)
    return scope["step"]


@dataclass
class DecodeArm:
    """One way to run the dense decode step: ``run(batch)`` does one decode step of ``batch`` rows
    over every layer and returns the real rows' output [batch, hidden]."""

    name: str
    layers: list[LlamaLayer]
    fn: Callable
    buckets: tuple[int, ...] | None      # padded to these (fixed arm), or None: exact size
    x: torch.Tensor                      # [max rows, hidden] input buffer (rows beyond the batch: padding)
    attn: torch.Tensor                   # [max rows, heads x head_dim]

    def run(self, batch: int) -> torch.Tensor:
        rows = bucket_for(batch, self.buckets) if self.buckets else batch
        x, attn = self.x[:rows], self.attn[:rows]
        with torch.inference_mode():
            for layer in self.layers:
                x = self.fn(layer, x, attn)
        return x[:batch]

    def run_trace(self, trace: Sequence[int]) -> int:
        for b in trace:
            self.run(b)
        return len(trace)


def make_arm(name: str, layers: list[LlamaLayer], max_rows: int, buckets: Sequence[int] | None = None,
             seed: int = 1) -> DecodeArm:
    """``name`` is "eager", "dynamic" (torch.compile(dynamic=True)) or "fixed" (torch.compile(dynamic=False),
    padded to ``buckets``)."""
    if name not in ("eager", "dynamic", "fixed"):
        raise ValueError(f"name must be 'eager', 'dynamic' or 'fixed', got {name!r}")
    if name == "fixed" and not buckets:
        raise ValueError("the fixed arm needs buckets")
    layer = layers[0]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(max_rows, layer.o_proj.shape[0], generator=g)
    attn = torch.randn(max_rows, layer.o_proj.shape[1], generator=g)
    fn = {"eager": LlamaLayer.attention_output_and_mlp,
          "dynamic": torch.compile(_fresh_step(), dynamic=True),
          "fixed": torch.compile(_fresh_step(), dynamic=False)}[name]
    return DecodeArm(name, layers, fn, check_buckets(buckets) if name == "fixed" else None, x, attn)


def build(arm: DecodeArm, shapes: Sequence[int]) -> float:
    """Compile ``arm`` for ``shapes`` (first calls) and return the CPU seconds it took."""
    clock = cpu_clock()
    start = clock()
    for b in shapes:
        arm.run(b)
    return clock() - start


# ---------------------------------------------------------------------------------- the experiment

@dataclass(frozen=True)
class FixedShapeResult:
    buckets: tuple[int, ...]
    trace: tuple[int, ...]
    num_layers: int
    padding_waste: float          # share of the fixed arm's rows that are padding, on this trace
    build_s: dict[str, float]     # CPU s to build each arm before serving (fixed: every bucket)
    comparison: Comparison        # per-step CPU time, eager / dynamic / fixed, interleaved rounds
    new_batch: int                # a batch larger than the largest bucket (the shape set changes)
    rebuild_s: dict[str, float]   # CPU s of the first step at new_batch (fixed: compile one more bucket)
    max_abs_diff: float           # fixed arm's real rows vs eager's, over the trace's sizes

    def step_ms(self, arm: str) -> float:
        return 1e3 * self.comparison.arms[arm].best


def run_fixed_shapes(cfg: ModelConfig, num_layers: int, num_steps: int, rounds: int = 3,
                     buckets: Sequence[int] = BUCKETS, seed: int = 0, lab: str | None = None) -> FixedShapeResult:
    """Build the three arms, time them on one batch trace (CPU time per decode step), then change the
    shape set: one batch of twice the largest bucket."""
    b = check_buckets(buckets)
    trace = batch_trace(num_steps, max_batch=b[-1], seed=seed)
    new_batch = 2 * b[-1]
    with measuring(), quiet_dynamo():
        layers = dense_layers(cfg, num_layers, seed)
        arms = {name: make_arm(name, layers, new_batch, b) for name in ("eager", "dynamic", "fixed")}
        build_s = {"eager": 0.0, "dynamic": build(arms["dynamic"], sorted(set(trace))),
                   "fixed": build(arms["fixed"], b)}
        with torch.inference_mode():
            diff = max(float((arms["fixed"].run(n) - arms["eager"].run(n)).abs().max()) for n in sorted(set(trace)))
        comparison = compare({name: (lambda a=arm: a.run_trace(trace)) for name, arm in arms.items()},
                             baseline="eager", rounds=rounds, warmup=1, quantity="time",
                             work=lambda name, steps: steps, id="fixed_shapes",
                             claim=("解码一步的 CPU 时间", "CPU time per decode step"), lab=lab)
        arms["fixed"].buckets = b + (new_batch,)      # the shape set changes: one more bucket
        rebuild_s = {name: build(arm, [new_batch]) for name, arm in arms.items()}
    return FixedShapeResult(b, tuple(trace), num_layers, padding_waste(trace, b), build_s, comparison,
                            new_batch, rebuild_s, diff)
