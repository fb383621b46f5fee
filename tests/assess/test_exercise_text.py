"""The exercises' text is data (``labkit/labs/<lab>/exercises.toml``, read by ``labkit.assess.bank.ExerciseText``):
each lab's file loads; every exercise shows its file's title, task and hints in both languages, and the file holds
exactly the lab's exercises; a malformed file is refused naming the file, the exercise and the field; a file is
parsed as TOML only, its text shown as written; and the files ship inside the installed package."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from labkit.assess.bank import BankError, ExerciseText, load_exercises
from labkit.labs.exercises import EXERCISES
from tests.assess.lab_files import LABS, REPO, leaf_values, tomllib


def text_file(lab: str) -> Path:
    return REPO / "labkit" / "labs" / lab / "exercises.toml"


def lab_module(lab: str):
    return importlib.import_module(f"labkit.labs.{lab}.exercises")


# ----------------------------------------------------------------------------- each exercise says what its file says

@pytest.mark.parametrize("lab", LABS)
def test_a_labs_exercise_file_loads_with_every_exercise_of_the_lab_in_order(lab):
    module = lab_module(lab)
    assert module.TEXT.path == text_file(lab)
    texts = load_exercises(text_file(lab), module.TEXT.names)
    assert list(texts) == list(module.TEXT.names) == list(tomllib.loads(text_file(lab).read_text(encoding="utf-8")))
    registered = [name for name, make in EXERCISES.items() if make.__module__ == module.__name__]
    assert registered == list(module.TEXT.names)          # the file names exactly the exercises the lab offers


@pytest.mark.parametrize("name", list(EXERCISES))
def test_an_exercise_shows_its_files_title_task_and_hints_in_both_languages(name):
    make = EXERCISES[name]
    module = importlib.import_module(make.__module__)
    file = load_exercises(module.TEXT.path, module.TEXT.names)[name]
    ex = make()
    assert ex.name == name
    assert (ex.title, ex.task, list(ex.hints)) == (file["title"], file["task"], file["hints"])
    for text in (ex.title, ex.task, *ex.hints):
        assert set(text) == {"zh", "en"} and all(s.strip() for s in text.values())


@pytest.mark.parametrize("lab", LABS)
def test_an_exercises_text_is_no_longer_written_in_python(lab):
    path = REPO / "labkit" / "labs" / lab / "exercises.py"
    calls = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Exercise"]
    assert len(calls) == len(lab_module(lab).TEXT.names)
    for call in calls:
        assert not {k.arg for k in call.keywords} & {"name", "title", "task", "hints"}
        spread, = [k.value for k in call.keywords if k.arg is None]         # **TEXT("name")
        assert isinstance(spread, ast.Call) and spread.func.id == "TEXT"


def test_a_teachers_edit_shows_in_the_exercise_and_the_file_is_read_once(tmp_path):
    path = write(tmp_path, exercise("a", title="新标题") + exercise("b"))
    text = ExerciseText(path, ("a", "b"))
    first = text("a")
    assert first == {"name": "a", "title": {"zh": "新标题", "en": "Title"}, "task": {"zh": "任务", "en": "Task"},
                     "hints": [{"zh": "提示一", "en": "Hint one"}, {"zh": "提示二", "en": "Hint two"}]}
    first["hints"].append({"zh": "x", "en": "x"})
    first["title"]["zh"] = "改了"
    path.write_text("not read again", encoding="utf-8")
    assert text("a")["hints"] == [{"zh": "提示一", "en": "Hint one"}, {"zh": "提示二", "en": "Hint two"}]
    assert text("a")["title"]["zh"] == "新标题"
    with pytest.raises(ValueError, match="'c' is not one of the exercises"):
        text("c")


def test_an_exercise_may_have_no_hints(tmp_path):
    path = write(tmp_path, exercise("a", hints=(), extra="hints = []\n"))
    assert load_exercises(path, ("a",))["a"]["hints"] == []


# ----------------------------------------------------------------------------- a malformed file is refused by name

def exercise(name: str = "a", title: str = "标题", extra: str = "", hints: tuple[str, ...] | None = None,
             fields: str | None = None) -> str:
    body = fields if fields is not None else (f'title.zh = "{title}"\ntitle.en = "Title"\n'
                                              'task.zh = "任务"\ntask.en = "Task"\n')
    hint_tables = ('zh = "提示一"\nen = "Hint one"\n', 'zh = "提示二"\nen = "Hint two"\n') if hints is None else hints
    return f"[{name}]\n{body}{extra}" + "".join(f"\n[[{name}.hints]]\n{h}" for h in hint_tables) + "\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exercises.toml"
    path.write_text(text, encoding="utf-8")
    return path


BOTH = exercise("a") + exercise("b")
MALFORMED = {
    "unknown exercise field": (exercise("a", extra='answer = "42"\n') + exercise("b"),
                               "exercise 'a': unknown field 'answer' \\(known: title, task, hints\\)"),
    "unknown hint field": (exercise("a", hints=('zh = "提示"\nen = "Hint"\nfr = "Indice"\n',)) + exercise("b"),
                           "exercise 'a': hint 1: unknown field 'fr' \\(languages: zh, en\\)"),
    "unknown language": (exercise("a", extra='title.fr = "Titre"\n') + exercise("b"),
                         "exercise 'a': unknown field 'title.fr'"),
    "missing title language": (BOTH.replace('title.en = "Title"\n', "", 1), "exercise 'a': field 'title.en' is missing"),
    "missing task": (exercise("a") + exercise("b", fields='title.zh = "标题"\ntitle.en = "Title"\n'),
                     "exercise 'b': field 'task' is missing: it needs task.zh and task.en"),
    "missing hint language": (exercise("a") + exercise("b", hints=('zh = "提示"\n',)),
                              "exercise 'b': hint 1: field 'en' is missing"),
    "empty task": (BOTH.replace('task.zh = "任务"', 'task.zh = "  "', 1),
                   "exercise 'a': field 'task.zh' must be non-empty text, got '  '"),
    "empty hint": (exercise("a", hints=('zh = "提示"\nen = "Hint"\n', 'zh = "提示"\nen = ""\n')) + exercise("b"),
                   "exercise 'a': hint 2: field 'en' must be non-empty text"),
    "text is not text": (BOTH.replace('task.en = "Task"', "task.en = 3", 1),
                         "exercise 'a': field 'task.en' must be non-empty text, got 3"),
    "missing exercise": (exercise("a"), "exercise 'b' is missing: every exercise of the lab has a \\[b\\] table"),
    "extra exercise": (BOTH + exercise("c"), "exercise 'c' is not an exercise of this lab \\(its exercises: a, b\\)"),
    "misspelt exercise": (exercise("a") + exercise("bb"), "exercise 'bb' is not an exercise of this lab"),
    "field outside any exercise": ('title.zh = "标题"\n' + BOTH, "field 'title' at the top: it belongs under its"),
    "exercise not a table": ('b = "text"\n' + exercise("a"), "exercise 'b': must be a \\[b\\] table"),
    "missing hints": (exercise("a", hints=()) + exercise("b"), "exercise 'a': field 'hints' is missing"),
    "hints not a list": (exercise("a", hints=(), extra='hints.zh = "提示"\nhints.en = "Hint"\n') + exercise("b"),
                         "exercise 'a': field 'hints' must be a list: \\[\\[a.hints\\]\\] tables"),
    "hints a list of strings": (exercise("a", hints=(), extra='hints = ["提示", "Hint"]\n') + exercise("b"),
                                "exercise 'a': hint 1: field 'hints' must hold tables with zh and en"),
    "not TOML": (BOTH + 'task.zh = "unterminated\n', "not valid TOML"),
    "the same exercise twice": (BOTH + exercise("a"), "not valid TOML"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_exercise_file_is_refused_naming_the_file_the_exercise_and_the_field(tmp_path, case):
    text, message = MALFORMED[case]
    path = write(tmp_path, text)
    with pytest.raises(BankError, match=f"^{re.escape(str(path))}: {message}"):
        load_exercises(path, ("a", "b"))
    with pytest.raises(BankError, match=f"^{re.escape(str(path))}: {message}"):
        ExerciseText(path, ("a", "b"))("a")              # an exercise built from a malformed file is refused too


def test_the_well_formed_file_the_malformed_cases_start_from_loads(tmp_path):
    texts = load_exercises(write(tmp_path, BOTH), ("a", "b"))
    assert list(texts) == ["a", "b"]
    assert texts["b"] == {"title": {"zh": "标题", "en": "Title"}, "task": {"zh": "任务", "en": "Task"},
                          "hints": [{"zh": "提示一", "en": "Hint one"}, {"zh": "提示二", "en": "Hint two"}]}


# ----------------------------------------------------------------------------- data, never code

def test_an_exercise_files_text_is_shown_as_written_never_run(tmp_path, monkeypatch):
    code = "{__import__('os').getcwd()} __import__('os').system('exit 1'); raise SystemExit"
    path = write(tmp_path, exercise("a", title=code, extra="hints = []\n", hints=()))
    monkeypatch.setattr("os.system", lambda *_: pytest.fail("the file's text was run"))
    text = ExerciseText(path, ("a",))("a")
    assert text["title"] == {"zh": code, "en": "Title"}


@pytest.mark.parametrize("lab", LABS)
def test_a_labs_exercise_file_holds_only_text(lab):
    text = text_file(lab).read_text(encoding="utf-8")
    assert {type(v) for v in leaf_values(tomllib.loads(text))} == {str}
    assert text.startswith("# ")                                       # the header tells a teacher what it is
