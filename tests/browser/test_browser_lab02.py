"""Lab 02's block-map player in a real browser (Voila on a small notebook, simulated model, chromium).

What a learner's run found at the interactive moments, checked where it happens — in the page:

* the player is one slider (the map's own), opens at the peak and says what "peak" means, and the
  step it names is the step the map draws;
* dragging the slider redraws the map within one animation frame (no kernel round trip);
* clicking a block whose reference count is 4 lists all four holders and their block tables;
* (lab 03's widget, same page) the batch timeline coloured "按请求" has a legend of requests, not phases.

Screenshots: ``test-artifacts/lab02_player_after.png``, ``test-artifacts/lab02_shared_block_click_after.png`` and
``test-artifacts/lab03_timeline_by_request_after.png``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

from tests.browser_util import (
    VOILA_FLAGS,
    PageErrors,
    block_external_requests,
    free_port,
    launch_chromium,
    missing_browser_reason,
    start_server,
)

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
RENDER_TIMEOUT_S = 240
FORK = dict(prompt=[98] * 40, n=4, max_tokens=6)

_reason = missing_browser_reason()
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
if _reason:
    pytestmark.append(pytest.mark.skip(reason=_reason))

SETUP = """from labkit import LLM, EngineConfig
from labkit.labs.lab02_paged_attention import block_map, sharing

def sim(num_blocks):
    return LLM(model="sim", config=EngineConfig(num_blocks=num_blocks, block_size=16))

prompts = [[97 + (i + j) % 26 for j in range(n)] for i, n in enumerate([12, 28, 7, 40, 20, 50])]
demo = block_map.record_block_map(sim(24), prompts, [20, 12, 28, 16, 22, 30], [0, 0, 2, 4, 6, 22])
fork = sharing.parallel_sampling(sim(64), {prompt!r}, n={n}, max_tokens={max_tokens})"""
PLAYER = "block_map.BlockMapPlayer(demo)"
FORK_PLAYER = "block_map.BlockMapPlayer(block_map.BlockMapRun.from_steps(fork.events, fork.block_size), start=0)"
TIMELINE = """from labkit.widgets import BatchTimeline

timeline_llm = sim(24)
timeline = BatchTimeline(timeline_llm.engine)
timeline.color_by = "request"
block_map.record_block_map(timeline_llm, prompts, [20, 12, 28, 16, 22, 30], [0, 0, 2, 4, 6, 22])
timeline.flush()
timeline"""

# Move the slider to `index` the way a drag does, wait one animation frame, read what the map says.
DRAG_JS = """async (el, index) => {
    const slider = el.querySelector('.lk-scrub-slider');
    slider.value = String(index);
    slider.dispatchEvent(new Event('input'));
    await new Promise((resolve) => requestAnimationFrame(resolve));
    return {status: el.querySelector('.lk-status').textContent,
            where: el.querySelector('.lk-scrub-where').textContent, max: Number(slider.max)};
}"""
CLICK_BLOCK_JS = """(el, block) => {
    const canvas = el.querySelector('canvas');
    const cell = Number(canvas.dataset.cell), cols = Number(canvas.dataset.cols);
    const box = canvas.getBoundingClientRect();
    return {x: box.left + (block % cols) * cell + cell / 2, y: box.top + Math.floor(block / cols) * cell + cell / 2};
}"""


def player_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP.format(**FORK)), nbformat.v4.new_code_cell(PLAYER),
                nbformat.v4.new_code_cell(FORK_PLAYER), nbformat.v4.new_code_cell(TIMELINE)]
    nbformat.write(nb, path)
    return path


def shared_blocks_at_first_step() -> list[int]:
    """Blocks with reference count n in the fork's first recorded step (the same sim run as the page)."""
    from labkit import LLM, EngineConfig
    from labkit.labs.lab02_paged_attention import sharing

    fork = sharing.parallel_sampling(LLM(model="sim", config=EngineConfig(num_blocks=64, block_size=16)),
                                     FORK["prompt"], n=FORK["n"], max_tokens=FORK["max_tokens"])
    ref_cnt = fork.events[0].block_map.ref_cnt
    return [i for i, ref in enumerate(ref_cnt) if ref == FORK["n"]]


