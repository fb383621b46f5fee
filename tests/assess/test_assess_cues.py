"""Wording is no cue: in no multiple-choice question is the right option the only one without an absolute
word ("always", "only", "never" ...), in either language; options are shuffled; a numeric answer's
explanation and its tolerance agree."""

from __future__ import annotations

import importlib
import re

import pytest

from labkit.assess import MultipleChoice
from tests.assess.lab_files import LABS

ABSOLUTE_ZH = ("一定", "总是", "从不", "只有", "只能", "只需", "只是", "只", "全部", "完全", "必须", "不会", "永远", "所有",
               "任何", "都", "绝不", "唯一", "必", "毫无", "根本", "从来", "一律", "凡是", "才是", "没有意义", "不可信")
ABSOLUTE_EN = ("always", "never", "only", "all", "every", "must", "nothing", "entire", "whole", "cannot", "no")
# Questions of banks outside this change that still gave the cue when this test was written: named here
# so the lead sees them; drop an id once its bank is reworded.
KNOWN = {"bt-chunked"}


def absolute_words(text: str, language: str) -> list[str]:
    if language == "zh":
        return [w for w in ABSOLUTE_ZH if w in text]
    return [w for w in ABSOLUTE_EN if re.search(rf"\b{w}\b", text.lower())]


def cue(question: MultipleChoice, language: str) -> bool:
    """True when the right option is the only one free of absolute words."""
    free = [not absolute_words(o[language], language) for o in question.options]
    return free[question.answer] and sum(free) == 1


def _choices(lab: str) -> list[MultipleChoice]:
    return [q for q in importlib.import_module(f"labkit.labs.{lab}.quiz").questions() if isinstance(q, MultipleChoice)]


def test_the_cue_detector_sees_a_cue_and_its_absence():
    def q(options):
        options = [{"zh": o, "en": o} for o in options]
        return MultipleChoice(question="q", options=options, answer=0, explanations=["e"] * len(options),
                              misconceptions=("",) + ("m",) * (len(options) - 1))
    assert cue(q(["读一遍权重", "总是更快", "只在采样时"]), "zh")
    assert not cue(q(["读一遍权重", "总是更快", "草稿更大时"]), "zh")
    assert cue(q(["reads weights once", "always faster", "only when sampling"]), "en")


@pytest.mark.parametrize("lab", LABS)
def test_no_right_option_is_the_only_one_without_an_absolute_word(lab):
    flagged = {q.id for q in _choices(lab) for language in ("zh", "en") if cue(q, language)}
    assert flagged - KNOWN == set(), f"{lab}: the right option is the only one without an absolute word in {flagged}"


def test_lab04_questions_without_a_meaningful_order_are_shuffled():
    assert all(q.shuffle for q in _choices("lab04_speculative"))
    greedy = next(q for q in _choices("lab04_speculative") if q.id == "sd-greedy-rule")
    assert {tuple(greedy.order(learner)) for learner in "abcdefgh"} != {(0, 1, 2, 3)}


def test_the_cost_question_accepts_what_its_explanation_shows():
    from labkit.labs.lab05_engine_choice.quiz import _cost
    q = _cost()
    explanation = q.explanation["zh"]
    shown = re.findall(r"\d+\.\d+", explanation.split("≈")[1])
    assert shown and all(q.check(value).correct for value in shown), (shown, explanation)
    assert q.check(f"{q.answer:.2f}").correct and q.check(f"{q.answer:.3f}").correct
    assert not q.check(f"{2 * q.answer:.3f}").correct
