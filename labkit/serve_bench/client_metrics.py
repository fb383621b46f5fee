"""Client-side serving metrics, with ``vllm bench serve``'s definitions (docs/serving.md).

Per request, from the client's clock (``st`` = when the request was sent):

- TTFT = first chunk carrying text − st (a reply with no text at all: its first chunk − st)
- ITL  = every gap between consecutive text chunks; pooled over all requests
- E2EL = end of the stream − st
- TPOT = (E2EL − TTFT) / (output tokens − 1), for requests with more than one output token

A request that a time-bounded run (``--max-duration``) never sent, or cancelled in flight, is neither
completed nor failed: it is counted apart (``not_sent``, ``cut``). ``failed`` counts the requests the
server had its full chance to answer; ``incomplete`` of them ended without any mark of an end.

A request succeeds if the stream ends normally, whatever text it carried (client.send): an empty
completion (end-of-sequence at once) counts as completed with 0 output tokens, enters TTFT and
E2EL, and adds nothing to TPOT or ITL.

Over the run (``duration`` = first request sent → last request done): request throughput =
completed / duration; output token throughput = output tokens / duration; goodput = completed
requests meeting *every* given objective (TTFT, TPOT, E2EL, each ≤ its limit) / duration.

AIPerf (NVIDIA's client) calls vLLM's TPOT "inter-token latency"; this module's ITL is vLLM's
per-chunk gap. With several tokens per chunk (speculative decoding) ITL > TPOT.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.metrics import percentile

PERCENTILES = (50, 90, 99)
SLO_NAMES = ("ttft", "tpot", "e2el")


@dataclass
class RequestRecord:
    """What the client saw of one request (seconds)."""

    success: bool = False
    start_s: float = 0.0              # sent, relative to the benchmark's start
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    e2el_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    text: str = ""
    error: str = ""
    sent: bool = True                 # False: a time-bounded run ended before this request went out
    cut: bool = False                 # in flight when a time-bounded run ended (cancelled, not failed)

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class Summary:
    """mean / median / P90 / P99 of one latency, in milliseconds."""

    mean_ms: float | None
    median_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True)
class BenchMetrics:
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float             # requests / s
    output_throughput: float              # output tokens / s
    total_token_throughput: float         # (input + output) tokens / s
    goodput: float | None                 # requests / s meeting every objective; None without objectives
    ttft: Summary
    tpot: Summary
    itl: Summary
    e2el: Summary
    incomplete: int = 0                   # of the failed: streams that ended without finish_reason/usage/[DONE]
    not_sent: int = 0                     # never sent: the run reached --max-duration first (not failures)
    cut: int = 0                          # in flight at --max-duration, cancelled (not failures)


def summarize(values_s: list[float]) -> Summary:
    if not values_s:
        return Summary(None, None, None, None)
    ms = [v * 1000.0 for v in values_s]
    return Summary(sum(ms) / len(ms), percentile(ms, 50), percentile(ms, 90), percentile(ms, 99))


def meets(record: RequestRecord, slo_ms: dict[str, float]) -> bool:
    """True if every objective given holds (a TPOT objective holds for replies of 0 or 1 tokens)."""
    values = {"ttft": record.ttft_s, "tpot": record.tpot_s or 0.0, "e2el": record.e2el_s}
    return all(values[name] * 1000.0 <= limit for name, limit in slo_ms.items())


def compute_metrics(records: list[RequestRecord], duration_s: float,
                    slo_ms: dict[str, float] | None = None) -> BenchMetrics:
    ok = [r for r in records if r.success]
    judged = [r for r in records if r.sent and not r.cut]      # what the server had a full chance to answer
    slo_ms = slo_ms or {}
    unknown = set(slo_ms) - set(SLO_NAMES)
    if unknown:
        raise ValueError(f"goodput objectives must be among {SLO_NAMES}, got {sorted(unknown)}")
    inputs = sum(r.prompt_tokens for r in ok)
    outputs = sum(r.output_tokens for r in ok)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    good = sum(meets(r, slo_ms) for r in ok) * per_s if slo_ms else None
    return BenchMetrics(
        completed=len(ok), failed=len(judged) - len(ok), duration_s=duration_s,
        total_input_tokens=inputs, total_output_tokens=outputs, request_throughput=len(ok) * per_s,
        output_throughput=outputs * per_s, total_token_throughput=(inputs + outputs) * per_s, goodput=good,
        ttft=summarize([r.ttft_s for r in ok]),
        tpot=summarize([r.tpot_s for r in ok if r.tpot_s is not None]),
        itl=summarize([gap for r in ok for gap in r.itl_s]),
        e2el=summarize([r.e2el_s for r in ok]),
        incomplete=sum(not r.success and r.error.startswith("incomplete:") for r in judged),
        not_sent=sum(not r.sent for r in records), cut=sum(r.sent and r.cut for r in records))


def parse_goodput(items: list[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` → ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds)."""
    slo: dict[str, float] = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in SLO_NAMES or not value:
            raise ValueError(f"--goodput takes NAME:MS with NAME in {SLO_NAMES}, got {item!r}")
        try:
            slo[name] = float(value)
        except ValueError:
            raise ValueError(f"--goodput {item!r}: {value!r} is not a number of milliseconds") from None
        if slo[name] <= 0:
            raise ValueError(f"--goodput {item!r}: the limit must be > 0 ms")
    return slo
