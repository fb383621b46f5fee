"""The quizzes' multiple-choice text is data (``labkit/labs/<lab>/quiz.toml``, read by ``labkit.assess.bank.load``):
each quiz asks exactly its file's questions, in file order, with the file's text in both languages; a malformed
file is refused naming the file, the question and the field; a file is parsed as TOML only, its text shown as
written; and the files ship inside the installed package."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
from pathlib import Path

import pytest

from labkit.assess import MultipleChoice, bank
from labkit.assess.bank import BankError, from_file, load, render
from tests.assess.lab_files import LABS, REPO, leaf_values, tomllib


def bank_file(lab: str) -> Path:
    return REPO / "labkit" / "labs" / lab / "quiz.toml"


# ----------------------------------------------------------------------------- each quiz asks its file

@pytest.mark.parametrize("lab", LABS)
def test_a_quiz_asks_exactly_its_files_questions_in_file_order_with_the_files_text(lab):
    asked = [q for q in importlib.import_module(f"labkit.labs.{lab}.quiz").questions() if isinstance(q, MultipleChoice)]
    rows = load(bank_file(lab))
    assert [q.id for q in asked] == [row.id for row in rows]
    assert asked == render(rows)                   # stems, options, feedback and misconceptions, zh and en
    for q, row in zip(asked, rows):
        assert q.question == {"zh": row.question[0], "en": row.question[1]}
        assert [o["en"] for o in q.options] == [o.en for o in row.options]


def test_computed_questions_follow_the_question_they_are_placed_after(tmp_path):
    path = write(tmp_path, question("a") + question("b"))
    assert [getattr(q, "id", q) for q in from_file(path, after={"a": ["n1", "n2"]})] == ["a", "n1", "n2", "b"]
    with pytest.raises(BankError, match=rf"^{re.escape(str(path))}: question 'gone' is missing: the quiz places"):
        from_file(path, after={"gone": ["n1"]})


def test_a_teachers_new_question_appears_in_the_quiz_where_the_file_puts_it(tmp_path):
    path = write(tmp_path, question("a") + question("new", stem="新题") + question("b"))
    asked = from_file(path)
    assert [q.id for q in asked] == ["a", "new", "b"] and asked[1].question == {"zh": "新题", "en": "Stem"}


# ----------------------------------------------------------------------------- a malformed file is refused by name

OPTION_RIGHT = 'correct = true\ntext.zh = "对"\ntext.en = "Right"\nfeedback.zh = "因为"\nfeedback.en = "Because"\n'
OPTION_WRONG = 'text.zh = "错"\ntext.en = "Wrong"\nfeedback.zh = "因为"\nfeedback.en = "Because"\nmisconception = "m"\n'


def question(qid: str | None = "q1", stem: str = "题干", extra: str = "", options: tuple[str, ...] | None = None) -> str:
    head = "[[question]]\n" + (f'id = "{qid}"\n' if qid is not None else "")
    head += f'stem.zh = "{stem}"\nstem.en = "Stem"\n{extra}'
    body = options if options is not None else (OPTION_RIGHT, OPTION_WRONG, OPTION_WRONG, OPTION_WRONG)
    return head + "".join(f"\n[[question.option]]\n{o}" for o in body) + "\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "quiz.toml"
    path.write_text(text, encoding="utf-8")
    return path


def without(option: str, line_start: str) -> str:
    return "".join(line + "\n" for line in option.splitlines() if not line.startswith(line_start))


MALFORMED = {
    "missing stem language": (question().replace('stem.en = "Stem"\n', ""),
                              "question 'q1': field 'stem.en' is missing"),
    "missing stem": (question().replace('stem.zh = "题干"\nstem.en = "Stem"\n', ""),
                     "question 'q1': field 'stem' is missing"),
    "missing option feedback": (question(options=(OPTION_RIGHT, without(OPTION_WRONG, "feedback"), OPTION_WRONG)),
                                "question 'q1': option 2: field 'feedback' is missing"),
    "missing misconception": (question(options=(OPTION_RIGHT, OPTION_WRONG, without(OPTION_WRONG, "misconception"))),
                              "question 'q1': option 3: field 'misconception' is missing"),
    "empty misconception": (question(options=(OPTION_RIGHT, OPTION_WRONG.replace('"m"', '" "'))),
                            "question 'q1': option 2: field 'misconception' is empty"),
    "misconception on the answer": (question(options=(OPTION_RIGHT + 'misconception = "x"\n', OPTION_WRONG)),
                                    "question 'q1': option 1: field 'misconception' on the correct option"),
    "missing id": (question("a") + question(None), "question 2 \\(no id\\): field 'id' is missing"),
    "missing options": ('[[question]]\nid = "q1"\nstem.zh = "题"\nstem.en = "Q"\n',
                        "question 'q1': field 'option' is missing"),
    "one option": (question(options=(OPTION_RIGHT,)), "question 'q1': field 'option': a question has 2 to 10 options"),
    "unknown question field": (question(extra="answer = 2\n"), "question 'q1': unknown field 'answer'"),
    "unknown option field": (question(options=(OPTION_RIGHT + 'hint = "h"\n', OPTION_WRONG)),
                             "question 'q1': option 1: unknown field 'hint'"),
    "unknown language": (question(extra='stem.fr = "Question"\n'), "question 'q1': unknown field 'stem.fr'"),
    "unknown top-level field": ('title = "Quiz"\n' + question(), "unknown field 'title' at the top"),
    "no correct option": (question(options=(without(OPTION_RIGHT, "correct") + 'misconception = "m"\n', OPTION_WRONG)),
                          "question 'q1': field 'correct': no option is marked correct = true; exactly one must be"),
    "two correct options": (question(options=(OPTION_RIGHT, OPTION_RIGHT, OPTION_WRONG)),
                            "question 'q1': field 'correct': options 1, 2 are marked correct = true"),
    "correct is not a boolean": (question(options=(OPTION_RIGHT.replace("true", '"yes"'), OPTION_WRONG)),
                                 "question 'q1': option 1: field 'correct' must be true or false"),
    "shuffle is not a boolean": (question(extra='shuffle = "no"\n'), "question 'q1': field 'shuffle' must be true or"),
    "empty text": (question(options=(OPTION_RIGHT.replace('"Right"', '""'), OPTION_WRONG)),
                   "question 'q1': option 1: field 'text.en' must be non-empty text"),
    "duplicate ids": (question("q1") + question("q2") + question("q1"),
                      "question 'q1': field 'id' repeats question 1's id \\(question 3\\)"),
    "no questions": ("# nothing yet\n", "field 'question' is missing"),
    "single brackets": (question().replace("[[question]]", "[question]", 1).split("\n[[question.option]]")[0],
                        "field 'question' must be \\[\\[question\\]\\] tables"),
    "not TOML": (question() + 'text.zh = "unterminated\n', "not valid TOML"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_question_file_is_refused_naming_the_file_the_question_and_the_field(tmp_path, case):
    text, message = MALFORMED[case]
    path = write(tmp_path, text)
    with pytest.raises(BankError, match=f"^{re.escape(str(path))}: {message}"):
        load(path)


def test_the_well_formed_question_the_malformed_cases_start_from_loads(tmp_path):
    row, = load(write(tmp_path, question()))
    assert (row.id, row.question, row.answer, row.shuffle) == ("q1", ("题干", "Stem"), 0, True)
    assert row.options[1] == ("错", "Wrong", "因为", "Because", "m")


# ----------------------------------------------------------------------------- data, never code

def test_a_question_files_text_is_shown_as_written_never_run(tmp_path):
    code = "{__import__('os').getcwd()} __import__('os').system('exit 1')"
    asked, = from_file(write(tmp_path, question(stem=code)))
    assert asked.question["zh"] == code


@pytest.mark.parametrize("lab", LABS)
def test_a_labs_question_file_holds_only_text_and_true_or_false(lab):
    text = bank_file(lab).read_text(encoding="utf-8")
    assert {type(v) for v in leaf_values(tomllib.loads(text))} <= {str, bool}
    assert not re.search(r"\b[Ii]ssues? \d+\b|#\d+\b", text)        # no tracker numbers in what learners read


def test_the_loader_reads_toml_and_runs_nothing():
    tree = ast.parse(Path(bank.__file__).read_text(encoding="utf-8"))
    called = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
              for n in ast.walk(tree) if isinstance(n, ast.Call)}
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                                     and n.module}
    assert not called & {"eval", "exec", "compile", "__import__", "import_module", "run_path", "run_module"}
    assert "tomllib" in imported and not imported & {"importlib", "runpy", "pickle", "yaml"}


# ----------------------------------------------------------------------------- the files ship with the package

@pytest.mark.parametrize("name", ["quiz.toml", "exercises.toml"])
def test_the_question_and_exercise_files_are_package_data(name):
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["labkit"]
    for lab in LABS:
        relative = (REPO / "labkit" / "labs" / lab / name).relative_to(REPO / "labkit").as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), f"{relative} is not in {patterns}"
