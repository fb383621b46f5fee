"""Every lab's question bank at once: option count, explanations, misconceptions and the length cue."""

from __future__ import annotations

import importlib

import plotly.graph_objects as go
import pytest

from labkit.assess import MultipleChoice, Numeric, Ordering, WhichFigure
from labkit.assess.bank import Row, answer_is_longest, longest_share, render
from tests.assess.lab_files import LABS


def bank(lab: str) -> list:
    return importlib.import_module(f"labkit.labs.{lab}.quiz").questions()


def choices(lab: str) -> list[MultipleChoice]:
    return [q for q in bank(lab) if isinstance(q, MultipleChoice)]


@pytest.mark.parametrize("lab", LABS)
@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_right_option_is_the_longest_in_at_most_40_percent_of_a_labs_questions(lab, language):
    share = longest_share(bank(lab), language)
    longest = [q.id for q in choices(lab) if answer_is_longest(q, language)]
    assert share <= 0.40, f"{lab} ({language}): the answer is the longest option in {share:.0%}: {longest}"


@pytest.mark.parametrize("lab", LABS)
def test_every_multiple_choice_question_has_four_or_more_explained_options(lab):
    for q in choices(lab):
        assert len(q.options) >= 4, q.id
        assert len(q.explanations) == len(q.options), q.id
        for option, why in zip(q.options, q.explanations):
            assert option["zh"].strip() and option["en"].strip(), q.id
            assert why["zh"].strip() and why["en"].strip(), q.id


@pytest.mark.parametrize("lab", LABS)
def test_every_distractor_names_the_misconception_it_stands_for(lab):
    for q in choices(lab):
        named = [bool(m.strip()) for m in q.misconceptions]
        assert named == [i != q.answer for i in range(len(q.options))], q.id


@pytest.mark.parametrize("lab", LABS)
def test_only_the_answer_is_judged_right_and_numeric_questions_say_why(lab):
    for q in bank(lab):
        assert q.check(q.answer).correct
        if isinstance(q, MultipleChoice):
            assert [q.check(i).correct for i in range(len(q.options))].count(True) == 1
        else:
            assert isinstance(q, Numeric) and q.explanation and q.hint


def test_question_ids_are_unique_across_all_labs():
    ids = [q.id for lab in LABS for q in choices(lab)]
    assert len(ids) == len(set(ids))


def test_the_longest_share_counts_a_tie_but_not_options_all_of_one_length():
    long_tie, = render([Row("t", ("q", "q"), [("aaaa", "aaaa", "w", "w", ""), ("bbbb", "bbbb", "w", "w", "m"),
                                               ("c", "c", "w", "w", "m"), ("d", "d", "w", "w", "m")])])
    numbers, = render([Row("n", ("q", "q"), [("0.59", "0.59", "w", "w", ""), ("0.80", "0.80", "w", "w", "m"),
                                              ("0.41", "0.41", "w", "w", "m"), ("0.84", "0.84", "w", "w", "m")])])
    assert answer_is_longest(long_tie, "en") and not answer_is_longest(numbers, "en")
    assert longest_share([long_tie, numbers], "zh") == 0.5


def test_a_row_whose_distractor_names_no_misconception_is_refused():
    with pytest.raises(ValueError, match="option 1 is a distractor"):
        Row("x", ("q", "q"), [("a", "a", "w", "w", ""), ("b", "b", "w", "w", "")])


def test_lab05_states_the_tensorrt_llm_backend_change_with_the_cited_versions():
    converge = next(q for q in choices("lab05_engine_choice") if q.id == "ec-converge")
    right = converge.options[converge.answer]
    assert "v0.17" in right["zh"] and "1.4" in right["zh"] and "1.4" in right["en"]
    wrong_1_0 = next(o for i, o in enumerate(converge.options) if "1.0" in o["en"])
    assert converge.options.index(wrong_1_0) != converge.answer


def test_a_question_on_the_learners_own_measurement_appears_once_it_is_measured(tmp_path, monkeypatch):
    from labkit.report.results import record
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    assert not any(q.id == "kv-own-request-mib" for q in bank("lab01_kv_cache") if isinstance(q, Numeric))
    record("01", "predictions", "kv-bytes-per-token", {"kind": "exact", "guess": 1, "measured": 23040})
    own = next(q for q in bank("lab01_kv_cache") if isinstance(q, Numeric) and q.id == "kv-own-request-mib")
    assert "23,040" in own.question["zh"] and own.check(2048 * 23040 / 2**20).correct


@pytest.mark.parametrize("lab", LABS)
@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_right_option_is_not_the_shortest_in_most_questions_either(lab, language):
    """Balancing the length cue must not plant the opposite one ("pick the shortest")."""
    qs = choices(lab)
    shortest = []
    for q in qs:
        lengths = [len(o[language]) for o in q.options]
        if lengths[q.answer] == min(lengths) < max(lengths):
            shortest.append(q.id)
    assert len(shortest) <= len(qs) // 2, f"{lab} ({language}): the answer is the shortest option in {shortest}"


