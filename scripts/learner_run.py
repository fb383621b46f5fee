"""Run labs as a learner does: JupyterLab in chromium, Run All, every output read back, each exercise
tried wrong and then right — optionally with busy-loop processes beside the kernel.

    python scripts/learner_run.py --labs 04 05 --busy 2 --out /tmp/learner
    python scripts/learner_run.py --labs 01 --fast            # LABKIT_FAST=1 in the kernel

The notebooks are copied into a throw-away workspace (as ``make lab`` copies them into ``work/``), so
nothing in ``labs/`` is written; ``LABKIT_RESULTS`` points into that workspace. For each lab the script
writes ``<out>/<lab>.md``: the wall time of Run All, every code cell's output text as the page shows it
(widgets and tables included), the titles of the plotly figures it drew, the exercise feedback for a
wrong and a right solution, and any traceback or broken widget; a screenshot of the notebook's end goes
beside it. The wrong and right solutions are the independently written ones of
``tests/assess/test_assess_exercises.py`` (never the reference in ``labkit.labs.*.solutions``), typed into the
exercise's cell and run there, then checked by the lab's own check cell.

Nothing here is a test and nothing is asserted: a person reads the report. Needs Debian's chromium
(``/usr/bin/chromium``) and the playwright Python package, as the browser tests do.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.time_labs import busy_loops  # noqa: E402
from tests.browser_util import (  # noqa: E402
    CLOSE_AND_SHUTDOWN_JS,
    OPEN_AND_RUN_ALL_JS,
    PageErrors,
    block_external_requests,
    free_port,
    jupyterlab_command,
    launch_chromium,
    missing_browser_reason,
    start_server,
)

CELLS_JS = """(path) => {
    const app = window.jupyterapp;
    const panel = Array.from(app.shell.widgets("main")).find(w => w.context?.path === path);
    return panel.content.widgets.map((cell, i) => ({
        index: i,
        type: cell.model.type,
        source: cell.model.sharedModel.getSource(),
        output: cell.model.type === "code" ? (cell.node.querySelector(".jp-OutputArea")?.innerText || "") : "",
        figures: Array.from(cell.node.querySelectorAll(".js-plotly-plot")).map(
            p => (p.querySelector(".gtitle")?.textContent || "(untitled figure)")),
        count: cell.model.type === "code" ? cell.model.executionCount : null,
    }));
}"""
RUN_CELLS_JS = """async ([path, indices, source]) => {
    const app = window.jupyterapp;
    const panel = Array.from(app.shell.widgets("main")).find(w => w.context?.path === path);
    const nb = panel.content;
    if (source !== null) nb.widgets[indices[0]].model.sharedModel.setSource(source);
    for (const i of indices) {
        nb.activeCellIndex = i;
        nb.deselectAll();
        await app.commands.execute("notebook:run-cell");
    }
    const last = nb.widgets[indices[indices.length - 1]];
    return last.node.querySelector(".jp-OutputArea")?.innerText || "";
}"""


def solutions() -> dict[str, tuple[object, object]]:
    """exercise name -> (a typical wrong solution, a correct one), from the exercise audit."""
    from tests.assess import test_assess_exercises as audit

    wrong: dict[str, object] = {}
    for case in audit.WRONG:
        values = getattr(case, "values", case)
        name, fn = values[0], values[1]
        wrong.setdefault(name, fn)
    return {name: (wrong.get(name), fns[0]) for name, fns in audit.CORRECT.items()}


def as_cell_source(fn, name: str) -> str:
    """``fn``'s source, renamed to the name the lab expects, after the audit-module helpers it uses."""
    from tests.assess import test_assess_exercises as audit

    src = re.sub(rf"\b{re.escape(fn.__name__)}\b", name, inspect.getsource(fn))
    helpers, seen, todo = [], {fn.__name__}, [src]
    while todo:
        for used in re.findall(r"\b([A-Za-z_]\w*)\b", todo.pop()):
            obj = getattr(audit, used, None)
            if used in seen or not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != audit.__name__:
                continue
            seen.add(used)
            helper = inspect.getsource(obj)
            helpers.insert(0, helper)
            todo.append(helper)
    header = ("import math\nimport itertools\nimport functools\nfrom collections import deque\n"
              "import numpy as np\nimport torch\n\n")
    return header + "\n\n".join(helpers + [src])


def exercise_cells(cells: list[dict]) -> list[tuple[str, int, int]]:
    """(exercise name, index of the cell the learner writes in, index of the check cell)."""
    found = []
    for i, cell in enumerate(cells):
        m = re.search(r'(\w+)\s*=\s*exercise\("(\w+)"', cell["source"])
        if cell["type"] != "code" or not m:
            continue
        var, name = m.group(1), m.group(2)
        code = [j for j in range(i + 1, len(cells)) if cells[j]["type"] == "code"]
        check = next((j for j in code if f"{var}.check(" in cells[j]["source"]), None)
        if check is None:
            continue
        write = max(j for j in code if j < check)
        found.append((name, write, check))
    return found


def expected_name(source: str) -> str | None:
    m = re.search(r"^(?:def|class)\s+(\w+)", source, re.M)
    return m.group(1) if m else None


