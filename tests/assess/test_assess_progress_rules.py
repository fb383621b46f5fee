"""The progress view's numbers, each from its definition, on constructed summaries (no lab runs):
which entries count, how a lab's quiz size adds up over its quizzes, what "first try" means, which
export is refused and by what, and which words and numbers each cell renders."""

from __future__ import annotations

import json
import sys

import pytest

from labkit.assess.progress import LabProgress, lab_progress, load_export
from labkit.i18n import get_language, set_language
from labkit.report.results import SCHEMA

P = sys.modules["labkit.assess.progress"]         # the package's ``progress`` is the function of that name


@pytest.fixture
def english():
    before = get_language()
    set_language("en")
    yield
    set_language(before)


def summary(**sections):
    return {"schema": SCHEMA, "quiz": {}, "exercises": {}, "predictions": {}, **sections}


def test_a_labs_counts_are_of_its_entries_and_only_the_well_formed_ones():
    s = summary(quiz={"a": {"first_attempt_correct": True}, "b": {"first_attempt_correct": False},
                      "c": {}, "junk": 3},
                exercises={"x": {"passed": True, "passed_at_attempt": 1}, "y": {"passed": True, "passed_at_attempt": 2},
                           "z": {"passed": False}, "bad": "no"},
                predictions={"p": {"kind": "exact", "correct": True}, "q": {"correct": None}, "r": [1]},
                updated="2026-12-01")
    got = lab_progress("02", s)
    assert (got.lab, got.quiz_answered, got.quiz_first_right, got.quiz_size) == ("02", 3, 1, None)
    assert (got.exercises_attempted, got.exercises_passed, got.exercises_first_try) == (3, 2, 1)
    assert got.predictions == ({"id": "p", "kind": "exact", "correct": True}, {"id": "q", "correct": None})
    assert got.updated == "2026-12-01"
    assert got.judged_predictions == [{"id": "p", "kind": "exact", "correct": True}] and got.predictions_right == 1
    assert lab_progress("03", None) == LabProgress("03") == lab_progress("03", {})
    assert lab_progress("03", {"schema": SCHEMA}) == LabProgress("03")


def test_a_labs_quiz_size_is_the_sum_over_its_quizzes_of_each_ones_size():
    s = summary(quiz={"1": {"quiz": "final", "quiz_size": 11}, "2": {"quiz": "final", "quiz_size": 11},
                      "3": {"quiz": "s2", "quiz_size": 3}, "4": {"quiz": "s2", "quiz_size": 4},
                      "5": {"quiz_size": 2}, "6": {"quiz": "s9", "quiz_size": "7"}, "7": {"quiz": "s9"}})
    assert lab_progress("01", s).quiz_size == 11 + 4 + 2        # each quiz once, at its largest; a bad size ignored
    assert lab_progress("01", summary(quiz={"1": {"quiz_size": 0}})).quiz_size == 0


def test_every_lab_is_read_from_its_own_file(tmp_path):
    (tmp_path / "lab03.json").write_text(json.dumps(summary(quiz={"a": {"first_attempt_correct": True}})))
    (tmp_path / "lab05.json").write_text("not json")
    got = P.read_progress(tmp_path)
    assert [p.lab for p in got] == list(P.LABS) == ["01", "02", "03", "04", "05"]
    assert [p.quiz_answered for p in got] == [0, 0, 1, 0, 0]
    assert P.read_progress(str(tmp_path))[2].quiz_first_right == 1


def test_the_default_folder_is_the_set_one_then_results_then_make_labs_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "set"))
    assert P.default_folder() == tmp_path / "set"               # set, even before it exists
    monkeypatch.delenv("LABKIT_RESULTS")
    workspace = tmp_path / "work/results"
    monkeypatch.setattr(P, "_WORKSPACE", workspace)
    assert P.default_folder().resolve() == (tmp_path / "results").resolve()      # neither exists
    workspace.mkdir(parents=True)
    assert P.default_folder() == workspace
    (tmp_path / "results").mkdir()
    assert P.default_folder().resolve() == (tmp_path / "results").resolve()
    monkeypatch.setenv("LABKIT_RESULTS", "  ")
    assert P.default_folder().resolve() == (tmp_path / "results").resolve()


