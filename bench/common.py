"""What every benchmark shares: markdown tables, interleaved timing, threads, the Hugging Face baseline.

Rules the benchmarks follow, because this machine is small and shared:

- Compare inside one process, round by round, alternating who goes first (A B, B A, A B, ...), and
  report the median of the per-round values. A neighbour's load then hits both sides of a ratio.
- Warm up before timing (first calls allocate, fill caches and pick kernels).
- Default to one intra-op thread. With two OpenMP threads on two shared cores, every barrier waits
  for the slower thread; a busy neighbour then stalls each matrix multiply. Measured here: a
  decode-sized weight sweep took 0.05 s on 1 thread and 0.3-1.0 s on 2 threads while colleagues
  ran tests, against ~0.05 s on 2 threads when the machine was idle. ``--threads 2`` is there for
  an idle machine.
- With one thread, time on the process's CPU clock (``time.process_time``): it counts the work
  this process did and not the slices the scheduler gave to neighbours (measured here at a load
  average of 8-10 on 2 cores: wall time 2-3x the CPU time, and swinging from run to run). On an
  idle machine the two agree. With more threads the CPU clock sums all threads, so wall time is used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from labkit.kernels.cpu_features import describe_cpu

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # ``python bench/gpu.py`` from a checkout, uninstalled
    sys.path.insert(0, str(REPO))


@dataclass
class Section:
    """One printed table: a title, column headers, rows of cells and notes under it."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def markdown(section: Section) -> str:
    lines = [f"## {section.title}", "", "| " + " | ".join(section.headers) + " |",
             "|" + "|".join("---" for _ in section.headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in section.rows]
    lines += [""] + [f"- {note}" for note in section.notes]
    return "\n".join(lines) + "\n"


def command_line(module: str, argv: list[str] | None) -> str:
    """The exact command that reproduces this run, for the report."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", "-m", module, *args])


# `make bench` sets this: each report is also written to <dir>/<CPU kind>/<module>.md, from which
# scripts/performance_page.py regenerates docs/performance.md (one current table set per CPU kind).
RESULTS_ENV = "LABKIT_BENCH_RESULTS"


def cpu_kind_slug(cpu_line: str) -> str:
    """A folder name for a CPU line: ``AMD EPYC; torch ISA AVX512; no AMX; AVX512_BF16`` ->
    ``amd-epyc-avx512-no-amx-avx512-bf16``."""
    words = cpu_line.replace("torch ISA", "").replace("(R)", "").replace("(TM)", "").lower()
    return "-".join(w for w in "".join(c if c.isalnum() else " " for c in words).split() if w) or "unknown-cpu"


def report(title: str, module: str, argv: list[str] | None, sections, saved_as: str | None = None) -> list:
    """Print a benchmark's markdown report: title, the command that reproduces it, then each section as it
    is produced (``sections`` may be a generator), flushing so long runs show progress. Returns the sections.
    With `RESULTS_ENV` set, the report (with its date) is also saved under that folder, by CPU kind, as
    ``<saved_as or the module's last name>.md``."""
    head = f"# {title}\n\ncommand: `{command_line(module, argv)}`\n"
    print(head, flush=True)
    done, parts = [], [head]
    for section in sections:
        text = markdown(section)
        print(text, flush=True)
        done.append(section)
        parts.append(text)
    folder = os.environ.get(RESULTS_ENV)
    if folder:
        from labkit.kernels.cpu_features import describe_cpu

        cpu = describe_cpu()
        path = Path(folder) / cpu_kind_slug(cpu) / f"{saved_as or module.rsplit('.', 1)[-1]}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        stamp = f"measured {time.strftime('%Y-%m-%d')} on: {cpu}\n\n"
        path.write_text(parts[0] + "\n" + stamp + "\n".join(parts[1:]), encoding="utf-8")
    return done


# ----------------------------------------------------------------------------- timing

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = {"name": "wall", "fn": time.perf_counter}


def set_clock(name: str, threads: int) -> str:
    """Pick the clock every ``now()`` reads: "cpu", "wall", or "auto" (cpu with one thread)."""
    if name == "auto":
        name = "cpu" if threads == 1 else "wall"
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)} or 'auto', got {name!r}")
    _clock.update(name=name, fn=CLOCKS[name])
    return name


def clock_name() -> str:
    return _clock["name"]


def now() -> float:
    return _clock["fn"]()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """(seconds on the chosen clock, result) of one call."""
    t0 = now()
    result = fn()
    return now() - t0, result


def token_times(engine) -> tuple[list[float], Callable]:
    """A list that gets ``now()`` each time the engine appends tokens, and the subscriber (to
    unsubscribe). One entry per engine step that produced tokens."""
    from labkit.events import TokensAppended

    times: list[float] = []
    return times, engine.hooks.subscribe(lambda event: times.append(now()), TokensAppended)


def mean_gap(times: list[float]) -> float:
    """Mean time between consecutive entries: decode time per step, the first (prefill) excluded."""
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) >= 2 else float("nan")


