"""The ordering and which-figure questions in a real browser (Voila): lab 04's step ordering moves and
checks, lab 02's pool maps draw as three plotly figures titled A–C and answer a click, and both first
answers land in the results summary. Same harness as ``test_browser.py`` (Debian's chromium,
loopback only, ``LABKIT_FAST=1``). Screenshot: ``test-artifacts/kinds_voila.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.browser.test_browser import server_env
from tests.browser_util import (
    VOILA_FLAGS,
    PageErrors,
    block_external_requests,
    free_port,
    launch_chromium,
    missing_browser_reason,
    start_server,
    trust_notebook,
)

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
TIMEOUT_MS = 180_000
CELLS = ["from labkit.labs.lab04_speculative.quiz import step_order_check\n\nstep_order_check()",
         "from labkit.labs.lab02_paged_attention.quiz import fragmentation_check\n\nfragmentation_check()"]

_reason = missing_browser_reason()
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
if _reason:
    pytestmark.append(pytest.mark.skip(reason=_reason))


def _notebook(folder: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "kinds.ipynb"
    nbformat.write(nb, path)
    return path


def test_voila_draws_and_answers_an_ordering_and_a_which_figure_question(tmp_path):
    from playwright.sync_api import sync_playwright

    results = tmp_path / "results"
    env = dict(server_env(tmp_path), LABKIT_RESULTS=str(results), LABKIT_LEARNER_ID="browser-learner")
    notebook = _notebook(tmp_path)
    trust_notebook(notebook, env)
    port = free_port()
    server = start_server("voila", [sys.executable, "-m", "voila", notebook.name, f"--port={port}", *VOILA_FLAGS],
                          f"http://127.0.0.1:{port}/", tmp_path / "voila.log", env, tmp_path,
                          probe_url=f"http://127.0.0.1:{port}/voila/static/")
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        context = chromium.new_context(viewport={"width": 1200, "height": 1400})
        errors = PageErrors(aborted=block_external_requests(context))
        page = context.new_page()
        errors.attach(page)
        try:
            page.goto(server.url, wait_until="domcontentloaded")
            page.wait_for_selector(".labkit-order-item", timeout=TIMEOUT_MS)
            first = page.locator(".labkit-order-item").first.inner_text()
            page.get_by_role("button", name="▼").first.click()          # move the top row down one
            page.wait_for_function("(t) => document.querySelector('.labkit-order-item').innerText !== t", arg=first,
                                   timeout=TIMEOUT_MS)
            page.get_by_role("button", name="检查顺序").click()
            page.wait_for_function("() => /顺序正确|应排在/.test(document.body.innerText)", timeout=TIMEOUT_MS)

            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3", timeout=TIMEOUT_MS)
            titles = page.locator(".js-plotly-plot .gtitle").all_text_contents()     # SVG text
            assert titles[:3] == ["A", "B", "C"], titles
            page.get_by_role("button", name="B", exact=True).click()
            page.wait_for_function("() => /外部碎片。|散开不是碎片|区域之间的空闲/.test(document.body.innerText)",
                                   timeout=TIMEOUT_MS)
            page.wait_for_function("() => document.body.innerText.includes('已作答 1/1')", timeout=TIMEOUT_MS)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "kinds_voila.png"), full_page=True)
            assert errors.errors == [], "Voila logged errors:\n" + "\n".join(errors.errors)
        finally:
            context.close()
            chromium.close()
            server.stop()
    quiz04 = json.loads((results / "lab04.json").read_text(encoding="utf-8"))["quiz"]
    quiz02 = json.loads((results / "lab02.json").read_text(encoding="utf-8"))["quiz"]
    assert quiz04["sd-step-order"]["kind"] == "ordering" and quiz04["sd-step-order"]["attempts"] == 1
    assert quiz02["pa-which-map-external"]["kind"] == "figure" and quiz02["pa-which-map-external"]["attempts"] == 1
