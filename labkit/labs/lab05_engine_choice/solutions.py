"""Lab 05 reference solutions: goodput and P99 TPOT from a result file, and picking a configuration
from the measured table under a memory budget and a latency objective."""

from __future__ import annotations


def goodput_and_p99_tpot(requests: list[dict], duration_s: float, ttft_ms: float,
                         tpot_ms: float) -> tuple[float, float | None]:
    """(goodput in requests/s, P99 TPOT in ms) with ``vllm bench serve``'s definitions.

    Only successful requests count. TPOT = (e2el − ttft) / (output tokens − 1), defined for requests
    with at least two output tokens; a one-token reply meets any TPOT objective. Goodput = requests
    meeting both objectives / duration. P99: linear interpolation between the sorted values
    (numpy's default).
    """
    ok = [r for r in requests if r["success"]]
    tpots = [(r["e2el_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000.0 for r in ok if r["output_tokens"] > 1]
    good = 0
    for r in ok:
        tpot = (r["e2el_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000.0 if r["output_tokens"] > 1 else 0.0
        good += r["ttft_s"] * 1000.0 <= ttft_ms and tpot <= tpot_ms
    return good / duration_s, _p99(tpots)


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * 0.99
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def pick_config(table: list[dict], max_memory_mib: float, max_tpot_p99_ms: float) -> str | None:
    """Among rows within the memory budget whose TPOT P99 meets the objective, the variant with the
    most output tokens per CPU second; None when no row fits."""
    fits = [r for r in table if r["memory_mib"] <= max_memory_mib
            and r["tpot_p99_ms"] is not None and r["tpot_p99_ms"] <= max_tpot_p99_ms]
    if not fits:
        return None
    return max(fits, key=lambda r: r["tokens_per_cpu_s"])["variant"]