def test_an_export_holds_every_opened_labs_summary_under_the_learners_name(tmp_path, monkeypatch):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "lab02.json").write_text(json.dumps(summary(updated="u")), encoding="utf-8")
    path = P.export_progress(tmp_path / "out.json", folder, name="Ann")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert (data["schema"], data["learner"], list(data["labs"])) == ("labkit-progress/1", "Ann", ["02"])
    assert data["labs"]["02"]["updated"] == "u" and data["labs"]["02"]["schema"] == SCHEMA
    monkeypatch.setenv("LABKIT_LEARNER_ID", "anon-7")
    assert json.loads(P.export_progress(tmp_path / "o2.json", folder).read_text())["learner"] == "anon-7"
    name, labs = load_export(path.read_bytes())
    assert name == "Ann" and [p.updated for p in labs] == [None, "u", None, None, None]


@pytest.mark.parametrize("data,message", [
    ("{", "an exported progress file must be JSON: "),
    ("[1]", "schema must be 'labkit-progress/1' (written by export_progress), got 'list'"),
    ({"schema": "labkit-progress/2", "labs": {}}, "schema must be 'labkit-progress/1' (written by export_progress), "
                                                  "got 'labkit-progress/2'"),
    ({"schema": "labkit-progress/1", "labs": []}, "labs must be an object of lab number → results summary"),
    ({"schema": "labkit-progress/1"}, "labs must be an object"),
])
def test_a_file_that_is_not_an_export_is_refused_saying_what_is_wrong(data, message):
    with pytest.raises(ValueError) as info:
        load_export(data if isinstance(data, str) else json.dumps(data).encode())
    assert str(info.value).startswith(message)


def test_an_export_of_no_name_is_question_mark_and_a_lab_of_another_schema_counts_as_unopened():
    name, labs = load_export({"schema": "labkit-progress/1", "labs": {
        "01": summary(quiz={"a": {}}), "02": {**summary(quiz={"a": {}}), "schema": "other"}, "03": "x"}})
    assert name == "?"
    assert [p.quiz_answered for p in labs] == [1, 0, 0, 0, 0]
    assert load_export({"schema": "labkit-progress/1", "learner": 42, "labs": {}})[0] == "42"


def test_each_cell_renders_its_counts_in_english_and_chinese(english):
    p = LabProgress("01", quiz_answered=3, quiz_first_right=2, quiz_size=5, exercises_attempted=4, exercises_passed=3,
                    exercises_first_try=1, predictions=({"correct": True}, {"correct": False}, {"correct": None}))
    assert P._quiz_cell(p) == "2/5 (answered 3)"
    assert P._quiz_cell(LabProgress("01", quiz_answered=3, quiz_first_right=2)) == "2/3 (answered 3)"
    assert P._exercise_cell(p) == "passed 3/4 (first try 1)"
    assert P._prediction_cell(p) == "3 made, right 1/2"
    assert P._prediction_cell(LabProgress("01", predictions=({},))) == "1 made"
    empty = LabProgress("01")
    assert P._quiz_cell(empty) == P._exercise_cell(empty) == P._prediction_cell(empty) == "—"
    set_language("zh")
    assert P._quiz_cell(p) == "2/5（已答 3）"
    assert P._exercise_cell(p) == "通过 3/4（一次通过 1）"
    assert P._prediction_cell(p) == "3 个，对 1/2"


