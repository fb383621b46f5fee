"""Workloads for the labs: prompt sets, synthetic heavy-tailed traces and the Azure LLM trace.

A trace is a list of ``TraceRequest`` (arrival time, prompt length, output length). Three sources:

- ``synthetic_trace``   log-normal lengths with knobs a lab can turn (seeded);
- ``load_azure_trace``  the real Azure LLM inference trace 2023 (not shipped, read from ../shared);
- ``azure_like_trace``  resampled from statistics derived from that trace (shipped, works offline).

``scale_trace`` shrinks any of them to lengths a CPU can serve while keeping the distribution's shape.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
AZURE_DEFAULT_DIR = REPO_ROOT.parent / "shared" / "data" / "azure-llm-2023"
PROMPT_SETS = ("chat", "code", "copy", "json")
SPLITS = ("train", "heldout")
AZURE_KINDS = ("conv", "code")
AZURE_STATS_PATH = DATA_DIR / "traces" / "azure_2023_stats.json"
AZURE_CITATION = ('Patel et al., "Splitwise: Efficient generative LLM inference using phase '
                  'splitting", ISCA 2024')
_AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


@dataclass(frozen=True)
class TraceRequest:
    """One request of a workload. ``arrival_s`` counts from the trace's first request."""

    arrival_s: float
    prompt_len: int
    output_len: int
    prompt: str | None = None


class LogNormalLengths(NamedTuple):
    """Token-length distribution: log-normal with this ``median`` and ``sigma``, clipped to
    [``min``, ``max``]. A plain tuple ``(median, sigma, min, max)`` works wherever this is asked for."""

    median: float
    sigma: float
    min: int
    max: int


# ---------------------------------------------------------------------------------------- prompts

def load_prompts(name: str, split: str | None = None) -> list[str]:
    """Prompts of set ``name`` ("chat", "code", "copy" or "json"); ``split`` "train", "heldout" or None (all).

    chat is in-domain traffic for the draft model, code and json (strict format, fixed keys) are
    mismatched traffic, copy repeats much of its prompt in the answer (where n-gram prompt lookup
    shines). See data/prompts/README.md.
    """
    _check_choice("name", name, PROMPT_SETS)
    if split is not None:
        _check_choice("split", split, SPLITS)
    records = _read_jsonl(_require_data_file(DATA_DIR / "prompts" / f"{name}.jsonl"))
    return [r["prompt"] for r in records if split is None or r["split"] == split]


def _require_data_file(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: labkit reads its data from the repository's data/ folder "
            f"({DATA_DIR}); use a clone of the repository or an editable install (pip install -e .)")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -------------------------------------------------------------------------------------- synthetic

def synthetic_trace(num_requests: int, seed: int = 0, rate: float | None = None,
                    prompt_len: tuple = LogNormalLengths(48, 1.0, 4, 512),
                    output_len: tuple = LogNormalLengths(32, 1.0, 2, 256)) -> list[TraceRequest]:
    """A seeded trace with heavy-tailed (log-normal, clipped) prompt and output lengths.

    Why log-normal: real request lengths are skewed — most requests are short, a few are very long
    (ShareGPT, the Azure 2023 trace). That tail is what makes max-length KV reservation wasteful and
    static batching idle, so a trace of equal lengths would hide the effects the labs measure. With
    L = median · exp(sigma · Z), Z ~ N(0, 1), the ratio P99/P50 = exp(2.326 · sigma) (about 10x at
    sigma = 1), one knob for "how heavy the tail is".

    ``rate`` None puts every request at t = 0 (an offline batch); otherwise arrivals form a Poisson
    process with ``rate`` requests per second (exponential gaps, mean 1/rate), the first at t = 0.
    """
    _check_count("num_requests", num_requests)
    rng = np.random.default_rng(seed)
    prompts = _sample_lognormal(rng, num_requests, LogNormalLengths(*prompt_len), "prompt_len")
    outputs = _sample_lognormal(rng, num_requests, LogNormalLengths(*output_len), "output_len")
    return _build_trace(_arrival_times(rng, num_requests, rate), prompts, outputs)


