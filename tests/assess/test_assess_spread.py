"""Timed predictions carry the run's spread: every lab prediction of a timed quantity passes
``spread=`` (the range over the run's rounds, in the prediction's unit), and the lab helpers that
compute those ranges return what the rounds measured."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labkit.labs.common import display
from labkit.labs.common.measure import verdict_from_ratios
from labkit.report.results import read_summary

REPO = Path(__file__).resolve().parents[2]

# Predictions of a quantity timed on this machine (CPU or wall seconds), by notebook and prediction id.
# Not here: counts and simulated values (deterministic, exact or no noise), directions, the sampled
# chi-square p value, and two timed values measured once, with no rounds to spread over
# (lab 03 chunked-itl-ratio: the largest gap of one run; lab 05 host-share: one run's totals).
TIMED = {
    "01_kv_cache.ipynb": {"recompute-slowdown", "prefill-vs-decode-step"},
    "02_paged_attention.ipynb": {"prefix-ttft-ratio", "indirection-overhead"},
    "03_batching.ipynb": {"decode-step-scaling", "host-ms"},
    "04_speculative.ipynb": {"ngram-speedup-max-k", "paying-min-verify-cost", "batch-speedup"},
    "05_engine_choice.ipynb": {"fixed-shapes-step-ratio", "int4-tpot-p99"},
}


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    return tmp_path


def predict_calls(notebook: str) -> dict[str, ast.Call]:
    """Every ``predict(...)`` call with an ``id=`` in the notebook's code cells, by id."""
    nb = json.loads((REPO / "labs" / notebook).read_text(encoding="utf-8"))
    calls = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for node in ast.walk(ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%")))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "predict":
                keywords = {k.arg: k.value for k in node.keywords}
                if isinstance(keywords.get("id"), ast.Constant):
                    calls[keywords["id"].value] = node
    return calls


@pytest.mark.parametrize("notebook", sorted(TIMED))
def test_every_timed_prediction_passes_the_runs_spread(notebook):
    calls = predict_calls(notebook)
    missing = TIMED[notebook] - set(calls)
    assert not missing, f"{notebook}: no predict(..., id=...) for {sorted(missing)}"
    for pid in TIMED[notebook]:
        keywords = {k.arg for k in calls[pid].keywords}
        assert "spread" in keywords, f"{notebook}: prediction {pid!r} is timed but passes no spread="
        kind = next((k.value for k in calls[pid].keywords if k.arg == "kind"), None)
        assert kind is None or kind.value == "measured", f"{notebook}: {pid!r} must be a measured quantity"


def test_lab01_prefill_over_decode_spreads_over_the_steps_the_first_request_ran_alone():
    from labkit.labs.lab01_kv_cache.measure import prefill_decode_spread
    from labkit.metrics import StepRow

    def row(step, prefill, decode, n, seconds):
        return StepRow(step, prefill, decode, 0, n, seconds, seconds, False)

    rows = [row(0, 192, 0, 1, 0.30), row(1, 0, 1, 1, 0.010), row(2, 0, 1, 1, 0.015), row(3, 48, 1, 2, 0.2),
            row(4, 0, 2, 2, 0.001)]
    assert prefill_decode_spread(rows) == pytest.approx((20.0, 30.0))
    assert prefill_decode_spread(rows[:1]) is None


def test_lab02_ttft_ratio_spread_pairs_requests_after_the_first():
    from labkit.labs.lab02_paged_attention.sharing import PrefixRun, ttft_ratio_spread

    off = PrefixRun(False, 100, (120,) * 4, (1.0, 0.8, 0.9, 1.2), 0, 0, 0, 0)
    on = PrefixRun(True, 100, (120,) * 4, (1.0, 0.2, 0.3, 0.3), 0, 0, 0, 0)
    assert ttft_ratio_spread(off, on) == pytest.approx((3.0, 4.0))


def test_lab02_indirection_overhead_spread_is_the_rounds_ratio_range_in_percent():
    from labkit.labs.lab02_paged_attention.attention_cost import IndirectionCost

    v = verdict_from_ratios([1.1, 1.3, 1.2], ratio=1.15)
    cost = IndirectionCost(512, 16, 8, 1.15, 1.0, 0.0, v)
    assert cost.overhead_spread == pytest.approx((10.0, 30.0))
    assert IndirectionCost(512, 16, 8, 1.15, 1.0, 0.0).overhead_spread is None


def test_lab03_step_ratio_spread_pairs_the_ith_step_of_each_batch_size():
    from labkit.labs.lab03_batching.scaling import StepTiming, step_ratio_spread

    big, one = StepTiming("decode", 16, 0.04, (0.05, 0.04, 0.06)), StepTiming("decode", 1, 0.01, (0.01, 0.02, 0.01))
    assert step_ratio_spread(big, one) == pytest.approx((2.0, 6.0))
    assert step_ratio_spread(StepTiming("decode", 16, 0.04), one) is None


def test_lab03_host_ms_spread_is_the_range_over_rounds():
    from labkit.labs.lab03_batching.overhead import HostSweep

    class Row:
        def __init__(self, s):
            self.engine_host_s = s

    sweep = HostSweep([Row(0.002)], [[Row(0.004), Row(0.002)], [Row(0.003), Row(0.005)]], None, 20)
    assert sweep.host_ms_spread() == pytest.approx((2.0, 5.0))
    assert sweep.host_ms_spread(0) == pytest.approx((3.0, 4.0))


def test_a_timed_prediction_inside_the_band_is_a_hit_and_outside_gets_its_error_and_both_are_recorded():
    """As a lab cell does it: the measured value from the run, the spread from its verdict."""
    run = {"verdict": verdict_from_ratios([1.9, 2.2, 2.5], ratio=2.1)}
    p = display.predict("加速比？", lambda: run["verdict"].ratio, unit="倍", spread=lambda: run["verdict"],
                        lab="04", id="batch-speedup")
    inside = p.reveal("2.4")
    assert inside.judgement == "inside spread" and "噪声" in inside.message
    assert read_summary("04")["predictions"]["batch-speedup"]["spread"] == [1.9, 2.5]
    outside = p.reveal("1.05")
    assert outside.judgement == "outside spread" and "偏低 50%" in outside.message
    entry = read_summary("04")["predictions"]["batch-speedup"]
    assert (entry["measured"], entry["spread"], entry["judgement"]) == (2.1, [1.9, 2.5], "outside spread")


def test_the_progress_view_shows_the_spread_beside_the_measured_value():
    from labkit.assess import progress

    display.predict("慢几倍？", 4.0, unit="倍", spread=(3.5, 4.5), lab="01", id="slow").reveal("4")
    assert "4 倍（各轮 3.5–4.5）" in progress()._repr_html_()
