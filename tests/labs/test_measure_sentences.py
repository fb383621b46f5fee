"""Every comparison sentence a lab prints is rendered from a verdict (labs/README.md, "Measuring and concluding").

The lab modules are scanned: a string literal holding a comparative word (更快, 更慢, faster,
slower, ...) may only appear as a template passed to ``Verdict.sentence`` / ``render`` / ``mark``
(which add the hedge the measurement earned), or as one outcome of a call's ``greater=`` / ``less=`` /
``same=`` keywords (a set of marks kept for a verdict to pick from: ``dict(greater=…, less=…, same=…)``,
``beside.phrases(…)``); a call giving only some of the three is not such a set. Anywhere else it is a conclusion built from a bare
number, and this test names its file and line. Question banks (quiz, exercises, solutions) teach
with such words and are not conclusions about a measurement; docstrings are not printed.

The labs' notebooks (labs/*.ipynb, labs/dashboards/*.ipynb) are scanned the same way, code cell by
code cell (IPython magics and shell lines dropped first; a cell that still does not parse is not
Python and is skipped): a cell prints a comparison only by calling the lab module that renders it
from a verdict.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labkit" / "labs"
NOTEBOOKS = sorted([*ROOT.glob("labs/*.ipynb"), *ROOT.glob("labs/dashboards/*.ipynb")])
NOT_CONCLUSIONS = {"quiz.py", "exercises.py", "solutions.py"}
RENDERERS = {"sentence", "render", "mark"}
OUTCOMES = {"greater", "less", "same"}      # a call given all three keywords holds a verdict's templates
QUESTIONS = {"predict"}        # labkit.labs.common.display.predict asks the learner; it concludes nothing
COMPARATIVE = re.compile(r"更快|更慢|变快|变慢|快了|慢了|比[^。；，]{0,24}?[快慢]|加快|拖慢|"
                         r"\b(faster|slower|quicker|speeds? up|slows? down)\b", re.IGNORECASE)
# Functions another change owns (named here so the debt is visible; remove the entry when converted).
PENDING: dict[tuple[str, str], str] = {}
# Words that describe what a region of a figure means, not what was measured.
ALLOWED = {
    "dashed 1×: below = slower than plain decoding": "legend of the speed-up = 1 line in lab 04's figure",
    "虚线 1×：低于它 = 比普通解码慢": "legend of the speed-up = 1 line in lab 04's figure",
    "块大小改变了本机注意力的用时：这是这个内核在这台 CPU 上的性质，论文在 GPU 上看到的是小块让内核变慢。":
        "lab 02 §6: the paper's GPU finding, cited, printed only in the branch where this run's verdicts differ",
}


def _modules():
    """Every lab module but the question banks: the measuring package too (``common/measure/``, whose
    ``sentences`` module writes the hedges around the templates it is given, never a finding of its own),
    and each lab's own ``measure`` module."""
    return sorted(p for p in LABS.rglob("*.py") if p.name not in NOT_CONCLUSIONS)


def test_the_scan_reaches_the_measuring_package_and_every_labs_measure_module():
    rels = {p.relative_to(LABS).as_posix() for p in _modules()}
    assert {"common/measure/sentences.py", "common/measure/verdict.py", "lab01_kv_cache/measure.py"} <= rels


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _inside_renderer(parents: list[ast.AST]) -> bool:
    for node in parents:
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in RENDERERS or name in QUESTIONS:
                return True
    return False


def bare_comparisons(source: str, pending: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, text) of each comparative string literal not inside a verdict renderer's call (nor
    inside a function named in ``pending``)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        if isinstance(node, ast.FunctionDef) and node.name in pending:
            return
        if isinstance(node, ast.Call) and OUTCOMES <= {k.arg for k in node.keywords}:
            for k in node.keywords:             # the templates themselves are not conclusions; the call's
                if k.arg not in OUTCOMES:       # other arguments are scanned like any code
                    visit(k.value, parents + [node])
            for a in node.args:
                visit(a, parents + [node])
            visit(node.func, parents + [node])
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if COMPARATIVE.search(node.value) and node.value not in ALLOWED and not _inside_renderer(parents):
                found.append((node.lineno, node.value))
        for child in ast.iter_child_nodes(node):
            visit(child, parents + [node])

    visit(tree, [])
    return found