def interleaved(runs: dict[str, Callable[[], object]], rounds: int, start: int = 0) -> list[dict]:
    """Call every run once per round; the order reverses each round (A B C, C B A, ...).

    The result is one ``{name: what the run returned}`` per round, so ratios can be taken inside a
    round, where both sides saw the same machine load. ``start`` numbers the first round (its
    parity picks the first order), for callers that build rounds one at a time.
    """
    names = list(runs)
    results = []
    for r in range(start, start + rounds):
        order = names if r % 2 == 0 else names[::-1]
        results.append({name: runs[name]() for name in order})
    return results


# ----------------------------------------------------------------------------- environment

CPU_DTYPES = ("float32", "bfloat16")


def add_dtypes_option(parser, default: str, help: str) -> None:
    """``--dtypes a,b``: parsed into a list of names from CPU_DTYPES (an unknown name is a usage error)."""
    def dtypes(text: str) -> list[str]:
        names = [d for d in text.split(",") if d]
        if not names or set(names) - set(CPU_DTYPES):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(CPU_DTYPES)}, got {text!r}")
        return names

    parser.add_argument("--dtypes", type=dtypes, default=dtypes(default), help=help)


def set_threads(threads: int | None) -> int:
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def load_average() -> str:
    """The 1-minute load average and the core count: how busy the shared machine was."""
    try:
        one, _, _ = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} on {os.cpu_count()} cores"


def environment_rows(threads: int) -> list[list[str]]:
    import platform

    import transformers

    return [["python", platform.python_version()], ["torch", torch.__version__],
            ["transformers", transformers.__version__], ["intra-op threads", str(threads)],
            ["clock", f"{clock_name()} ({'time.process_time' if clock_name() == 'cpu' else 'time.perf_counter'})"],
            ["load average at start", load_average()], ["cpu", describe_cpu()]]


def read_kernels(x: torch.Tensor) -> dict:
    """Ways to read every element of ``x`` (float32, a multiple of 1,024 elements) exactly once."""
    rows = x.view(-1, 1024)
    col, row = torch.ones(1024), torch.ones(rows.shape[0])
    return {"sum": x.sum, "matrix x vector (mv)": lambda: torch.mv(rows, col),
            "vector x matrix": lambda: row @ rows}


def measure_read_bandwidth(num_bytes: int, repeats: int = 5, detail: dict | None = None) -> float:
    """Bytes per second for reading a float32 tensor of ``num_bytes`` once: the best of a few read
    kernels (each its median over ``repeats``).

    Each kernel reads every byte once and does one multiply-add per element at most, far below the
    core's compute rate, so the fastest is the memory read bandwidth this process gets with its threads.
    One kernel alone can under-measure it: on one thread of an AVX-512 Xeon ``torch.sum`` read 12.8 GB/s
    where ``torch.mv`` (several accumulators) read 15.3 GB/s, less than the model's own weight sweep
    reached, which would overstate every "% of roofline". The tensor is as large as the
    model's weights, far beyond the caches, like a decode step's weight sweep. ``detail`` (a dict), if
    given, receives each kernel's bytes per second.
    """
    x = torch.ones(max(num_bytes // 4096, 1) * 1024, dtype=torch.float32)
    speeds = {}
    for name, kernel in read_kernels(x).items():
        kernel()
        speeds[name] = x.numel() * 4 / median([timed(kernel)[0] for _ in range(repeats)])
    if detail is not None:
        detail.update(speeds)
    return max(speeds.values())


# ----------------------------------------------------------------------------- baseline model

def hf_model(model_dir: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """The same weights as ``transformers``' LlamaForCausalLM, SDPA attention, no EOS stop (the
    benchmarks compare fixed token counts, like ``SamplingParams(ignore_eos=True)``)."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="sdpa")
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = pad_token_id(model_dir)
    return model.to(device).eval()


def pad_token_id(model_dir: Path) -> int:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    pad = cfg.get("pad_token_id", cfg.get("eos_token_id", 0))
    return pad[0] if isinstance(pad, list) else int(pad or 0)


def left_padded(prompts: list[list[int]], pad_id: int, device: str = "cpu"):
    """(input_ids, attention_mask) for ``generate``: pads on the left, mask 0 there.

    The mask must be explicit: SmolLM2's pad id equals <|im_end|>, which every chat prompt contains,
    so ``generate`` cannot infer padding from the ids.
    """
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


class TokenClock:
    """A ``generate`` streamer that only notes (``now()``) when each new token arrives (batch 1).

    ``generate`` calls ``put`` once with the prompt, then once per new token.
    """

    def __init__(self):
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if self._prompt_seen:
            self.times.append(now())
        self._prompt_seen = True

    def end(self) -> None:
        pass


# ----------------------------------------------------------------------------- tiny model

def tiny_model_dir(path: Path, num_layers: int = 2, hidden: int = 64) -> Path:
    """A randomly initialised Llama with the default model's tokenizer, for smoke runs in seconds.

    Its outputs are meaningless; it only exercises the benchmark code paths.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from labkit.model.loader import resolve_model_dir

    path = Path(path)
    if (path / "config.json").is_file():
        return path
    source = resolve_model_dir(None, progress=False)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=hidden // 4, max_position_embeddings=1024, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2, rope_theta=10000.0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy(source / name, path / name)
    return path
