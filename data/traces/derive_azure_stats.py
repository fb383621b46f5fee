"""Derive the shipped statistics (azure_2023_stats.json) from the real Azure LLM inference trace 2023.

    PYTHONPATH=. python data/traces/derive_azure_stats.py          # reads ../shared/data/azure-llm-2023
    PYTHONPATH=. python data/traces/derive_azure_stats.py --check  # exit 1 if the shipped file differs

Only aggregates leave this script (counts, rates, quantiles): no row of the trace is copied. The output
is deterministic, so re-running it on the same trace reproduces the shipped file byte for byte.
``labkit.traces.azure_like_trace`` resamples from the ``empirical_quantiles`` written here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from labkit.traces import AZURE_KINDS, AZURE_STATS_PATH, load_azure_trace

# 0.00, 0.01, ..., 1.00 plus two points in the far tail, where lengths change fastest.
QUANTILE_PROBS = sorted({round(i / 100, 2) for i in range(101)} | {0.995, 0.999})
SUMMARY_PERCENTILES = (10, 25, 50, 75, 90, 95, 99)
CITATION = ("Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Inigo Goiri, Saeed Maleki, "
            "Ricardo Bianchini. Splitwise: Efficient generative LLM inference using phase splitting. "
            "In Proceedings of the International Symposium on Computer Architecture (ISCA 2024). ACM.")


def derive_stats(kind: str) -> dict:
    """Aggregates of one trace kind: size, arrival rate, length summaries and empirical quantiles."""
    trace = load_azure_trace(kind)
    arrivals = np.array([r.arrival_s for r in trace])
    context = np.array([r.prompt_len for r in trace])
    generated = np.array([r.output_len for r in trace])
    gaps = np.diff(arrivals)
    return {
        "num_requests": len(trace),
        "duration_s": _round(arrivals[-1]),
        "arrival_rate_per_s": _round((len(trace) - 1) / arrivals[-1]),
        "interarrival_cv": _round(gaps.std() / gaps.mean()),
        "spearman_context_generated": _round(_spearman(context, generated), 4),
        "context_tokens": _summary(context),
        "generated_tokens": _summary(generated),
        "empirical_quantiles": {
            "context_tokens": _round(np.quantile(context, QUANTILE_PROBS)),
            "generated_tokens": _round(np.quantile(generated, QUANTILE_PROBS)),
        },
    }


def _summary(values: np.ndarray) -> dict:
    summary = {"mean": _round(values.mean()), "min": int(values.min()), "max": int(values.max())}
    for p in SUMMARY_PERCENTILES:
        summary[f"p{p}"] = _round(np.percentile(values, p))
    return summary


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation with tied values given their average rank."""
    return float(np.corrcoef(_average_ranks(a), _average_ranks(b))[0, 1])


def _average_ranks(values: np.ndarray) -> np.ndarray:
    unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts
    return (first_rank + (counts - 1) / 2)[inverse]


def _round(x, digits: int = 2):
    if np.ndim(x):
        return [round(float(v), digits) for v in x]
    return round(float(x), digits)


def build_stats_document() -> dict:
    return {
        "source": "Azure LLM inference trace 2023 (AzureLLMInferenceTrace_conv.csv, "
                  "AzureLLMInferenceTrace_code.csv), Azure Public Dataset",
        "source_url": "https://github.com/Azure/AzurePublicDataset",
        "licence": "CC-BY 4.0",
        "licence_url": "https://creativecommons.org/licenses/by/4.0/",
        "citation": CITATION,
        "changes": "Derived aggregates only (counts, rates, quantiles); no trace rows are included.",
        "generated_by": "data/traces/derive_azure_stats.py",
        "quantile_probs": QUANTILE_PROBS,
        "kinds": {kind: derive_stats(kind) for kind in AZURE_KINDS},
    }


def render(document: dict) -> str:
    """Indented JSON with each list of numbers on one line, so the file reads as a table."""
    text = json.dumps(document, indent=1, ensure_ascii=False)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", _one_line, text) + "\n"


def _one_line(match: re.Match) -> str:
    return "[" + re.sub(r"\s+", " ", match[1]) + "]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file only")
    text = render(build_stats_document())
    if parser.parse_args().check:
        same = AZURE_STATS_PATH.read_text(encoding="utf-8") == text
        print(f"{AZURE_STATS_PATH}: {'up to date' if same else 'DIFFERS from the real trace'}")
        return 0 if same else 1
    AZURE_STATS_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {AZURE_STATS_PATH} ({len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