# ----------------------------------------------------------------------------- ordering and which-figure checks

def section_checks(lab: str) -> list:
    """The questions a lab asks inside its sections (``quiz.section_checks()``), besides its final quiz."""
    module = importlib.import_module(f"labkit.labs.{lab}.quiz")
    return module.section_checks() if hasattr(module, "section_checks") else []


def test_the_labs_ask_an_ordering_and_a_which_figure_question_somewhere():
    kinds = {type(q).__name__ for lab in LABS for q in section_checks(lab)}
    assert {"Ordering", "WhichFigure"} <= kinds


@pytest.mark.parametrize("lab", LABS)
def test_every_ordering_starts_shuffled_explains_each_step_and_names_a_pair_for_every_wrong_neighbour(lab):
    for q in [q for q in section_checks(lab) if isinstance(q, Ordering)]:
        assert len(q.reasons) == len(q.items) and all(r["zh"].strip() and r["en"].strip() for r in q.reasons), q.id
        assert q.explanation["zh"].strip() and q.explanation["en"].strip(), q.id
        for learner in ("a", "b", "c", "d", "e", "f", "g", "h"):
            assert q.start_order(learner) != q.answer, q.id
        assert len({tuple(q.start_order(x)) for x in "abcdefgh"}) > 1, f"{q.id}: every learner starts the same"
        for language in ("zh", "en"):                  # the right order is not the items sorted by length
            lengths = [len(i[language]) for i in q.items]
            assert lengths != sorted(lengths) and lengths != sorted(lengths, reverse=True), (q.id, language)
        for i in range(len(q.items) - 1):              # swap each neighbouring pair: that pair is named
            order = q.answer
            order[i], order[i + 1] = order[i + 1], order[i]
            message = q.check(order).message
            assert not q.check(order).correct and q.items[i]["zh"] in message and q.reasons[i + 1]["zh"] in message


@pytest.mark.parametrize("lab", LABS)
def test_every_which_figure_question_has_titleless_distinct_figures_and_named_misreadings(lab):
    for q in [q for q in section_checks(lab) if isinstance(q, WhichFigure)]:
        figures = [q.figure(i) for i in range(len(q.figures))]
        assert 2 <= len(figures) <= 4 and all(isinstance(f, go.Figure) for f in figures), q.id
        assert all(not (f.layout.title.text or "") for f in figures), f"{q.id}: a figure's title may tell"
        assert len({f.to_json() for f in figures}) == len(figures), f"{q.id}: two figures are the same"
        for i, (why, misreading) in enumerate(zip(q.explanations, q.misconceptions)):
            assert why["zh"].strip() and why["en"].strip(), q.id
            assert bool(misreading.strip()) == (i != q.answer), q.id
        assert [q.check(i).correct for i in range(len(figures))].count(True) == 1
        positions = {q.order(x).index(q.answer) for x in "abcdefghijkl"}
        assert len(positions) > 1, f"{q.id}: the answer is always at the same letter"


def test_section_check_ids_do_not_clash_with_quiz_ids():
    ids = [q.id for lab in LABS for q in [*choices(lab), *section_checks(lab)]]
    assert len(ids) == len(set(ids))


def test_lab02s_pool_maps_show_what_their_explanations_say():
    """The which-figure answer is the only map where the queue head waits with enough free slots in
    total; the paged map has scattered requests, the max-length map reserved-but-empty slots."""
    from labkit.labs.lab02_paged_attention import pool_maps as pm

    exact, max_len, paged = (pm.pool_map(layout) for layout in pm.LAYOUTS)
    assert exact.externally_fragmented and exact.free_slots >= exact.waiting_need > max(exact.holes())
    assert not max_len.externally_fragmented and max_len.reserved_empty > max_len.num_slots // 2
    assert not paged.externally_fragmented and paged.scattered() >= 2 and paged.free_slots < paged.waiting_need
    question = next(q for q in section_checks("lab02_paged_attention") if isinstance(q, WhichFigure))
    assert str(exact.free_slots) in question.explanations[0]["zh"] and str(max(exact.holes())) in question.explanations[0]["zh"]


def test_lab04_asks_about_the_learners_own_tokens_per_step_once_measured(tmp_path, monkeypatch):
    from labkit.report.results import record
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    assert not any(q.id == "sd-own-speedup" for q in bank("lab04_speculative") if isinstance(q, Numeric))
    record("04", "predictions", "ngram-tokens-per-step", {"kind": "measured", "guess": 2, "measured": 2.7})
    own = next(q for q in bank("lab04_speculative") if isinstance(q, Numeric) and q.id == "sd-own-speedup")
    assert "2.70" in own.question["zh"] and own.check(1.8).correct and not own.check(2.7).correct
