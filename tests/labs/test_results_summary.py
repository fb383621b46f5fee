"""The lab results summary (labkit.report.results): where it lives, what it keeps, and that a
damaged or unwritable workspace never stops a lab."""

import json

import pytest

from labkit.report import results


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def test_a_recorded_entry_is_read_back_with_schema_lab_and_machine(workspace):
    path = results.record("04", "verdicts", "ngram_copy", {"ratio": 2.1, "direction": "greater"})
    assert path == workspace / "lab04.json"
    data = results.read_summary("04")
    assert data["schema"] == results.SCHEMA and data["lab"] == "04"
    assert data["verdicts"]["ngram_copy"] == {"ratio": 2.1, "direction": "greater"}
    assert data["machine"]["cores"] >= 1 and data["machine"]["cpu"]
    assert data["predictions"] == {} and data["quiz"] == {} and data["exercises"] == {}


def test_recording_an_id_again_replaces_it_and_keeps_the_others():
    results.record("02", "predictions", "a", {"guess": 1})
    results.record("02", "predictions", "b", {"guess": 2})
    results.record("02", "predictions", "a", {"guess": 3})
    assert results.read_summary("02")["predictions"] == {"a": {"guess": 3}, "b": {"guess": 2}}


def test_non_finite_numbers_and_tuples_are_stored_as_json():
    results.record("03", "verdicts", "x", {"ratio": float("nan"), "span": (1.0, float("inf"))})
    assert results.read_summary("03")["verdicts"]["x"] == {"ratio": None, "span": [1.0, None]}


def test_a_missing_or_damaged_summary_reads_as_none(workspace):
    assert results.read_summary("05") is None
    workspace.mkdir(parents=True)
    (workspace / "lab05.json").write_text("{not json")
    assert results.read_summary("05") is None
    (workspace / "lab05.json").write_text(json.dumps({"schema": "other"}))
    assert results.read_summary("05") is None
    assert results.record("05", "quiz", "q1", {"first_attempt_correct": True}) is not None
    assert results.read_summary("05")["quiz"]["q1"]["first_attempt_correct"] is True


def test_an_unwritable_workspace_returns_none_instead_of_raising(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LABKIT_RESULTS", str(blocker / "results"))
    assert results.record("01", "verdicts", "v", {"a": 1}) is None


@pytest.mark.parametrize("lab, section, key", [("4", "verdicts", "k"), ("04", "notes", "k"), ("04", "quiz", "")])
def test_bad_arguments_name_the_field(lab, section, key):
    with pytest.raises(ValueError, match="lab|section|key"):
        results.record(lab, section, key, {})
