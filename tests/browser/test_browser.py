"""The engine room in a real browser: Voila and JupyterLab, served on loopback, driven by chromium.

What a learner sees is checked where it happens — in the page: the dashboard renders from a live
kernel, Run makes the block map and the batch timeline redraw, the page logs no errors, and a
viewer who leaves mid-run takes the kernel (and its engine thread) down with the page. Then the
JupyterLab path once: lab 01 under Run All to its end (its block map must still show the run, at
the peak step, and scrub back), then the dashboard notebook, whose block map redraws on Step.

Debian's chromium through Python playwright (``/usr/bin/chromium``; never ``playwright install``);
the page cannot reach any host but loopback. Servers run with ``LABKIT_FAST=1``. Screenshots:
``test-artifacts/engine_room.png`` (Voila, mid-run), ``test-artifacts/jupyterlab.png`` and
``test-artifacts/lab01_block_map_after_run_all.png``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from tests.browser_util import (
    CLOSE_AND_SHUTDOWN_JS,
    OPEN_AND_RUN_ALL_JS,
    VOILA_FLAGS,
    PageErrors,
    block_external_requests,
    canvas_signature,
    free_port,
    jupyterlab_command,
    kernel_pids,
    launch_chromium,
    missing_browser_reason,
    start_server,
    trust_notebook,
    wait_for_canvas_change,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "labs" / "dashboards" / "engine_room.ipynb"
ARTIFACTS = REPO / "test-artifacts"
BLOCK_MAP = ".lk-block-map canvas"
TIMELINE = ".lk-batch-timeline canvas"
STEP_AT_LEAST = "(n) => Number(document.querySelector('.lk-panel-status')?.dataset.step || 0) >= n"
RENDER_TIMEOUT_S = 240    # the kernel loads the model before the first widget appears
LIVE_TIMEOUT_S = 120

_reason = missing_browser_reason()
pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200)]
if _reason:
    pytestmark.append(pytest.mark.skip(reason=_reason))


def server_env(tmp_path: Path) -> dict[str, str]:
    """The servers' (and so the kernels') environment: fast mode, private Jupyter state dirs."""
    env = dict(os.environ, LABKIT_FAST="1", PYTHONPATH=str(REPO),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), IPYTHONDIR=str(tmp_path / "ipython"))
    env.pop("JUPYTER_TOKEN", None)
    return env


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def voila(tmp_path):
    port = free_port()
    trust_notebook(DASHBOARD, server_env(tmp_path))
    cmd = [sys.executable, "-m", "voila", str(DASHBOARD.relative_to(REPO)), f"--port={port}", *VOILA_FLAGS,
           "--show_tracebacks=True"]
    server = start_server("voila", cmd, f"http://127.0.0.1:{port}/", tmp_path / "voila.log", server_env(tmp_path),
                          REPO, probe_url=f"http://127.0.0.1:{port}/voila/static/")
    yield server
    server.stop()


@pytest.fixture
def lab(tmp_path):
    port = free_port()
    cmd = jupyterlab_command(port, REPO, tmp_path)
    server = start_server("jupyterlab", cmd, f"http://127.0.0.1:{port}/", tmp_path / "lab.log", server_env(tmp_path),
                          REPO, probe_url=f"http://127.0.0.1:{port}/api")
    yield server
    server.stop()


@pytest.fixture
def page_in(browser):
    """``page_in(server) -> (page, errors)``: a fresh page that cannot reach other hosts."""
    contexts = []

    def open_page(server):
        context = browser.new_context(viewport={"width": 1400, "height": 1100})
        contexts.append(context)
        errors = PageErrors(aborted=block_external_requests(context))
        page = context.new_page()
        errors.attach(page)
        return page, errors

    yield open_page
    for context in contexts:
        context.close()


def test_voila_engine_room_redraws_live_on_run_and_logs_no_errors(voila, page_in):
    started = time.monotonic()
    page, errors = page_in(voila)
    page.goto(voila.url, wait_until="domcontentloaded")
    page.wait_for_selector(BLOCK_MAP, timeout=RENDER_TIMEOUT_S * 1000)
    page.wait_for_selector(TIMELINE)
    before = {sel: canvas_signature(page, sel) for sel in (BLOCK_MAP, TIMELINE)}

    page.get_by_role("button", name="运行", exact=True).click()
    page.wait_for_function(STEP_AT_LEAST, arg=5, timeout=LIVE_TIMEOUT_S * 1000)
    for selector, picture in before.items():
        wait_for_canvas_change(page, selector, picture, LIVE_TIMEOUT_S)
    ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 2400})   # Voila scrolls inside a div: show it all
    page.screenshot(path=str(ARTIFACTS / "engine_room.png"))

    assert errors.errors == [], "the page logged errors:\n" + "\n".join(errors.errors)
    assert page.locator(".lk-panel-error").count() == 0, page.locator(".lk-panel-status").inner_text()
    assert all("fontawesome" in url for url in errors.aborted), f"fetches from the internet: {errors.aborted}"
    for warning in ("is not trusted", "for dict-traits is deprecated"):
        assert warning not in voila.log(), f"Voila warned {warning!r}:\n{voila.log()[-3000:]}"
    print(f"\nvoila: rendered, ran and redrew in {time.monotonic() - started:.1f} s; "
          f"refused (external): {errors.aborted}")


def test_leaving_the_voila_page_mid_run_shuts_its_kernel_down(voila, page_in):
    page, _errors = page_in(voila)
    page.goto(voila.url, wait_until="domcontentloaded")
    page.wait_for_selector(BLOCK_MAP, timeout=RENDER_TIMEOUT_S * 1000)
    page.get_by_role("button", name="运行", exact=True).click()
    page.wait_for_function(STEP_AT_LEAST, arg=1, timeout=LIVE_TIMEOUT_S * 1000)
    kernel_id = re.search(r"Kernel started: ([0-9a-f-]+)", voila.log()).group(1)
    assert kernel_pids(kernel_id), "the kernel should be running while the page is open"

    page.close(run_before_unload=True)   # the viewer leaves; Voila's page asks for a shutdown

    wait_until(lambda: not kernel_pids(kernel_id), timeout=30, what="the kernel process to exit")
    assert f"Kernel shutdown: {kernel_id}" in voila.log()
    assert voila.process.poll() is None, "the Voila server must survive a viewer leaving"


LAB01 = REPO / "labs" / "01_kv_cache.ipynb"
STATUS_OF = "(el) => el.querySelector('.lk-status').textContent"
SCRUB_AWAY_JS = """(el) => {   // to the other end of the run from the step shown now
    const slider = el.querySelector('.lk-scrub-slider');
    slider.value = slider.value === "0" ? slider.max : "0";
    slider.dispatchEvent(new Event('input'));
}"""


def open_and_run_all(page, notebook: Path, wait: bool = False) -> None:
    page.evaluate(OPEN_AND_RUN_ALL_JS, [notebook.relative_to(REPO).as_posix(), wait])


def assert_no_tracebacks_or_broken_widgets(page) -> None:
    text = "\n".join(page.locator(".jp-OutputArea").all_inner_texts())
    assert "Traceback (most recent call last)" not in text, text
    assert "Error displaying widget" not in text, text


def check_lab01_block_map_after_run_all(page) -> str:
    """§4.1's block map shows the run's peak (not the empty final pool) and its slider scrubs back
    through the live kernel. Returns the status line it showed."""
    block_map = page.locator(".jp-OutputArea .lk-block-map").first
    block_map.scroll_into_view_if_needed()
    status = block_map.evaluate(STATUS_OF)
    usage = float(re.search(r"(?:KV 使用率|KV usage) ([\d.]+)%", status).group(1))
    assert usage > 0, f"the block map after Run All shows an empty pool: {status!r}"
    # The slider's label arrives in the same kind of comm message as the status, but not always in the
    # same one: under load the browser can paint the status first. Wait for it, then look.
    where = block_map.locator(".lk-scrub-where")
    page.wait_for_function("(el) => el.innerText.includes('峰值')", arg=where.element_handle(),
                           timeout=LIVE_TIMEOUT_S * 1000)
    assert "峰值" in where.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    block_map.screenshot(path=str(ARTIFACTS / "lab01_block_map_after_run_all.png"))
    block_map.evaluate(SCRUB_AWAY_JS)
    page.wait_for_function(f"(el) => ({STATUS_OF})(el) !== {json.dumps(status)}", arg=block_map.element_handle(),
                           timeout=LIVE_TIMEOUT_S * 1000)
    assert "已固定" in block_map.locator(".lk-scrub-where").inner_text()
    return status


def test_jupyterlab_runs_lab01_to_its_end_and_the_dashboard_with_live_widgets(lab, page_in):
    """JupyterLab, once: lab 01 under *Run All* to its last cell, then the engine room's views
    redrawing on Step.

    Notebooks are committed without outputs or widget state, so a rendered widget can only come
    from the running kernel through the widget comm. After *Run All* the block map of §4.1 must
    still show its run (the peak step) and scrub back; lab 01's kernel is then shut down so the
    dashboard gets the CPU. Nothing may be saved into the tracked notebooks.
    """
    started = time.monotonic()
    page, errors = page_in(lab)
    page.goto(f"{lab.url}lab", wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp", timeout=RENDER_TIMEOUT_S * 1000)
    page.evaluate("async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }")
    open_and_run_all(page, LAB01, wait=True)
    lab_s = time.monotonic() - started
    assert_no_tracebacks_or_broken_widgets(page)
    status = check_lab01_block_map_after_run_all(page)
    page.evaluate(CLOSE_AND_SHUTDOWN_JS, LAB01.relative_to(REPO).as_posix())

    open_and_run_all(page, DASHBOARD)
    page.wait_for_selector(f".jp-OutputArea {BLOCK_MAP}", timeout=RENDER_TIMEOUT_S * 1000)
    before = canvas_signature(page, BLOCK_MAP)
    page.get_by_role("button", name="单步", exact=True).first.click()
    wait_for_canvas_change(page, BLOCK_MAP, before, LIVE_TIMEOUT_S)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "jupyterlab.png"))

    assert_no_tracebacks_or_broken_widgets(page)
    assert errors.errors == [], "JupyterLab logged errors:\n" + "\n".join(errors.errors)
    for path in (LAB01, DASHBOARD):
        saved = json.loads(path.read_text(encoding="utf-8"))
        assert not any(cell.get("outputs") for cell in saved["cells"]), f"JupyterLab saved outputs into {path}"
    print(f"\njupyterlab: lab 01 Run All {lab_s:.1f} s, block map at its peak: {status}; "
          f"whole test {time.monotonic() - started:.1f} s")
