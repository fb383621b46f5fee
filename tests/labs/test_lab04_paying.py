"""Lab 04's paying-regime row, the live demo's measured inputs, and the corrected text: target
choice, the pairs each target can run, the sentences from verdicts, c from recorded durations, the
batch figure's title from the run, and the history / vLLM facts with their reference rows."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit.labs.common.measure import ArmValues, Comparison, Verdict
from labkit.labs.common.references import cite
from labkit.labs.lab04_speculative import paying, views
from labkit.labs.lab04_speculative.live_view import measured_c
from labkit.labs.lab04_speculative.speedup import Row, Timers
from labkit.labs.lab04_speculative.sweeps import BatchRow

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "04_speculative.ipynb"


def _row(alpha=0.8, k=6, c=0.01, verify=1.1, speedup=2.0, steps=10, drafted=(6,) * 8) -> Row:
    return Row("copy", f"ngram k={k}", k, alpha, 0.7, 0.8, c, 2.5, verify, speedup, "1/1", drafted, steps, 30, 38)


def _comparison(ratio: float, lo: float, hi: float, confidence: str = "clear") -> Comparison:
    direction = "greater" if ratio > 1.05 else "less" if ratio < 0.95 else "same"
    v = Verdict(direction, confidence, ratio, lo, hi, 0.05, id="x", claim=("c", "c"), clock="CPU time")
    arms = {"plain": ArmValues("plain", [1.0, 1.0], [1, 1], [1.0, 1.0]), "ngram k=6": ArmValues("ngram k=6", [1.0], [1], [ratio])}
    return Comparison(arms, "plain", {"ngram k=6": v}, (), {}, "speed", "CPU time", 0.5, 0.5, 2, "cpu")


def test_the_target_is_bf16_with_amx_and_q4_1_without():
    bf16, q4 = paying.choose_target(amx=True), paying.choose_target(amx=False)
    assert bf16.name == "bf16" and bf16.config["dtype"] == "bfloat16"
    assert q4.name == "q4_1" and q4.config["weights"] == "q4_1"


def test_a_q4_1_target_skips_the_4_bit_copy_and_a_bf16_target_runs_both_pairs():
    assert paying.choose_target(amx=True).pairs() == (("ngram", "copy"), ("int4", "chat"))
    assert paying.choose_target(amx=False).pairs() == (("ngram", "copy"),)


def test_within_is_the_relative_gap_to_the_prediction():
    assert paying.within(2.5, 2.0) == pytest.approx(0.25)
    assert paying.within(2.0, None) is None and paying.within(2.0, 0.0) is None


def test_the_row_sentence_comes_from_the_verdict_and_both_predictions():
    r = paying.PayingRow("bf16", "ngram", "copy", 6, _row(), _comparison(2.5, 2.4, 2.6))
    sentence = paying.row_sentence(r)
    assert "2.50" in sentence and f"{r.row.prediction:.2f}" in sentence and f"{r.row.adjusted_prediction:.2f}" in sentence
    assert f"{100 * paying.within(2.5, r.row.prediction):.0f}%" in sentence
    noisy = paying.PayingRow("bf16", "ngram", "copy", 6, _row(), _comparison(1.02, 0.9, 1.2, "within noise"))
    assert paying.row_sentence(noisy) != sentence
    table = paying.paying_table([r])._repr_html_()
    assert "2.40–2.60" in table and "clear" in table


def test_c_is_proposer_time_per_decode_step_over_k_plain_steps():
    timers = Timers(steps=[9.0, 0.5, 0.5, 0.5, 0.5], proposals=[7.0, 0.1, 0.1, 0.1, 0.1])
    # marks after the first entries: 4 new steps (1 prefill + 3 decode), 4 new proposals of 0.1 s
    assert measured_c(timers, (1, 1), 4, 0.2) == pytest.approx(0.4 / 3 / (4 * 0.2))
    assert measured_c(timers, (5, 5), 4, 0.2) is None          # nothing recorded since the marks
    assert measured_c(timers, (1, 1), 4, None) is None


def test_the_acceptance_view_hides_its_inputs_and_the_empty_speedup_panel_until_fillable():
    from labkit.events import EventBus, SpecVerified
    from labkit.widgets import AcceptanceView

    view = AcceptanceView(hooks=EventBus(), show_inputs=False)
    assert view.show_inputs is False and "from_run" in view.labels
    js = (Path(__file__).resolve().parents[2] / "labkit" / "widgets" / "acceptance_view.js").read_text()
    assert "predicted_curve.length ? [drawHistory, drawPositions, drawSpeedup] : [drawHistory, drawPositions]" in js
    bus = EventBus()
    live = AcceptanceView(hooks=bus, show_inputs=False)
    bus.emit(SpecVerified("a", 4, 2, (True, True, False, False)))
    live.flush()
    assert live.predicted_curve == []
    live.c, live.baseline_tpot_s = 0.1, 0.02          # what the live demo sets from its own run
    assert live.predicted_curve and live.predicted_speedup is not None


def test_the_batch_figure_title_states_the_measured_speedups_not_a_fixed_conclusion():
    rows = [BatchRow(b, _row(speedup=s), 0.01, 0.012) for b, s in ((1, 0.81), (4, 1.39), (16, 0.82))]
    title = views.batch_figure(rows).layout.title.text
    assert "0.81×" in title and "1.39×" in title and "0.82×" in title and "1 → 4 → 16" in title
    assert "批越大，投机越不划算" not in title


def _markdown() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return "\n".join(c.source for c in nb.cells)


def test_the_lab_states_the_history_with_dates_and_sources_and_names_the_books_claim():
    text = _markdown()
    assert "2022 年 11 月" in text and "Google Research" in text and "2023 年 2 月" in text and "DeepMind" in text
    assert "教材" in text and "清华" in text
    row = cite("Speculative decoding first papers")
    assert "2211.17192" in row.value and "2302.01318" in row.value


def test_the_vllm_auto_disable_sentence_is_cited_and_dated():
    text = _markdown()
    assert "vLLM 后来加入了按负载自动关掉投机的策略" not in text
    assert "PR #4592" in text and "speculative_disable_by_batch_size" in text
    assert "2024-05-08" in cite("vLLM speculative auto-disable").value


def test_the_batch_section_does_not_call_verification_nearly_free_on_this_cpu():
    text = _markdown()
    assert "验证多几行几乎免费。批越大" not in text
    assert "第 3 节已经量出它并不免费" not in text          # an outcome: on another CPU section 3 may find it free
    assert "第 3 节和 3.1 节已经量出（验证代价一列）" in text


def test_a_real_paying_row_pairs_the_kept_rounds_and_stays_lossless():
    target = paying.choose_target()
    engines = paying.Engines(target.config)
    r = paying.measure_pair(engines, target.name, "ngram", "copy", 2, num_prompts=1, max_tokens=6, rounds=2)
    assert r.row.identical == "2/2"                     # two kept rounds, one prompt each, output unchanged
    assert r.verdict.rounds == 2 and r.measured > 0 and r.row.alpha is not None
    assert r.row.prediction is not None and r.row.adjusted_prediction is not None
