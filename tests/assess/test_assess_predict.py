"""Predictions by kind: exact (right or wrong, with the working), measured (relative error and the
run's spread), direction (bigger / same / smaller); each reveal recorded in the lab's summary."""

from __future__ import annotations

import pytest

from labkit.labs.common import display
from labkit.report.results import read_summary


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    return tmp_path


def test_an_exact_prediction_one_off_is_wrong_and_shows_the_working():
    p = display.predict("位置 40 在第几个槽位？", 152, kind="exact",
                        working={"zh": "9 × 16 + 8 = 152", "en": "9 × 16 + 8 = 152"})
    near = p.reveal("150")
    assert near.correct is False and "不对" in near.message and "152" in near.message
    assert "9 × 16 + 8 = 152" in near.message and "接近" not in near.message
    assert p.reveal(152).correct is True


def test_an_exact_working_may_be_computed_from_the_measured_value():
    p = display.predict("?", lambda: 3, kind="exact", working=lambda n: f"{n} = 1 + 2")
    assert "3 = 1 + 2" in p.reveal(3).message


def test_a_measured_quantity_is_judged_by_relative_error_without_a_verdict():
    result = display.predict("多慢？", lambda: 4.0, unit="倍").reveal("5")
    assert result.correct is None and result.relative_error == pytest.approx(0.25)
    assert "偏高 25%" in result.message


def test_a_measured_quantity_inside_the_runs_spread_says_so():
    p = display.predict("多慢？", lambda: 4.0, unit="倍", spread=lambda: (3.6, 4.5))
    inside, outside = p.reveal("4.4"), p.reveal("6")
    assert inside.judgement == "inside spread" and "本机这次各轮测得 3.6–4.5 倍的范围之内" in inside.message
    assert "噪声" in inside.message and "偏高" not in inside.message
    assert outside.judgement == "outside spread" and "偏高 50%" in outside.message and "范围之外" in outside.message


def test_the_spread_may_be_a_verdict_or_a_compare_result_read_after_the_measurement():
    """``spread=`` takes what ``compare()`` / ``verdict_from_ratios`` give: ratio_min..ratio_max over rounds."""
    from labkit.labs.common.measure import verdict_from_ratios

    runs = []
    verdict = verdict_from_ratios([1.8, 2.1, 2.4], ratio=2.0, margin=0.05)
    p = display.predict("加速比？", lambda: runs.append(1) or 2.0, unit="倍", spread=lambda: verdict if runs else None,
                        lab="04", id="speedup")
    inside = p.reveal("2.3")
    assert inside.spread == (1.8, 2.4) and inside.judgement == "inside spread"
    outside = p.reveal("3")
    assert outside.judgement == "outside spread" and "偏高 50%" in outside.message and "1.8–2.4" in outside.message
    entry = read_summary("04")["predictions"]["speedup"]
    assert entry["measured"] == 2.0 and entry["spread"] == [1.8, 2.4] and entry["judgement"] == "outside spread"


def test_an_english_reveal_inside_the_spread_says_it_is_within_the_machines_noise():
    from labkit import set_language

    set_language("en")
    try:
        message = display.predict("?", 4.0, unit="×", spread=(3.0, 5.0)).reveal("3.5").message
    finally:
        set_language("zh")
    assert "inside what this machine measured 3–5 × across rounds" in message


@pytest.mark.parametrize("spread", [(1.0,), "wide", (1.0, "x")])
def test_a_spread_that_is_not_a_pair_is_refused_by_name(spread):
    with pytest.raises(ValueError, match="spread must be"):
        display.predict("?", 1.0, spread=spread).reveal("1")


def test_an_undefined_spread_gives_no_band():
    assert display.predict("?", 1.0, spread=(float("nan"), 2.0)).reveal("1").judgement == "relative error"


@pytest.mark.parametrize("measured, truth", [(1.3, "bigger"), (1.02, "same"), (0.7, "smaller")])
def test_a_direction_prediction_is_right_only_for_the_measured_direction(measured, truth):
    p = display.predict("比普通解码快还是慢？", lambda: measured, unit="倍", kind="direction", baseline=1.0)
    for guess in display.DIRECTIONS:
        assert p.reveal(guess).correct is (guess == truth)


def test_a_direction_guess_may_be_written_in_chinese():
    p = display.predict("?", 2.0, kind="direction")
    assert p.reveal("更大").correct and not p.reveal("更小").correct


def test_every_reveal_is_recorded_with_its_kind_guess_measured_value_and_judgement():
    display.predict("多少个？", 6, kind="exact", lab="02", id="count").reveal("5")
    display.predict("多慢？", 4.0, unit="倍", lab="02", id="slow", spread=(3.0, 5.0)).reveal("4.5")
    entries = read_summary("02")["predictions"]
    assert entries["count"] == {**entries["count"], "kind": "exact", "guess": 5.0, "measured": 6.0,
                                "judgement": "wrong", "correct": False}
    assert entries["slow"]["judgement"] == "inside spread" and entries["slow"]["spread"] == [3.0, 5.0]


def test_the_widget_offers_three_directions_and_locks_after_the_reveal():
    view = display.PredictionView(display.predict("?", 0.5, kind="direction"))
    assert [v for _label, v in view.choice.options] == list(display.DIRECTIONS)
    view.reveal()
    assert view.result is None
    view.choice.value = "smaller"
    view.reveal()
    assert view.result.correct and view.choice.disabled


@pytest.mark.parametrize("how, field", [({"kind": "close"}, "kind"), ({"lab": "02"}, "lab and id"),
                                        ({"same_within": -1}, "same_within")])
def test_a_bad_prediction_setting_is_refused_by_name(how, field):
    with pytest.raises(ValueError, match=field):
        display.predict("?", 1.0, **how)


def test_a_percentage_is_judged_in_percentage_points_not_relative_error():
    result = display.predict("浪费了百分之几？", lambda: 0.81, unit="%").reveal("4")
    assert "偏高 3.2 个百分点" in result.message and "396" not in result.message
    assert "偏低 0.3 个百分点" in display.predict("?", 0.81, unit="%").reveal("0.5").message
    assert "偏高 25%" in display.predict("?", 4.0, unit="倍").reveal("5").message     # other units stay relative


@pytest.mark.parametrize("guess, measured, same_side", [
    (0.5, 0.73, True), (0.01, 0.003, True), (0.5, 0.003, False), (0.01, 0.73, False), (0.05, 0.2, True)])
def test_a_p_value_is_judged_by_its_side_of_the_threshold_with_the_difference_beside_it(guess, measured, same_side):
    result = display.predict("p 值？", lambda: measured, kind="p_value").reveal(guess)
    assert result.correct is same_side and result.judgement == ("same side" if same_side else "other side")
    assert f"{abs(guess - measured):.2f}" in result.message and "%" not in result.message


def test_a_p_value_guess_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match="between 0 and 1"):
        display.predict("p 值？", 0.5, kind="p_value").reveal("1.5")
