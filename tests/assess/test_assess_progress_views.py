"""What a learner and an instructor read on the progress views (``labkit/assess/progress.py``): each
table found by its class, its column heads and cells in the page's language, the headings and the note,
and no stray text between them; the upload widget's button and what it shows before and after files
arrive. The page is read as a browser reads it (tag names in any case), not compared as a string."""

from __future__ import annotations

import datetime as dt
from html.parser import HTMLParser

import pytest

from labkit.assess.progress import LabProgress, class_html, class_upload, progress_html
from labkit.i18n import get_language, set_language


class Page(HTMLParser):
    """The text of a view, by where it sits: headings (h4, h5), tables (class, head cells, rows of
    cells), leaf divs (notes, messages) and stray text, which sits anywhere else (between tables,
    between rows, after the view) and which a browser shows out of place."""

    def __init__(self, markup: str):
        super().__init__()
        self.headings: list[str] = []
        self.tables: list[tuple[str, list[str], list[list[str]]]] = []
        self.notes: list[str] = []
        self.stray: list[str] = []
        self._open: list[dict] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        if self._open:
            self._open[-1]["children"] += 1
        if tag == "table":
            self.tables.append((dict(attrs).get("class", ""), [], []))
        elif tag == "tr":
            self.tables[-1][2].append([])
        self._open.append({"tag": tag, "text": "", "children": 0})

    def handle_endtag(self, tag):
        element = self._open.pop()
        assert element["tag"] == tag, f"<{element['tag']}> closed by </{tag}>"
        text = element["text"]
        if tag not in ("h4", "h5", "th", "td") and element["children"] and text.strip():
            self.stray.append(text)                     # text beside the elements of a div, a table or a row
        if tag in ("h4", "h5"):
            self.headings.append(text)
        elif tag == "th":
            self.tables[-1][1].append(text)
        elif tag == "td":
            self.tables[-1][2][-1].append(text)
        elif tag == "tr" and not self.tables[-1][2][-1]:
            self.tables[-1][2].pop()                    # the head's row: its cells are the head
        elif tag == "div" and not element["children"]:
            self.notes.append(text)

    def handle_data(self, data):
        if self._open:
            self._open[-1]["text"] += data
        elif data.strip():
            self.stray.append(data)                     # after the view


@pytest.fixture(params=["en", "zh"])
def language(request):
    before = get_language()
    set_language(request.param)
    yield request.param
    set_language(before)


def words(language, en, zh):
    return en if language == "en" else zh


SLOT = {"id": "slot", "question": "Which slot holds position 40?", "kind": "exact", "guess": 150, "measured": 152,
        "judgement": "wrong", "correct": False}
OVERHEAD = {"id": "overhead", "question": "How much slower?", "guess": 35, "measured": 30.0, "unit": "%",
            "judgement": "inside spread", "correct": True}           # no kind recorded: a blank cell, not "None"
TOKENS = {"id": "tokens", "kind": "measured", "guess": 1200, "measured": 1000, "unit": "tok/s",
          "judgement": "relative error", "relative_error": 0.2}


def test_the_progress_page_reads_its_title_the_labs_table_each_labs_predictions_then_the_note(language):
    labs = [LabProgress("01"), LabProgress("02", quiz_answered=2, quiz_first_right=1, quiz_size=4,
                                           predictions=(SLOT, OVERHEAD)),
            LabProgress("03", exercises_attempted=1, exercises_passed=1, exercises_first_try=1, predictions=(TOKENS,))]
    page = Page(progress_html(labs))
    assert page.headings == words(language,
                                  ["Progress", "Lab 02: predictions beside the measurements",
                                   "Lab 03: predictions beside the measurements"],
                                  ["学习进度", "实验 02 的预测与实测", "实验 03 的预测与实测"])
    assert [cls for cls, _, _ in page.tables] == ["labkit-progress-table", "labkit-predictions", "labkit-predictions"]
    (_, head, rows), (_, head02, rows02), (_, head03, rows03) = page.tables
    assert head == words(language, ["lab", "quiz (right at the first attempt)", "exercises", "predictions"],
                         ["实验", "测验（第一次就答对）", "练习", "预测"])
    assert [row[0] for row in rows] == ["01", "02", "03"] and all(len(row) == 4 for row in rows)
    assert rows[1][1] == words(language, "1/4 (answered 2)", "1/4（已答 2）")
    assert head02 == head03 == words(language, ["prediction", "kind", "your guess", "measured", "judgement"],
                                     ["预测", "类型", "你的预测", "测得", "判断"])
    assert rows02 == [["Which slot holds position 40?", "exact", "150", "152", words(language, "wrong", "错")],
                      ["How much slower?", "", "35", "30 %", words(language, "inside the spread", "在波动范围内")]]
    assert rows03 == [["tokens", "measured", "1,200", "1,000 tok/s", words(language, "relative error +20%", "相对误差 +20%")]]
    assert page.notes == [words(language, "From this workspace's results/labNN.json only; nothing is sent anywhere.",
                                "数据只来自本机工作区的 results/labNN.json，不会发送到任何地方。")]
    assert page.stray == []


def test_the_class_view_reads_its_title_then_one_row_per_learner_and_lab_with_something_done(language):
    ann = [LabProgress("01"), LabProgress("02", quiz_answered=1, quiz_first_right=1)]
    bo = [LabProgress("04", exercises_attempted=2, exercises_passed=1)]
    page = Page(class_html([("Ann", ann), ("Bo", bo)]))
    assert page.headings == [words(language, "Class view (2 learners)", "全班视图（2 位学习者）")]
    assert [(cls, head) for cls, head, _ in page.tables] == [("labkit-class-table", words(
        language, ["learner", "lab", "quiz (first attempt)", "exercises", "predictions"],
        ["学习者", "实验", "测验（第一次就答对）", "练习", "预测"]))]
    assert [row[:2] for row in page.tables[0][2]] == [["Ann", "02"], ["Bo", "04"]]
    assert page.notes == [] and page.stray == []


def test_a_class_view_of_no_file_says_none_is_loaded_and_shows_no_table(language):
    page = Page(class_html([]))
    assert page.headings == [words(language, "Class view (0 learners)", "全班视图（0 位学习者）")]
    assert page.tables == [] and page.stray == []
    assert page.notes == [words(language, "No progress file loaded yet.", "还没有载入任何进度文件。")]


def upload_item(name: str, content: bytes) -> dict:
    when = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    return {"name": name, "content": memoryview(content), "size": len(content), "type": "", "last_modified": when}


def test_the_upload_button_takes_several_json_exports_at_once_and_says_so(language):
    upload, problems, view = class_upload().children
    assert ".json" in [kind.strip().lower() for kind in upload.accept.split(",")]   # the picker offers exports
    assert upload.multiple                              # a whole class in one pick
    assert upload.description == words(language, "Load progress files", "载入进度文件")
    # The widgets' default button width cuts a label this long; "auto" sizes the button to its label.
    assert upload.layout.width.lower() == "auto"
    assert Page(view.value).notes == [words(language, "No progress file loaded yet.", "还没有载入任何进度文件。")]
    assert problems.value == ""


def test_each_file_that_is_not_an_export_is_named_on_its_own_line():
    upload, problems, view = class_upload().children
    upload.value = (upload_item("a.json", b"{}"), upload_item("b.json", b"not json"))
    page = Page(problems.value)
    assert [note.split(":")[0] for note in page.notes] == ["a.json", "b.json"] and page.stray == []
    assert "schema must be" in page.notes[0] and "must be JSON" in page.notes[1]
    assert Page(view.value).tables == []