def test_a_predictions_judgement_and_its_measured_value_read_as_recorded(english):
    assert P._judgement({"judgement": "inside spread"}) == "inside the spread"
    assert P._judgement({"judgement": "right", "kind": "exact", "relative_error": 0.5}) == "right"
    assert P._judgement({"judgement": "outside spread", "kind": "measured", "relative_error": -0.125}) == (
        "outside the spread -12%")
    assert P._judgement({"judgement": "relative error", "kind": "measured", "relative_error": 0.3}) == (
        "relative error +30%")
    assert P._judgement({"judgement": "new word", "kind": "measured", "relative_error": "x"}) == "new word"
    assert P._judgement({}) == ""
    assert P._measured({"measured": 1234.5, "unit": "ms"}) == "1,234.5 ms"
    assert P._measured({"measured": 3, "unit": None}) == "3"
    assert P._measured({"measured": 30.0, "unit": "%", "spread": [25.0, 40.5]}) == "30 % (rounds 25–40.5)"
    assert P._measured({"measured": 1, "spread": [1, "x"]}) == "1"
    assert P._measured({"measured": 1, "spread": [1, 2, 3]}) == "1"
    assert P._number(True) == "True" and P._number(0.25) == "0.25" and P._number("n/a") == "n/a"
    set_language("zh")
    assert P._judgement({"judgement": "wrong"}) == "错"
    assert P._measured({"measured": 30.0, "unit": "%", "spread": [25.0, 40.0]}) == "30 %（各轮 25–40）"


def test_the_progress_page_has_a_row_per_lab_and_a_table_per_lab_with_predictions(english):
    labs = [LabProgress("01"), LabProgress("02", predictions=({"id": "slot", "question": "<b>Q</b>" + "x" * 100,
                                                                "kind": "exact", "guess": 150, "measured": 152,
                                                                "judgement": "wrong"},))]
    page = P.progress_html(labs)
    assert page.count("<tr>") == 3 + 2                     # head + 2 labs; head + 1 prediction
    assert "Lab 02: predictions beside the measurements" in page and "Lab 01:" not in page
    assert "&lt;b&gt;Q&lt;/b&gt;" + "x" * 72 + "</td>" in page          # the question cut to 80 characters
    assert "<td style='border:1px solid #ccc;padding:3px 8px;text-align:left'>152</td>" in page
    assert "nothing is sent anywhere" in page
    assert "slot" in P.progress_html([LabProgress("02", predictions=({"id": "slot"},))])


def test_the_class_view_lists_only_labs_with_something_done(english):
    done = LabProgress("02", quiz_answered=1)
    page = P.class_html([("<Ann>", [LabProgress("01"), done]), ("Bo", [LabProgress("01")])])
    assert "Class view (2 learners)" in page and "&lt;Ann&gt;" in page and page.count("<tr>") == 2
    assert "Bo" not in page
    for only in (LabProgress("03", exercises_attempted=1), LabProgress("04", predictions=({},))):
        assert P.class_html([("Cy", [only])]).count("<tr>") == 2
    assert "No progress file loaded yet." in P.class_html([]) and "<table" not in P.class_html([])
    assert P.Progress([done])._repr_html_() == P.progress_html([done])
    assert P.ClassView([("A", [done])])._repr_html_() == P.class_html([("A", [done])])


def test_entries_without_a_quiz_name_are_one_quiz_named_quiz_of_its_largest_size():
    s = summary(quiz={"1": {"quiz_size": 5}, "2": {"quiz": "quiz", "quiz_size": 3}, "3": {"quiz": "s2", "quiz_size": 2}})
    assert lab_progress("01", s).quiz_size == 5 + 2


def test_a_set_results_folder_wins_even_before_it_exists_and_over_make_labs_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    workspace = tmp_path / "work/results"
    workspace.mkdir(parents=True)
    monkeypatch.setattr(P, "_WORKSPACE", workspace)
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "set"))
    assert P.default_folder() == tmp_path / "set"


def test_the_progress_of_a_given_folder_and_of_an_export_is_per_lab_in_order(tmp_path):
    (tmp_path / "lab04.json").write_text(json.dumps(summary(quiz={"a": {"first_attempt_correct": True}})))
    assert [p.quiz_answered for p in P.progress(tmp_path).labs] == [0, 0, 0, 1, 0]
    name, labs = load_export({"schema": "labkit-progress/1", "learner": "a", "labs": {"02": summary()}})
    assert [p.lab for p in labs] == ["01", "02", "03", "04", "05"]


def test_a_judgement_without_a_translation_reads_as_written_in_chinese_too():
    before = get_language()
    set_language("zh")
    try:
        assert P._judgement({"judgement": "new word"}) == "new word"
        assert P._judgement({}) == ""
    finally:
        set_language(before)
