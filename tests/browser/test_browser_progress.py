"""The progress page in a real browser: it renders the local results summaries in Voila and in
JupyterLab, and the class view loads an exported file through its upload button (Voila has no file
browser). Same harness as ``test_browser.py`` (Debian's chromium, loopback only, ``LABKIT_FAST=1``).
Screenshot: ``test-artifacts/progress_voila.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.browser.test_browser import OPEN_AND_RUN_ALL_JS, assert_no_tracebacks_or_broken_widgets, server_env
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
PROGRESS = REPO / "labs" / "dashboards" / "progress.ipynb"
ARTIFACTS = REPO / "test-artifacts"
TIMEOUT_MS = 180_000

_reason = missing_browser_reason()
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
if _reason:
    pytestmark.append(pytest.mark.skip(reason=_reason))


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A workspace where lab 02's quiz, a prediction and an exercise have been done."""
    folder = tmp_path / "results"
    monkeypatch.setenv("LABKIT_RESULTS", str(folder))
    from labkit.report.results import record
    record("02", "quiz", "pa-page-table", {"first_attempt_correct": True, "attempts": 1, "quiz_size": 11})
    record("02", "quiz", "pa-no-fault", {"first_attempt_correct": False, "attempts": 2, "quiz_size": 11})
    record("02", "predictions", "slot", {"question": "位置 40 在第几个槽位？", "kind": "exact", "guess": 150,
                                         "measured": 152, "unit": "号槽位", "judgement": "wrong", "correct": False})
    record("02", "exercises", "slot_mapping", {"passed": True, "attempts": 2, "passed_at_attempt": 2})
    return folder


def _env(tmp_path: Path, results: Path) -> dict[str, str]:
    return dict(server_env(tmp_path), LABKIT_RESULTS=str(results))


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


def _page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    errors = PageErrors(aborted=block_external_requests(context))
    page = context.new_page()
    errors.attach(page)
    return context, page, errors


def test_voila_renders_the_progress_page_and_loads_an_exported_file(tmp_path, results, browser):
    from labkit.assess import export_progress
    exported = export_progress(tmp_path / "ann.json", folder=results, name="Ann")
    env = _env(tmp_path, results)
    trust_notebook(PROGRESS, env)
    port = free_port()
    server = start_server("voila", [sys.executable, "-m", "voila", str(PROGRESS.relative_to(REPO)), f"--port={port}",
                                    *VOILA_FLAGS], f"http://127.0.0.1:{port}/", tmp_path / "voila.log", env, REPO,
                          probe_url=f"http://127.0.0.1:{port}/voila/static/")
    context, page, errors = _page(browser)
    try:
        page.goto(server.url, wait_until="domcontentloaded")
        table = page.wait_for_selector(".labkit-progress-table", timeout=TIMEOUT_MS)
        text = table.inner_text()
        assert "1/11" in text and "通过 1/1" in text, text
        assert "位置 40 在第几个槽位" in page.inner_text(".labkit-progress")
        with page.expect_file_chooser(timeout=TIMEOUT_MS) as chooser:    # the widget makes its input on click
            page.click(".widget-upload", timeout=TIMEOUT_MS)
        chooser.value.set_files(str(exported))
        page.wait_for_selector(".labkit-class-table", timeout=TIMEOUT_MS)
        assert "Ann" in page.inner_text(".labkit-class-table")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "progress_voila.png"), full_page=True)
        assert errors.errors == [], "Voila logged errors:\n" + "\n".join(errors.errors)
    finally:
        context.close()
        server.stop()


def test_jupyterlab_runs_the_progress_page(tmp_path, results, browser):
    env = _env(tmp_path, results)
    port = free_port()
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "docmanager-extension"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.allow_root=True",
           f"--ServerApp.root_dir={REPO}", "--LabApp.expose_app_in_browser=True",
           f"--LabApp.user_settings_dir={tmp_path / 'lab-settings'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}",
           f"--FileCheckpoints.root_dir={tmp_path / 'checkpoints'}",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    server = start_server("jupyterlab", cmd, f"http://127.0.0.1:{port}/", tmp_path / "lab.log", env, REPO,
                          probe_url=f"http://127.0.0.1:{port}/api")
    context, page, errors = _page(browser)
    try:
        page.goto(f"{server.url}lab", wait_until="domcontentloaded")
        page.wait_for_function("() => window.jupyterapp", timeout=TIMEOUT_MS)
        page.evaluate("async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }")
        page.evaluate(OPEN_AND_RUN_ALL_JS, [PROGRESS.relative_to(REPO).as_posix(), True])
        table = page.wait_for_selector(".jp-OutputArea .labkit-progress-table", timeout=TIMEOUT_MS)
        assert "1/11" in table.inner_text()
        page.wait_for_selector(".jp-OutputArea .labkit-class", timeout=TIMEOUT_MS)   # the upload view's widget
        assert_no_tracebacks_or_broken_widgets(page)
        saved = json.loads(PROGRESS.read_text(encoding="utf-8"))
        assert not any(cell.get("outputs") for cell in saved["cells"]), "JupyterLab saved outputs"
    finally:
        context.close()
        server.stop()
