"""Progress from the local results summaries: first-attempt quiz score, exercises passed, predictions
beside the measured values; exported files load into a class view, and bad files are named."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from labkit import set_language
from labkit.assess import class_view, export_progress, progress
from labkit.assess.progress import class_upload, load_export, read_progress
from labkit.labs.common.display import predict
from labkit.labs.exercises import exercise
from labkit.labs.lab02_paged_attention.quiz import quiz


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("LABKIT_LEARNER_ID", "test-learner")
    set_language("zh")
    return tmp_path / "results"


def _work_through_lab02():
    view = quiz().view()
    first, second = view.views[0], view.views[2]
    wrong = next(i for i in range(len(first.question.options)) if i != first.question.answer)
    first.answer(wrong)
    first.answer(first.question.answer)               # right at the second attempt: still a miss
    second.answer(second.question.answer)
    predict("位置 40 在第几个槽位？", 152, kind="exact", lab="02", id="slot").reveal("150")
    predict("慢百分之几？", 30.0, unit="%", lab="02", id="overhead", spread=(25.0, 40.0)).reveal("35")
    slot = exercise("slot_mapping")
    slot.check(lambda tables, seqs, positions, b: [0] * len(positions))
    slot.check(lambda tables, seqs, positions, b: [tables[s][p // b] * b + p % b for s, p in zip(seqs, positions)])


def test_progress_counts_first_attempts_exercises_and_predictions():
    _work_through_lab02()
    lab02 = read_progress()[1]
    assert (lab02.quiz_answered, lab02.quiz_first_right, lab02.quiz_size) == (2, 1, len(quiz().questions))
    assert (lab02.exercises_attempted, lab02.exercises_passed, lab02.exercises_first_try) == (1, 1, 0)
    kinds = {p["id"]: (p["kind"], p["guess"], p["measured"], p["judgement"]) for p in lab02.predictions}
    assert kinds == {"slot": ("exact", 150.0, 152.0, "wrong"), "overhead": ("measured", 35.0, 30.0, "inside spread")}


def test_the_progress_page_shows_each_lab_and_its_predictions():
    _work_through_lab02()
    page = progress()._repr_html_()
    assert "labkit-progress-table" in page and "1/11（已答 2）" in page
    assert "通过 1/1（一次通过 0）" in page and "在波动范围内" in page and "错" in page
    assert "不会发送到任何地方" in page


def test_an_untouched_workspace_shows_dashes_not_zeros():
    page = progress()._repr_html_()
    assert page.count("—") == 15                      # five labs × three columns


def test_exported_progress_loads_into_the_class_view(tmp_path):
    _work_through_lab02()
    ann = export_progress(tmp_path / "ann.json", name="Ann")
    bo = tmp_path / "bo.json"
    bo.write_text(json.dumps({"schema": "labkit-progress/1", "learner": "Bo", "labs": {}}), encoding="utf-8")
    page = class_view([ann, bo])._repr_html_()
    assert "全班视图（2 位学习者）" in page and "Ann" in page and "1/11" in page


@pytest.mark.parametrize("content, field", [(b"not json", "JSON"), (b'{"schema": "x"}', "schema"),
                                            (b'{"schema": "labkit-progress/1", "labs": []}', "labs")])
def test_a_file_that_is_not_an_export_is_refused_by_name(content, field):
    with pytest.raises(ValueError, match=field):
        load_export(content)


def test_the_upload_view_shows_good_files_and_names_bad_ones(tmp_path):
    _work_through_lab02()
    good = export_progress(tmp_path / "ann.json", name="Ann").read_bytes()
    box = class_upload()
    upload, problems, view = box.children
    when = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    upload.value = ({"name": "ann.json", "content": memoryview(good), "size": len(good), "type": "", "last_modified": when},
                    {"name": "junk.json", "content": memoryview(b"{}"), "size": 2, "type": "", "last_modified": when})
    assert "Ann" in view.value and "junk.json" in problems.value and "schema" in problems.value
