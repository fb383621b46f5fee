"""``GET /metrics``: vLLM's metric names under a ``labkit:`` prefix, in Prometheus text format.

Each server has its own ``CollectorRegistry`` (not prometheus_client's global one), so a test can
run several servers in one process. Two kinds of values:

- pushed by the engine loop as requests finish: the TTFT / ITL / e2e histograms and the success,
  prompt- and generation-token counters;
- pulled at scrape time from ``engine.stats()`` (taken by the loop thread between two steps):
  running / waiting requests, KV-cache usage, and the engine's own cumulative counters
  (prefix-cache queries and hits, preemptions, speculative drafts and accepted tokens).

Times come from the engine's clock: on ``--model sim`` they are simulated seconds (the cost model's
time, not the wall clock a client sees); docs/serving.md says so too.

vLLM's names that exist here (under ``labkit:`` instead of ``vllm:``): ``num_requests_running``,
``num_requests_waiting``, ``kv_cache_usage_perc``, ``prefix_cache_queries``, ``prefix_cache_hits``,
``num_preemptions``, ``spec_decode_num_drafts``, ``spec_decode_num_draft_tokens``,
``spec_decode_num_accepted_tokens``, ``request_success``, ``prompt_tokens``, ``generation_tokens``,
``time_to_first_token_seconds``, ``inter_token_latency_seconds``, ``e2e_request_latency_seconds``
(``VLLM_NAMES``); the rest of vLLM's (queue time, prefill and decode time, per-request token histograms,
LoRA, ...) are not exported.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

VLLM_NAMES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries",
              "prefix_cache_hits", "num_preemptions", "spec_decode_num_drafts", "spec_decode_num_draft_tokens",
              "spec_decode_num_accepted_tokens", "request_success", "prompt_tokens", "generation_tokens",
              "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")

# Buckets as vLLM's (seconds), trimmed to what a CPU engine reaches.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0)

# engine.stats() key → (metric name, help). Gauges hold the current value, counters only grow.
GAUGES = {
    "num_requests_running": ("labkit:num_requests_running", "Requests in the running batch."),
    "num_requests_waiting": ("labkit:num_requests_waiting", "Requests waiting to be scheduled."),
    "kv_cache_usage_perc": ("labkit:kv_cache_usage_perc", "KV-cache usage: allocated / total blocks (0..1)."),
}
COUNTERS = {
    "prefix_cache_queries": ("labkit:prefix_cache_queries", "Prompt tokens looked up in the prefix cache."),
    "prefix_cache_hits": ("labkit:prefix_cache_hits", "Prompt tokens found in the prefix cache."),
    "num_preemptions": ("labkit:num_preemptions", "Preemptions (recompute) so far."),
    "spec_decode_num_drafts": ("labkit:spec_decode_num_drafts", "Speculative draft runs."),
    "spec_decode_num_draft_tokens": ("labkit:spec_decode_num_draft_tokens", "Draft tokens proposed."),
    "spec_decode_num_accepted_tokens": ("labkit:spec_decode_num_accepted_tokens", "Draft tokens accepted."),
}


class _EngineStatsCollector:
    """Yields gauges and counters from the last ``engine.stats()`` handed to ``update``."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.stats: dict = {}

    def collect(self):
        for key, (name, doc) in GAUGES.items():
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            value = self.stats.get(key) or 0.0
            family.add_metric([self.model_name], value / 100.0 if key == "kv_cache_usage_perc" else value)
            yield family
        for key, (name, doc) in COUNTERS.items():
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            family.add_metric([self.model_name], float(self.stats.get(key) or 0))
            yield family


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        labels = dict(labelnames=["model_name"], registry=self.registry)
        self._engine_stats = _EngineStatsCollector(model_name)
        self.registry.register(self._engine_stats)
        self.ttft = Histogram("labkit:time_to_first_token_seconds", "Time to first token (arrival to first "
                              "token).", buckets=TTFT_BUCKETS, **labels).labels(model_name)
        self.itl = Histogram("labkit:inter_token_latency_seconds", "Gap between consecutive output tokens "
                             "of one request.", buckets=ITL_BUCKETS, **labels).labels(model_name)
        self.e2e = Histogram("labkit:e2e_request_latency_seconds", "Arrival to finish.",
                             buckets=E2E_BUCKETS, **labels).labels(model_name)
        self._success = Counter("labkit:request_success", "Requests finished, by reason.",
                                labelnames=["model_name", "finished_reason"], registry=self.registry)
        self.prompt_tokens = Counter("labkit:prompt_tokens", "Prompt tokens of accepted requests.",
                                     **labels).labels(model_name)
        self.generation_tokens = Counter("labkit:generation_tokens", "Output tokens produced.",
                                         **labels).labels(model_name)
        self.model_name = model_name

    def observe_finished(self, timings, token_times: list[float], reason: str) -> None:
        """Called by the engine loop for every finished sequence, aborted ones included: as in vLLM,
        ``request_success_total`` counts every finished request under its ``finished_reason`` (stop,
        length, abort, error), so a client's completed requests are the stop + length ones."""
        self._success.labels(self.model_name, reason).inc()
        if timings.ttft_s is not None:
            self.ttft.observe(timings.ttft_s)
        if timings.e2e_s is not None:
            self.e2e.observe(timings.e2e_s)
        for before, after in zip(token_times, token_times[1:]):
            self.itl.observe(after - before)

    def render(self, engine_stats: dict) -> bytes:
        self._engine_stats.stats = engine_stats
        return generate_latest(self.registry)