def run_lab(page, rel: str, out: Path, subs: dict) -> str:
    started = time.perf_counter()
    page.evaluate(OPEN_AND_RUN_ALL_JS, [rel, True])
    wall = time.perf_counter() - started
    cells = page.evaluate(CELLS_JS, rel)
    lines = [f"# {rel}: Run All in {wall:.1f} s", ""]
    problems = []
    for cell in cells:
        if cell["type"] != "code":
            continue
        head = cell["source"].strip().splitlines()[0][:90] if cell["source"].strip() else ""
        lines.append(f"## cell {cell['index']} [{cell['count']}] `{head}`")
        text = cell["output"].strip()
        if text:
            lines += ["```", text[:4000] + ("\n…" if len(text) > 4000 else ""), "```"]
        for title in cell["figures"]:
            lines.append(f"- figure: {title}")
        if "Traceback" in text or "Error displaying widget" in text:
            problems.append(cell["index"])
        if re.search(r"(?<!arXiv:)\b\d+\.\d{6,}\b", text):          # a raw float reached the learner
            problems.append(f"{cell['index']} (unrounded number)")
        if cell["count"] is None:
            problems.append(f"{cell['index']} (not run)")
        lines.append("")
    page.screenshot(path=str(out / f"{Path(rel).stem}_end.png"))
    lines.append("# exercises, wrong then right")
    for name, write, check in exercise_cells(cells):
        wrong, right = subs.get(name, (None, None))
        want = expected_name(cells[write]["source"]) or name
        for label, fn in (("wrong", wrong), ("right", right)):
            if fn is None:
                lines.append(f"- {name}: no {label} solution in the audit")
                continue
            text = page.evaluate(RUN_CELLS_JS, [rel, [write, check], as_cell_source(fn, want)])
            lines += [f"## {name}: {label} ({fn.__name__})", "```", text.strip()[:2500], "```", ""]
    lines.insert(1, f"problems: {problems or 'none'}")
    page.evaluate(CLOSE_AND_SHUTDOWN_JS, rel)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labs", nargs="*", default=[], help="name prefixes, e.g. 01 04 (default: all)")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes beside the kernel")
    parser.add_argument("--fast", action="store_true", help="LABKIT_FAST=1 in the kernel")
    parser.add_argument("--out", type=Path, default=REPO / "test-artifacts" / "learner")
    args = parser.parse_args()
    reason = missing_browser_reason()
    if reason:
        raise SystemExit(reason)
    labs = sorted(p for p in (REPO / "labs").glob("*.ipynb") if not args.labs or any(p.name.startswith(s) for s in args.labs))
    args.out.mkdir(parents=True, exist_ok=True)
    subs = solutions()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="labkit-learner-") as tmp:
        tmp = Path(tmp)
        work = tmp / "work"
        work.mkdir()
        for p in labs:
            shutil.copy(p, work / p.name)
        for extra in ("dashboards",):
            if (REPO / "labs" / extra).exists():
                shutil.copytree(REPO / "labs" / extra, work / extra)
        env = dict(os.environ, PYTHONPATH=str(REPO), LABKIT_RESULTS=str(work / "results"),
                   JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_DATA_DIR=str(tmp / "data"),
                   IPYTHONDIR=str(tmp / "ipython"))
        env.pop("LABKIT_FAST", None)
        if args.fast:
            env["LABKIT_FAST"] = "1"
        port = free_port()
        # every cell in the page (no windowing), as a learner scrolls to it
        cmd = jupyterlab_command(port, work, tmp, {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}})
        server = start_server("jupyterlab", cmd, f"http://127.0.0.1:{port}/", tmp / "lab.log", env, work,
                              probe_url=f"http://127.0.0.1:{port}/api")
        summary = []
        try:
            with busy_loops(args.busy), sync_playwright() as pw:
                browser = launch_chromium(pw)
                context = browser.new_context(viewport={"width": 1400, "height": 1100})
                errors = PageErrors(aborted=block_external_requests(context))
                page = context.new_page()
                page.set_default_timeout(30 * 60 * 1000)
                errors.attach(page)
                page.goto(f"http://127.0.0.1:{port}/lab", wait_until="domcontentloaded")
                page.wait_for_function("() => window.jupyterapp?.shell !== undefined", timeout=120_000)
                page.wait_for_timeout(2000)
                for p in labs:
                    load = os.getloadavg()[0]
                    report = run_lab(page, p.name, args.out, subs)
                    report = report.replace("\n", f"\nload before: {load:.1f}, after: {os.getloadavg()[0]:.1f}; "
                                                  f"busy loops: {args.busy}; FAST: {args.fast}\n", 1)
                    (args.out / f"{p.stem}.md").write_text(report + "\n\n# page errors\n" + "\n".join(errors.errors))
                    first = report.splitlines()[0]
                    summary.append({"lab": p.stem, "line": first, "page_errors": list(errors.errors)})
                    print(first, "|", report.splitlines()[2], flush=True)
                    errors.errors.clear()
                browser.close()
        finally:
            server.stop()
        (args.out / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
