"""Every notebook under labs/ (found recursively, so new labs are picked up) is committed clean and
runs top to bottom, headless, in fast mode.

Committed clean: no outputs, no execution counts, no saved widget state (a saved plotly
FigureWidget alone adds ~5 MB), and the ``python3`` kernel, so Voila, JupyterLab and CI all start
the project's interpreter. ``make strip-outputs`` (nbstripout) cleans a notebook.

Runs: nbclient executes it with ``LABKIT_FAST=1`` on a ``python3`` kernel; jupyter_client starts
that kernelspec's ``python`` as the interpreter running these tests (the venv's), which the first,
injected cell checks (``sys.prefix``: a venv's python is a link to the base interpreter).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
NOTEBOOKS = sorted(p for p in LABS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
CELL_TIMEOUT_S = 600
KERNEL_CHECK = "import sys; print(sys.prefix)"   # the venv, not the interpreter it links to
EXECUTED = REPO / "build" / "book" / "executed"


def notebook_id(path: Path) -> str:
    return path.relative_to(LABS).as_posix()


def test_labs_folder_has_notebooks():
    assert NOTEBOOKS, f"no notebooks under {LABS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [(i, cell) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"]
    dirty = [i for i, cell in code if cell.get("outputs") or cell.get("execution_count") is not None]
    assert dirty == [], f"cells {dirty} keep outputs or execution counts: run `make strip-outputs`"
    assert "widgets" not in nb.get("metadata", {}), "saved widget state: run `make strip-outputs`"
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=notebook_id)
def test_notebook_runs_headless_in_fast_mode(path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_CHECK))
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    env = dict(os.environ, LABKIT_FAST="1", PYTHONPATH=str(REPO))

    client.execute(env=env)   # raises CellExecutionError, with the cell and its traceback

    kernel_prefix = nb.cells[0].outputs[0]["text"].strip()
    assert kernel_prefix == sys.prefix, f"the kernel ran {kernel_prefix}, not this environment {sys.prefix}"
    if path.parent == LABS:
        # the course site is built from these executed copies (scripts/build_book.py --executed, after the
        # suite in `make test`), outside the tracked labs/
        EXECUTED.mkdir(parents=True, exist_ok=True)
        nb.cells.pop(0)
        nbformat.write(nb, EXECUTED / path.name)