def code_cells(notebook: dict) -> list[tuple[str, str]]:
    """(cell id, Python source) of each code cell that parses once magic (``%``) and shell (``!``)
    lines are dropped; cells that still do not parse are not Python and are left out."""
    cells = []
    for i, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        kept = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        try:
            ast.parse(kept)
        except SyntaxError:
            continue
        cells.append((cell.get("id") or f"cell {i}", kept))
    return cells


def notebook_comparisons(notebook: dict) -> list[tuple[str, int, str]]:
    """(cell id, line, text) of each comparative string literal of a code cell outside a verdict renderer."""
    return [(cell_id, line, text) for cell_id, source in code_cells(notebook) for line, text in bare_comparisons(source)]


def test_the_scanner_catches_a_sentence_built_from_a_bare_number():
    bad = 'def v(r):\n    return t(f"快了 {r:.2f} 倍", "faster") if r > 1 else t("更慢", "slower")\n'
    assert [line for line, _ in bare_comparisons(bad)] == [2, 2, 2, 2]
    good = 'def v(verdict):\n    return verdict.sentence(greater=("比普通解码快", "faster"), less=("更慢", "slower"), same=("", ""))\n'
    assert bare_comparisons(good) == []


def test_a_set_of_outcome_marks_is_a_template_only_when_it_names_all_three_outcomes():
    marks = 'MARKS = dict(greater=("（更快）", " (faster)"), less=("（更慢）", " (slower)"), same=("持平", "level"))\n'
    assert bare_comparisons(marks) == []
    assert bare_comparisons('P = phrases(greater=("快了", "x"), less=("y", "z"), same=("", ""), note=t("更快", "faster"))\n') \
        == [(1, "更快"), (1, "faster")]
    assert [line for line, _ in bare_comparisons('MARKS = dict(greater="更快", less="更慢")\n')] == [1, 1]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(LABS)))
def test_lab_modules_render_comparisons_only_from_verdicts(path):
    rel = path.relative_to(LABS).as_posix()
    found = bare_comparisons(path.read_text(encoding="utf-8"), frozenset(f for (p, f) in PENDING if p == rel))
    assert not found, "\n".join(f"{path.relative_to(LABS)}:{line}: {text!r}" for line, text in found)


def test_the_notebook_scanner_reads_code_cells_past_their_magics_and_skips_what_is_not_python():
    def cell(cell_id, source, kind="code"):
        return {"cell_type": kind, "id": cell_id, "source": source}

    notebook = {"cells": [
        cell("md", "比普通解码快", "markdown"),
        cell("bare", ["%env LABKIT_FAST=1\n", "print('没有变快' if ttft >= base else t('快了', 'faster'))\n"]),
        cell("shell", "!ls\nfor x in: pass\n"),
        cell("good", "print(v.sentence(greater=('更快', 'faster'), less=('更慢', 'slower'), same=('', '')))"),
        cell("ask", "predict('开启后首 token 快了几倍？', lambda: ratio, unit='倍')"),
    ]}
    assert [c for c, _ in code_cells(notebook)] == ["bare", "good", "ask"]
    assert notebook_comparisons(notebook) == [("bare", 2, "没有变快"), ("bare", 2, "快了"), ("bare", 2, "faster")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_lab_notebooks_render_comparisons_only_from_verdicts(path):
    found = notebook_comparisons(json.loads(path.read_text(encoding="utf-8")))
    assert not found, "\n".join(f"{path.relative_to(ROOT)} cell {c} line {line}: {text!r}" for c, line, text in found)
