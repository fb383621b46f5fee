"""A learner's progress, read from the labs' results summaries; a class view over exported files.

    from labkit.assess import progress, export_progress, class_view
    progress()                          # this workspace: one row per lab, then each lab's predictions
    export_progress("me.json")          # one file holding every lab's summary, to hand to an instructor
    class_view(["ann.json", "bo.json"]) # the instructor: one row per learner and lab

Everything comes from the local ``results/labNN.json`` files (``labkit.report.results``): the
first-attempt quiz score (each question's first answer, whatever came after), the exercises passed
(and at which attempt), and every prediction beside the value then measured with its judgement.
Nothing is sent anywhere; an export is a file the learner chooses to hand over.

Views are plain HTML with inline styles, so they look the same in JupyterLab and in Voila.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import ipywidgets as W

from labkit.assess.learner import learner_id
from labkit.assess.questions import format_number
from labkit.i18n import t
from labkit.report.results import SCHEMA, read_summary, results_dir

LABS = ("01", "02", "03", "04", "05")
EXPORT_SCHEMA = "labkit-progress/1"


@dataclass(frozen=True)
class LabProgress:
    """One lab's numbers, from its summary (zeros when the lab has not been opened)."""

    lab: str
    quiz_answered: int = 0
    quiz_first_right: int = 0
    quiz_size: int | None = None
    exercises_attempted: int = 0
    exercises_passed: int = 0
    exercises_first_try: int = 0
    predictions: tuple[dict, ...] = ()
    updated: str | None = None

    @property
    def judged_predictions(self) -> list[dict]:
        return [p for p in self.predictions if p.get("correct") is not None]

    @property
    def predictions_right(self) -> int:
        return sum(bool(p.get("correct")) for p in self.judged_predictions)


def lab_progress(lab: str, summary: dict | None) -> LabProgress:
    """``summary`` as ``read_summary`` returns it (None: nothing yet)."""
    if not summary:
        return LabProgress(lab)
    quiz = [q for q in summary.get("quiz", {}).values() if isinstance(q, dict)]
    exercises = [e for e in summary.get("exercises", {}).values() if isinstance(e, dict)]
    predictions = tuple({"id": key, **entry} for key, entry in summary.get("predictions", {}).items()
                        if isinstance(entry, dict))
    sizes: dict[str, int] = {}       # per quiz of the lab (its final quiz, short checks in sections): its size
    for q in quiz:
        if isinstance(q.get("quiz_size"), int):
            group = str(q.get("quiz", "quiz"))
            sizes[group] = max(sizes.get(group, 0), q["quiz_size"])
    return LabProgress(
        lab, quiz_answered=len(quiz), quiz_first_right=sum(bool(q.get("first_attempt_correct")) for q in quiz),
        quiz_size=sum(sizes.values()) if sizes else None,
        exercises_attempted=len(exercises), exercises_passed=sum(bool(e.get("passed")) for e in exercises),
        exercises_first_try=sum(e.get("passed_at_attempt") == 1 for e in exercises),
        predictions=predictions, updated=summary.get("updated"))


_WORKSPACE = Path(__file__).resolve().parents[2] / "work" / "results"     # make lab's workspace


def default_folder() -> Path:
    """``LABKIT_RESULTS`` or ``./results`` (``results_dir``); when neither exists — a dashboard
    served from ``labs/dashboards/`` — the ``work/results`` folder ``make lab`` gives the labs."""
    folder = results_dir()
    if folder.is_dir() or os.environ.get("LABKIT_RESULTS", "").strip():
        return folder
    return _WORKSPACE if _WORKSPACE.is_dir() else folder


def read_progress(folder: str | Path | None = None) -> list[LabProgress]:
    """Every lab's progress from ``folder`` (default: ``default_folder()``)."""
    folder = Path(folder) if folder is not None else default_folder()
    return [lab_progress(lab, read_summary(lab, folder / f"lab{lab}.json")) for lab in LABS]


# ----------------------------------------------------------------------------- export and import