@pytest.fixture
def voila_player(tmp_path):
    notebook = player_notebook(tmp_path / "player.ipynb")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_FAST": "1",
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "IPYTHONDIR": str(tmp_path / "ipython")}
    cmd = [sys.executable, "-m", "voila", notebook.name, f"--port={port}", *VOILA_FLAGS, "--show_tracebacks=True"]
    server = start_server("voila", cmd, f"http://127.0.0.1:{port}/", tmp_path / "voila.log", env, tmp_path,
                          probe_url=f"http://127.0.0.1:{port}/voila/static/")
    yield server
    server.stop()


@pytest.fixture
def page(voila_player):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        context = browser.new_context(viewport={"width": 1200, "height": 1600})
        errors = PageErrors(aborted=block_external_requests(context))
        page = context.new_page()
        errors.attach(page)
        page.goto(voila_player.url, wait_until="domcontentloaded")
        page.wait_for_function("() => document.querySelectorAll('.lk-block-map canvas').length >= 2",
                               timeout=RENDER_TIMEOUT_S * 1000)
        yield page
        assert errors.errors == [], "the page logged errors:\n" + "\n".join(errors.errors)
        browser.close()


def step_in(text: str) -> int:
    return int(re.search(r"步 (\d+)", text).group(1))


def test_the_player_is_one_slider_whose_step_the_map_draws_within_one_frame(page):
    player = page.locator(".lk-block-map").first
    page.wait_for_function("(el) => el.querySelector('.lk-scrub-where').textContent.includes('峰值')",
                           arg=player.element_handle(), timeout=RENDER_TIMEOUT_S * 1000)
    assert page.locator(".widget-slider").count() == 0, "a second (ipywidgets) slider is back"
    assert player.locator(".lk-scrub-slider").count() == 1
    where, status = player.locator(".lk-scrub-where").inner_text(), player.locator(".lk-status").inner_text()
    assert "KV 使用率最高" in where, f"the widget must say what its peak is: {where!r}"
    assert "运行中" not in where, f"a replay is not a running engine: {where!r}"
    assert step_in(where) == step_in(status), (where, status)
    ARTIFACTS.mkdir(exist_ok=True)
    player.screenshot(path=str(ARTIFACTS / "lab02_player_after.png"))

    last = player.evaluate(DRAG_JS, 0)["max"]
    for index in (0, last // 3, last, 1):
        shown = player.evaluate(DRAG_JS, index)
        assert step_in(shown["where"]) == step_in(shown["status"]), f"slider and map disagree after one frame: {shown}"
        assert "已固定" in shown["where"]
    assert step_in(player.evaluate(DRAG_JS, 0)["status"]) < step_in(player.evaluate(DRAG_JS, last)["status"])


def test_clicking_a_block_shared_by_four_requests_lists_every_holder_and_its_table(page):
    fork_map = page.locator(".lk-block-map").nth(1)
    fork_map.scroll_into_view_if_needed()
    shared = shared_blocks_at_first_step()
    assert shared, "the fork's first step must share its prompt blocks"
    point = fork_map.evaluate(CLICK_BLOCK_JS, shared[0])
    page.mouse.click(point["x"], point["y"])
    info = fork_map.locator(".lk-info")
    page.wait_for_function("(el) => el.textContent.includes('持有它的请求')", arg=info.element_handle(), timeout=30_000)
    lines = [line for line in info.inner_text().splitlines() if line.strip()]
    head, tables = lines[0], lines[1:]
    assert f"#{shared[0]}" in head and f"引用数 {FORK['n']}" in head, head
    holders = head.split("持有它的请求:")[1].split(",")
    assert len(holders) == FORK["n"], head
    assert len(tables) == FORK["n"] and all("块表" in line and f"→{shared[0]}" in line for line in tables), tables
    page.mouse.move(1, 1)      # the hover tooltip would cover the lines
    ARTIFACTS.mkdir(exist_ok=True)
    fork_map.screenshot(path=str(ARTIFACTS / "lab02_shared_block_click_after.png"))


def test_the_timeline_coloured_by_request_has_a_legend_of_requests_not_phases(page):
    timeline = page.locator(".lk-batch-timeline").first
    page.wait_for_selector(".lk-batch-timeline canvas", timeout=RENDER_TIMEOUT_S * 1000)
    legend = timeline.locator(".lk-legend").inner_text()
    assert "请求 0" in legend and "预填充" not in legend and "解码" not in legend, legend
    ARTIFACTS.mkdir(exist_ok=True)
    timeline.screenshot(path=str(ARTIFACTS / "lab03_timeline_by_request_after.png"))
