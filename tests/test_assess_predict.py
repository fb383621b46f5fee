"""Predictions by kind: exact (right or wrong, with the working), measured (relative error and the
run's spread), direction (bigger / same / smaller); each reveal recorded in the lab's summary."""

from __future__ import annotations

import pytest

from labkit.labs.common import display
from labkit.labs.common.results import read_summary


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
    assert inside.judgement == "inside spread" and "波动范围 3.6–4.5" in inside.message
    assert outside.judgement == "outside spread" and "偏高 50%" in outside.message


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