def _sample_lognormal(rng: np.random.Generator, n: int, dist: LogNormalLengths,
                      name: str) -> np.ndarray:
    if dist.median <= 0 or dist.sigma < 0:
        raise ValueError(f"{name} needs median > 0 and sigma >= 0, got {tuple(dist)}")
    if not 1 <= dist.min <= dist.max:
        raise ValueError(f"{name} needs 1 <= min <= max, got {tuple(dist)}")
    lengths = rng.lognormal(mean=np.log(dist.median), sigma=dist.sigma, size=n)
    return np.clip(np.rint(lengths), dist.min, dist.max).astype(int)


def _arrival_times(rng: np.random.Generator, n: int, rate: float | None) -> np.ndarray:
    if rate is None:
        return np.zeros(n)
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s or None, got {rate!r}")
    gaps = rng.exponential(1.0 / rate, size=n)
    return np.cumsum(gaps) - gaps[0]


def _build_trace(arrivals, prompt_lens, output_lens) -> list[TraceRequest]:
    return [TraceRequest(float(t), int(p), int(o))
            for t, p, o in zip(arrivals, prompt_lens, output_lens)]


# ----------------------------------------------------------------------------------- azure (real)

def load_azure_trace(kind: str = "conv", path: str | os.PathLike | None = None,
                     limit: int | None = None,
                     max_total_tokens: int | None = None) -> list[TraceRequest]:
    """Read the Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    ``kind`` "conv" (conversation service) or "code" (coding assistant). Requests whose
    prompt + output exceeds ``max_total_tokens`` are dropped first, then the first ``limit`` are kept;
    arrival times count from the first kept request, so the trace starts at t = 0.
    The file is looked up at ``path``, else in ``$LABKIT_AZURE_TRACE_DIR``, else in
    ../shared/data/azure-llm-2023 next to the repository. Data: CC-BY 4.0, Patel et al., "Splitwise",
    ISCA 2024.
    """
    _check_choice("kind", kind, AZURE_KINDS)
    for name, value in (("limit", limit), ("max_total_tokens", max_total_tokens)):
        if value is not None:
            _check_count(name, value)
    rows = _read_azure_rows(_azure_path(kind, path))
    if max_total_tokens is not None:
        rows = [r for r in rows if r[1] + r[2] <= max_total_tokens]
    rows = rows[:limit] if limit is not None else rows
    t0 = rows[0][0] if rows else 0
    return [TraceRequest((t - t0) / 1e9, ctx, gen) for t, ctx, gen in rows]


def _azure_path(kind: str, path: str | os.PathLike | None) -> Path:
    name = f"AzureLLMInferenceTrace_{kind}.csv"
    directory = Path(os.environ.get("LABKIT_AZURE_TRACE_DIR", AZURE_DEFAULT_DIR))
    resolved = Path(path) if path is not None else directory / name
    if not resolved.is_file():
        raise FileNotFoundError(
            f"Azure LLM trace not found at {resolved}. The raw trace is not shipped with labkit "
            f"(CC-BY 4.0, {AZURE_CITATION}); download {name} from "
            "https://github.com/Azure/AzurePublicDataset and pass path= or set LABKIT_AZURE_TRACE_DIR. "
            "azure_like_trace() works without it (resampled from shipped statistics).")
    return resolved


