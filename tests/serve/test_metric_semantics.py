"""Client-side benchmark metrics against ``vllm bench serve``'s definitions, written out here with numpy
(vLLM's ``benchmarks/serve.py``, ``calculate_metrics``), not against another labkit path.

    completed          requests whose stream ended normally; a failed one counts only in ``failed``
    TTFT, E2EL         per completed request; mean, median (np.median), P90 / P99 (np.percentile, linear)
    TPOT               (E2EL - TTFT) / (output tokens - 1), only for requests with more than one token
    ITL                every gap between chunks, pooled over requests (not a mean of per-request means)
    throughput         completed / duration, output tokens / duration, (input + output tokens) / duration
    goodput            completed requests with every given objective met, each ``value <= limit`` (a request
                       exactly at the limit meets it; a reply of 0 or 1 token has TPOT 0), / duration
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.serve_bench.client_metrics import RequestRecord, Summary, compute_metrics, meets, summarize

approx = lambda x: pytest.approx(x, rel=1e-9, abs=1e-12)      # noqa: E731


def vllm_summary(values_s: list[float]) -> tuple | None:
    if not values_s:
        return None
    ms = np.array(values_s) * 1000.0
    return float(np.mean(ms)), float(np.median(ms)), float(np.percentile(ms, 90)), float(np.percentile(ms, 99))


def vllm_metrics(records: list[RequestRecord], duration_s: float, slo_ms: dict[str, float]) -> dict:
    """``calculate_metrics`` of vLLM's benchmark, on the same records."""
    done = [r for r in records if r.success]
    ttfts = [r.ttft_s for r in done]
    e2els = [r.e2el_s for r in done]
    tpots = [(r.e2el_s - r.ttft_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    itls = [gap for r in done for gap in r.itl_s]
    good = 0
    for r in done:
        value = {"ttft": r.ttft_s * 1000, "e2el": r.e2el_s * 1000,
                 "tpot": (r.e2el_s - r.ttft_s) / (r.output_tokens - 1) * 1000 if r.output_tokens > 1 else 0.0}
        good += all(value[name] <= limit for name, limit in slo_ms.items())
    inputs, outputs = sum(r.prompt_tokens for r in done), sum(r.output_tokens for r in done)
    return {"completed": len(done), "failed": len(records) - len(done), "total_input_tokens": inputs,
            "total_output_tokens": outputs, "request_throughput": len(done) / duration_s,
            "output_throughput": outputs / duration_s, "total_token_throughput": (inputs + outputs) / duration_s,
            "goodput": good / duration_s if slo_ms else None, "ttft": vllm_summary(ttfts),
            "tpot": vllm_summary(tpots), "itl": vllm_summary(itls), "e2el": vllm_summary(e2els)}


def as_tuple(summary) -> tuple | None:
    return None if summary.mean_ms is None else (summary.mean_ms, summary.median_ms, summary.p90_ms, summary.p99_ms)


@st.composite
def records(draw) -> RequestRecord:
    ttft = draw(st.floats(0.001, 2.0))
    gaps = draw(st.lists(st.floats(0.0, 0.5), max_size=6))
    out = draw(st.integers(0, 40)) if not gaps else len(gaps) + draw(st.integers(1, 3))   # chunks may carry several
    tail = draw(st.floats(0.0, 0.2))
    return RequestRecord(success=draw(st.booleans() | st.just(True)), ttft_s=ttft, itl_s=gaps,
                         e2el_s=ttft + sum(gaps) + tail, prompt_tokens=draw(st.integers(1, 500)), output_tokens=out)


SLOS = st.dictionaries(st.sampled_from(["ttft", "tpot", "e2el"]), st.floats(1.0, 2500.0), max_size=3)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(records(), min_size=1, max_size=12), st.floats(0.5, 50.0), SLOS)
def test_every_metric_matches_vllms_definition(recs, duration_s, slo_ms):
    got = compute_metrics(recs, duration_s, slo_ms)
    want = vllm_metrics(recs, duration_s, slo_ms)
    for name in ("completed", "failed", "total_input_tokens", "total_output_tokens"):
        assert getattr(got, name) == want[name], name
    for name in ("request_throughput", "output_throughput", "total_token_throughput", "goodput"):
        assert getattr(got, name) == (None if want[name] is None else approx(want[name])), name
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert as_tuple(getattr(got, name)) == (None if want[name] is None else approx(want[name])), name


# ------------------------------------------------------------------ each definition on numbers that show it

# Binary fractions (0.25 s = 250 ms exactly): "exactly at the limit" is not decided by rounding.
AT_LIMIT = RequestRecord(success=True, ttft_s=0.25, e2el_s=1.0, output_tokens=4, itl_s=[0.25, 0.25, 0.25])


@pytest.mark.parametrize("name, limit", [("ttft", 250.0), ("tpot", 250.0), ("e2el", 1000.0)])
def test_a_request_exactly_at_an_objective_meets_it(name, limit):
    assert AT_LIMIT.tpot_s == 0.25
    assert meets(AT_LIMIT, {name: limit})
    assert not meets(AT_LIMIT, {name: limit - 2 ** -20})
    assert compute_metrics([AT_LIMIT], 2.0, {name: limit}).goodput == 0.5


def test_goodput_needs_every_objective_at_once():
    fast_first = RequestRecord(success=True, ttft_s=0.125, e2el_s=2.125, output_tokens=3)      # TPOT 1000 ms
    fast_rest = RequestRecord(success=True, ttft_s=1.0, e2el_s=1.25, output_tokens=3)         # TPOT 125 ms
    m = compute_metrics([fast_first, fast_rest], 1.0, {"ttft": 500, "tpot": 500})
    assert m.goodput == 0.0
    assert compute_metrics([fast_first, fast_rest], 1.0, {"ttft": 500}).goodput == 1.0


def test_a_reply_of_one_token_has_no_tpot_and_meets_any_tpot_objective():
    one = RequestRecord(success=True, ttft_s=0.5, e2el_s=0.75, output_tokens=1)
    assert one.tpot_s is None
    m = compute_metrics([one, AT_LIMIT], 1.0, {"tpot": 1.0})
    assert m.tpot.mean_ms == 250.0                                   # only AT_LIMIT's TPOT enters
    assert m.goodput == 1.0                                          # one's TPOT counts as 0, AT_LIMIT misses 1 ms


def test_tpot_divides_the_time_after_the_first_token_by_the_tokens_after_it():
    r = RequestRecord(success=True, ttft_s=0.5, e2el_s=2.5, output_tokens=5)
    assert r.tpot_s == 0.5                                           # (2.5 - 0.5) / (5 - 1)


def test_total_token_throughput_counts_input_and_output_tokens_of_completed_requests():
    ok = RequestRecord(success=True, ttft_s=0.1, e2el_s=0.5, prompt_tokens=300, output_tokens=100)
    failed = RequestRecord(success=False, prompt_tokens=1000, output_tokens=7, error="HTTP 500")
    m = compute_metrics([ok, failed], 4.0)
    assert (m.total_input_tokens, m.total_output_tokens) == (300, 100)
    assert (m.total_token_throughput, m.output_throughput, m.request_throughput) == (100.0, 25.0, 0.25)


def test_itl_pools_every_gap_instead_of_averaging_per_request_means():
    short = RequestRecord(success=True, ttft_s=0.1, e2el_s=0.2, output_tokens=2, itl_s=[0.1])
    long = RequestRecord(success=True, ttft_s=0.1, e2el_s=0.4, output_tokens=4, itl_s=[0.1, 0.1, 0.1])
    slow = RequestRecord(success=True, ttft_s=0.1, e2el_s=0.5, output_tokens=2, itl_s=[0.5])
    m = compute_metrics([short, long, slow], 1.0)
    assert m.itl.mean_ms == approx(900 / 5)                          # per-request means would give 233.3
    assert m.itl.median_ms == approx(100.0) and m.itl.p99_ms == approx(100 + 0.96 * 400)


def test_percentiles_interpolate_linearly_between_ranks_as_numpy_does():
    s = summarize([0.010, 0.020, 0.030, 0.040, 0.100])
    assert (s.mean_ms, s.median_ms) == (approx(40.0), approx(30.0))
    assert s.p90_ms == approx(40 + 0.6 * 60) and s.p99_ms == approx(40 + 0.96 * 60)
    assert summarize([]) == Summary(None, None, None, None)


def test_no_duration_gives_zero_throughput_instead_of_dividing_by_zero():
    m = compute_metrics([AT_LIMIT], 0.0, {"ttft": 500})
    assert (m.request_throughput, m.output_throughput, m.total_token_throughput, m.goodput) == (0.0, 0.0, 0.0, 0.0)


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="goodput"):
        compute_metrics([AT_LIMIT], 1.0, {"ttfb": 5})


def test_goodput_limits_are_name_colon_milliseconds_above_zero():
    """``--goodput NAME:MS``: the name is what stands before the first colon, the limit a positive number
    of milliseconds (a fraction of one included); zero or a negative limit is refused by name."""
    from labkit.serve_bench.client_metrics import parse_goodput

    assert parse_goodput(["ttft:500", "tpot:0.5"]) == {"ttft": 500.0, "tpot": 0.5}
    for bad, says in (("ttft:0", "must be > 0 ms"), ("tpot:-3", "must be > 0 ms"),
                      ("ttft:1:2", "'1:2' is not a number"), ("ttft", "NAME:MS"), ("e2e:5", "NAME:MS")):
        with pytest.raises(ValueError, match=re.escape(says)):
            parse_goodput([bad])