def export_progress(path: str | Path, folder: str | Path | None = None, name: str | None = None) -> Path:
    """Write every lab's summary into one JSON file (for an instructor); returns its path.

    ``name`` labels the learner in a class view (default: the anonymous learner id)."""
    folder = Path(folder) if folder is not None else default_folder()
    labs = {lab: summary for lab in LABS if (summary := read_summary(lab, folder / f"lab{lab}.json"))}
    path = Path(path)
    path.write_text(json.dumps({"schema": EXPORT_SCHEMA, "learner": name or learner_id(), "labs": labs},
                               ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def load_export(data: bytes | str | dict) -> tuple[str, list[LabProgress]]:
    """(learner, per-lab progress) from an exported file's content; ValueError naming what is wrong."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"an exported progress file must be JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != EXPORT_SCHEMA:
        raise ValueError(f"schema must be {EXPORT_SCHEMA!r} (written by export_progress), "
                         f"got {data.get('schema') if isinstance(data, dict) else type(data).__name__!r}")
    labs = data.get("labs")
    if not isinstance(labs, dict):
        raise ValueError("labs must be an object of lab number → results summary")
    learner = str(data.get("learner") or "?")
    rows = []
    for lab in LABS:
        summary = labs.get(lab)
        valid = isinstance(summary, dict) and summary.get("schema") == SCHEMA
        rows.append(lab_progress(lab, summary if valid else None))
    return learner, rows


# ----------------------------------------------------------------------------- views

_TABLE = "border-collapse:collapse;margin:4px 0 10px 0;font-size:90%"
_CELL = "border:1px solid #ccc;padding:3px 8px;text-align:left"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str) -> str:
    header = "".join(f"<th style='{_CELL};background:#f3f3f3'>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='{_CELL}'>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}' style='{_TABLE}'><tr>{header}</tr>{body}</table>"


def _quiz_cell(p: LabProgress) -> str:
    if not p.quiz_answered:
        return "—"
    of = p.quiz_size or p.quiz_answered
    return html.escape(t(f"{p.quiz_first_right}/{of}（已答 {p.quiz_answered}）",
                         f"{p.quiz_first_right}/{of} (answered {p.quiz_answered})"))


def _exercise_cell(p: LabProgress) -> str:
    if not p.exercises_attempted:
        return "—"
    return html.escape(t(f"通过 {p.exercises_passed}/{p.exercises_attempted}（一次通过 {p.exercises_first_try}）",
                         f"passed {p.exercises_passed}/{p.exercises_attempted} (first try {p.exercises_first_try})"))


def _prediction_cell(p: LabProgress) -> str:
    if not p.predictions:
        return "—"
    judged = p.judged_predictions
    parts = [t(f"{len(p.predictions)} 个", f"{len(p.predictions)} made")]
    if judged:
        parts.append(t(f"对 {p.predictions_right}/{len(judged)}", f"right {p.predictions_right}/{len(judged)}"))
    return html.escape(t("，", ", ").join(parts))


_JUDGEMENT = {"right": {"zh": "对", "en": "right"}, "wrong": {"zh": "错", "en": "wrong"},
              "inside spread": {"zh": "在波动范围内", "en": "inside the spread"},
              "outside spread": {"zh": "在波动范围外", "en": "outside the spread"},
              "relative error": {"zh": "相对误差", "en": "relative error"}}


def _judgement(p: dict) -> str:
    words = _JUDGEMENT.get(p.get("judgement", ""), {})
    text = t(words.get("zh", p.get("judgement", "")), words.get("en", p.get("judgement", "")))
    error = p.get("relative_error")
    if p.get("kind") == "measured" and isinstance(error, (int, float)):
        text += f" {error:+.0%}"
    return text


def _number(value: Any) -> str:
    return format_number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _measured(p: dict) -> str:
    """The measured value with its unit, and the run's spread when the prediction recorded one."""
    text = f"{_number(p.get('measured'))} {p.get('unit') or ''}".strip()
    spread = p.get("spread")
    if isinstance(spread, list) and len(spread) == 2 and all(isinstance(v, (int, float)) for v in spread):
        text += t(f"（各轮 {_number(spread[0])}–{_number(spread[1])}）", f" (rounds {_number(spread[0])}–{_number(spread[1])})")
    return text


def _predictions_html(p: LabProgress) -> str:
    head = [t("预测", "prediction"), t("类型", "kind"), t("你的预测", "your guess"), t("测得", "measured"),
            t("判断", "judgement")]
    rows = [[html.escape(str(x.get("question", x["id"]))[:80]), html.escape(str(x.get("kind", ""))),
             html.escape(_number(x.get("guess"))),
             html.escape(_measured(x)), html.escape(_judgement(x))]
            for x in p.predictions]
    title = t(f"实验 {p.lab} 的预测与实测", f"Lab {p.lab}: predictions beside the measurements")
    return f"<h5 style='margin:6px 0 2px 0'>{html.escape(title)}</h5>" + _table(head, rows, "labkit-predictions")


def progress_html(labs: Sequence[LabProgress]) -> str:
    head = [t("实验", "lab"), t("测验（第一次就答对）", "quiz (right at the first attempt)"), t("练习", "exercises"),
            t("预测", "predictions")]
    rows = [[p.lab, _quiz_cell(p), _exercise_cell(p), _prediction_cell(p)] for p in labs]
    note = t("数据只来自本机工作区的 results/labNN.json，不会发送到任何地方。",
             "From this workspace's results/labNN.json only; nothing is sent anywhere.")
    detail = "".join(_predictions_html(p) for p in labs if p.predictions)
    title = t("学习进度", "Progress")
    return (f"<div class='labkit-progress'><h4 style='margin:2px 0'>{html.escape(title)}</h4>"
            + _table(head, rows, "labkit-progress-table") + detail
            + f"<div style='color:#666;font-size:85%'>{html.escape(note)}</div></div>")


def class_html(learners: Sequence[tuple[str, Sequence[LabProgress]]]) -> str:
    head = [t("学习者", "learner"), t("实验", "lab"), t("测验（第一次就答对）", "quiz (first attempt)"),
            t("练习", "exercises"), t("预测", "predictions")]
    rows = [[html.escape(name), p.lab, _quiz_cell(p), _exercise_cell(p), _prediction_cell(p)]
            for name, labs in learners for p in labs
            if p.quiz_answered or p.exercises_attempted or p.predictions]
    title = t(f"全班视图（{len(learners)} 位学习者）", f"Class view ({len(learners)} learners)")
    empty = "" if rows else f"<div>{html.escape(t('还没有载入任何进度文件。', 'No progress file loaded yet.'))}</div>"
    return (f"<div class='labkit-class'><h4 style='margin:2px 0'>{html.escape(title)}</h4>"
            + (_table(head, rows, "labkit-class-table") if rows else empty) + "</div>")


@dataclass
class Progress:
    """This workspace's progress; the last expression of a cell shows it."""

    labs: list[LabProgress] = field(default_factory=list)

    def _repr_html_(self) -> str:
        return progress_html(self.labs)


@dataclass
class ClassView:
    """Several learners' exported progress side by side."""

    learners: list[tuple[str, list[LabProgress]]] = field(default_factory=list)

    def _repr_html_(self) -> str:
        return class_html(self.learners)


def progress(folder: str | Path | None = None) -> Progress:
    """Per lab: first-attempt quiz score, exercises passed, predictions beside the measured values."""
    return Progress(read_progress(folder))


def class_view(files: Iterable[str | Path]) -> ClassView:
    """The instructor's view over exported files (``export_progress``)."""
    learners = []
    for path in files:
        learners.append(load_export(Path(path).read_bytes()))
    return ClassView(learners)


def class_upload() -> W.VBox:
    """The class view with an upload button for exported files (works in Voila, where there is no
    file browser); a file that is not an export is named with what is wrong, the others still shown."""
    upload = W.FileUpload(accept=".json", multiple=True, description=t("载入进度文件", "Load progress files"),
                          layout=W.Layout(width="auto"))
    view, problems = W.HTML(class_html([])), W.HTML()

    def show(_change=None) -> None:
        learners, errors = [], []
        for item in upload.value:
            try:
                learners.append(load_export(bytes(item["content"])))
            except ValueError as exc:
                errors.append(f"{item['name']}: {exc}")
        view.value = class_html(learners)
        problems.value = "".join(f"<div style='color:#b3261e'>{html.escape(e)}</div>" for e in errors)

    upload.observe(show, names="value")
    return W.VBox([upload, problems, view])