def _read_azure_rows(path: Path) -> list[tuple[int, int, int]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != _AZURE_HEADER:
            raise ValueError(f"{path}: expected header {_AZURE_HEADER}, got {header}")
        return [(_parse_timestamp_ns(ts), int(ctx), int(gen)) for ts, ctx, gen in reader]


def _parse_timestamp_ns(text: str) -> int:
    """'2023-11-16 18:17:03.9799600' → integer nanoseconds since 1970. The trace has 7 fractional
    digits, one more than ``datetime`` parses; integers keep them exact (a float of seconds since
    1970 would round them at about 1e-7 s)."""
    whole, _, fraction = text.partition(".")
    seconds = (datetime.strptime(whole, "%Y-%m-%d %H:%M:%S") - datetime(1970, 1, 1)).total_seconds()
    return int(seconds) * 10**9 + int(fraction.ljust(9, "0")[:9])


# ------------------------------------------------------------------------------ azure (resampled)

def azure_like_trace(kind: str, num_requests: int, seed: int = 0, rate: float | None = None,
                     max_total_tokens: int | None = None) -> list[TraceRequest]:
    """A trace resampled from statistics derived from the Azure 2023 trace (shipped in
    data/traces/azure_2023_stats.json), so it works on a fresh clone without the raw data.

    Each length is drawn by inverse-CDF sampling: u ~ U(0, 1), L = Q(u), with Q the empirical quantile
    function linearly interpolated between the shipped quantiles. Context and generated lengths are
    drawn independently: their rank correlation in the real trace is small (see the stats file).
    ``rate`` and arrivals as in ``synthetic_trace`` (the real trace's rate is in the stats file).
    ``max_total_tokens`` rejects draws whose prompt + output exceeds it and draws again.
    """
    _check_choice("kind", kind, AZURE_KINDS)
    _check_count("num_requests", num_requests)
    stats = json.loads(_require_data_file(AZURE_STATS_PATH).read_text(encoding="utf-8"))
    rng = np.random.default_rng(seed)
    prompts, outputs = _resample_lengths(rng, stats, kind, num_requests, max_total_tokens)
    return _build_trace(_arrival_times(rng, num_requests, rate), prompts, outputs)


def _resample_lengths(rng: np.random.Generator, stats: dict, kind: str, n: int,
                      max_total_tokens: int | None) -> tuple[np.ndarray, np.ndarray]:
    probs = stats["quantile_probs"]
    empirical = stats["kinds"][kind]["empirical_quantiles"]
    prompts, outputs = np.empty(0, dtype=int), np.empty(0, dtype=int)
    for _ in range(100):
        p = _inverse_cdf(rng, probs, empirical["context_tokens"], n)
        o = _inverse_cdf(rng, probs, empirical["generated_tokens"], n)
        keep = (p + o <= max_total_tokens) if max_total_tokens is not None else slice(None)
        prompts, outputs = np.concatenate([prompts, p[keep]]), np.concatenate([outputs, o[keep]])
        if len(prompts) >= n:
            return prompts[:n], outputs[:n]
    raise ValueError(f"max_total_tokens={max_total_tokens} keeps too few {kind!r} requests; raise it")


def _inverse_cdf(rng: np.random.Generator, probs: list, quantiles: list, n: int) -> np.ndarray:
    values = np.interp(rng.random(n), probs, quantiles)
    return np.maximum(np.rint(values), 1).astype(int)


# ---------------------------------------------------------------------------------------- scaling

def scale_trace(trace: list[TraceRequest], max_prompt_len: int, max_output_len: int,
                quantile: float = 0.99) -> list[TraceRequest]:
    """Shrink lengths so a CPU can serve the trace, keeping the distribution's shape.

    Prompt lengths are multiplied by f = min(1, max_prompt_len / Q), Q the trace's ``quantile``
    prompt length, rounded and clipped to [1, max_prompt_len] (same for outputs). A common factor
    keeps ratios such as P99/P50 — the heavy tail — intact up to ``quantile``; only the longest
    (1 − quantile) share is clipped. Arrival times and ``prompt`` are left as they are.
    """
    if not trace:
        return []
    prompts = _scale_lengths([r.prompt_len for r in trace], max_prompt_len, quantile, "max_prompt_len")
    outputs = _scale_lengths([r.output_len for r in trace], max_output_len, quantile, "max_output_len")
    return [replace(r, prompt_len=int(p), output_len=int(o))
            for r, p, o in zip(trace, prompts, outputs)]


def _scale_lengths(lengths: list[int], max_len: int, quantile: float, name: str) -> np.ndarray:
    _check_count(name, max_len)
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must be in (0, 1], got {quantile!r}")
    factor = min(1.0, max_len / max(float(np.quantile(lengths, quantile)), 1.0))
    return np.clip(np.rint(np.asarray(lengths) * factor), 1, max_len).astype(int)


# ------------------------------------------------------------------------------------- validation

def _check_choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def sharegpt_like_trace(num_requests: int, seed: int = 0) -> list[TraceRequest]:
    """Log-normal lengths (σ = 1) whose means (median × e^0.5) sit near ShareGPT's 161 input /
    338 output tokens (Kwon et al. Fig. 11a), clipped so prompt + output ≤ 2048."""
    return synthetic_trace(num_requests, seed=seed, prompt_len=LogNormalLengths(98, 1.0, 4, 1024),
                           output_len=LogNormalLengths(205, 1.0, 4, 1024))
