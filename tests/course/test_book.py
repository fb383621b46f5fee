"""The course site's build (scripts/build_book.py): links to pages on the site stay links, links to other
files become plain text naming them; plotly figures become HTML drawn by the site's own plotly.js; a widget
becomes a note that it runs in JupyterLab only; a page that lost a figure fails the check. The whole build
runs after the suite in `make test`, from the labs the suite executed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import plotly.graph_objects as go

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("build_book", REPO / "scripts" / "build_book.py")
book = importlib.util.module_from_spec(spec)
spec.loader.exec_module(book)


def test_links_to_site_pages_stay_and_links_to_other_files_name_the_file():
    page = REPO / "README.md"
    staged = {(REPO / "docs" / "engine.md").resolve(): "docs/engine.md"}
    text = "See [the engine](docs/engine.md#threads), [authors](labs/README.md), [web](https://x.org), ![i](a.png)."
    out = book.staged_links(text, page, staged)
    assert "[the engine](docs/engine.md#threads)" in out
    assert "authors (`labs/README.md`)" in out
    assert "[web](https://x.org)" in out and "![i](a.png)" in out


def test_figures_become_html_for_the_sites_plotlyjs_and_widgets_a_note():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {book.PLOTLY: json.loads(fig.to_json()), "text/plain": "Figure"}},
        {"output_type": "display_data", "data": {book.WIDGET: {"model_id": "x"}, "text/plain": "VBox()"}},
        {"output_type": "stream", "text": "kept"}]}]}
    outputs = book.static_outputs(nb)["cells"][0]["outputs"]
    html = outputs[0]["data"]["text/html"]
    assert 'class="plotly-graph-div"' in html and "Plotly.newPlot" in html
    assert "<script src" not in html and len(html) < 100_000            # plotly.js is the site's, not inlined
    assert "JupyterLab" in outputs[1]["data"]["text/markdown"] and book.WIDGET not in outputs[1]["data"]
    assert outputs[2] == {"output_type": "stream", "text": "kept"}


def test_a_page_with_fewer_figures_than_its_notebook_or_a_cell_error_fails_the_check(tmp_path, monkeypatch):
    fig_html = go.Figure().to_html(include_plotlyjs=False, full_html=False)
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {"text/html": fig_html}},
        {"output_type": "display_data", "data": {"text/html": fig_html}},
        {"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": []}]}]}
    staged = tmp_path / "src" / "labs" / "01_x.ipynb"
    staged.parent.mkdir(parents=True)
    staged.write_text(json.dumps(nb))
    html = tmp_path / "html"
    (html / "labs").mkdir(parents=True)
    (html / "labs" / "01_x.html").write_text(f"<html>{fig_html}</html>")
    monkeypatch.setattr(book, "HTML", html)
    monkeypatch.setattr(book, "REPO", tmp_path)
    problems = book.check([staged])
    assert any("cell error" in p and "ValueError" in p for p in problems)
    assert any("2 figure(s) in the notebook, 1 on the page" in p for p in problems)


def test_the_performance_page_is_what_the_saved_benchmark_reports_give():
    spec = importlib.util.spec_from_file_location("performance_page", REPO / "scripts" / "performance_page.py")
    page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page)
    assert page.main(["--check"]) == 0, "run scripts/performance_page.py after saving a report"


def test_user_facing_pages_carry_no_tracker_issue_numbers():
    import re

    pages = [REPO / "README.md", *[REPO / "docs" / f"{d}.md" for d in book.DOCS]]
    found = [f"{p.name}: {m.group(0)}" for p in pages for m in re.finditer(r"\bissues? \d+", p.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_site_serves_mathjax_itself_and_puts_chinese_first(tmp_path, monkeypatch):
    fake = tmp_path / "mathjax" / "es5"
    (fake / "output").mkdir(parents=True)
    (fake / "tex-chtml.js").write_text("// MathJax")
    monkeypatch.setattr(book, "mathjax", lambda vendor=None: fake)
    monkeypatch.setattr(book, "SRC", tmp_path / "src")
    book.stage(REPO / "labs")                              # the tracked labs stand in for executed copies
    src = tmp_path / "src"
    assert 'mathjax_path = "mathjax/tex-chtml.js"' in (src / "conf.py").read_text(encoding="utf-8")
    assert (src / "_static" / "mathjax" / "tex-chtml.js").exists()
    index = (src / "index.md").read_text(encoding="utf-8")
    assert index.startswith("本站是") and "docs/index" in index
    docs = (src / "docs" / "index.md").read_text(encoding="utf-8")
    assert docs.startswith("# 文档") and all(f"({d}.md)" in docs for d in book.DOCS)
    engine = (src / "docs" / "engine.md").read_text(encoding="utf-8")
    assert engine.startswith("# ") and "中文概要（引擎）" in engine.split("\n", 4)[3]


def test_a_page_that_loads_a_script_from_the_network_fails_the_offline_check():
    page = '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
    assert book.offline_problems(page, "x.html") and "offline" in book.offline_problems(page, "x.html")[0]
    assert book.offline_problems('<script src="../_static/mathjax/tex-chtml.js"></script>', "x.html") == []


# ----------------------------------------------------------------------------- numbers from a recorded quiet bundle

FAST_BUNDLE = REPO / "data" / "lab-runs" / "amd-epyc-avx512-bf16" / "fast"


def test_each_saved_record_is_rebound_to_the_sites_and_an_unbindable_save_is_named():
    source = ("rec = kv.record(run())\n    save_record(rec)   # beside your results (a comment)\n"
              "save_record(records.rows_record(SWEEP, sweep))\n# save_record(x) in a comment\nshow(rec)")
    new, names, inline = book.replay_source(source)
    assert names == ["rec"] and inline == ["save_record(records.rows_record(SWEEP, sweep))"]
    assert new.splitlines()[1:3] == ["    rec = site_record(rec)", "    save_record(rec)   # beside your results (a comment)"]


def test_the_site_switch_makes_a_section_narrate_the_bundles_record_not_the_busy_build(monkeypatch, capsys):
    from labkit.labs.common import beside
    from labkit.labs.common import records as R
    from labkit.labs.lab01_kv_cache import views as v01

    recorded = R.load_record(FAST_BUNDLE / "lab01" / "1.1-growing.json")
    busy = recorded.replace(context=R.RunContext(**{**recorded.context.__dict__, "cpu": "Build box", "load": 12.0}))
    busy = busy.with_verdict("context_8", confidence="machine busy")
    cell = "rec = measure()\nsave_record(rec)\nprint(views.growing_narration(rec).text)"
    source, _, _ = book.replay_source(cell)

    def run() -> str:
        exec(source, {"measure": lambda: busy, "save_record": lambda rec: None, "views": v01,
                      "site_record": beside.site_record})
        return capsys.readouterr().out

    assert "机器正忙" in run()                                  # no switch: the build machine's busy run
    monkeypatch.setenv(beside.SITE_BUNDLE_ENV, str(FAST_BUNDLE))
    out = run()
    assert v01.growing_narration(recorded).text in out and "机器正忙" not in out
    assert recorded.context.cpu in out and "amd-epyc-avx512-bf16/fast" in out and "Build box" not in out


def test_the_site_takes_a_quiet_bundle_and_refuses_a_busy_one(tmp_path):
    import pytest

    from labkit.labs.common import records as R

    rec = R.load_record(FAST_BUNDLE / "lab01" / "1.1-growing.json")
    for name, load in (("full", 0.5), ("fast", 0.7), ("fast-busy2", 9.0)):
        R.save_record(rec.replace(context=R.RunContext(**{**rec.context.__dict__, "load": load})), tmp_path / "cpu" / name)
    R.save_record(rec.replace(context=R.RunContext(**{**rec.context.__dict__, "load": 9.0}), section="9-x"),
                  tmp_path / "cpu" / "fast")                    # one busy record: that section is not replayed
    assert book.quiet_records(tmp_path / "cpu" / "fast") == (1, 2)
    assert book.site_bundle(root=tmp_path) == tmp_path / "cpu" / "fast"
    assert book.site_bundle(root=tmp_path, mode="full") == tmp_path / "cpu" / "full"
    with pytest.raises(SystemExit, match="not a quiet bundle"):
        book.site_bundle(tmp_path / "cpu" / "fast-busy2")
    with pytest.raises(SystemExit, match="no quiet bundle"):
        book.site_bundle(root=tmp_path / "cpu" / "fast-busy2")


def test_the_page_names_the_cpu_mode_and_date_its_numbers_were_recorded_on(tmp_path, monkeypatch):
    meta = {"bundle": "amd-epyc-avx512-bf16/fast", "cpu": "AMD EPYC; torch ISA AVX512; no AMX; AVX512_BF16", "cores": 2,
            "mode": "fast", "load": "1.0", "recorded": "2026-12-07 05:41", "replayed": ["01/1.1-growing"],
            "live": ["04/3-sweep"], "build_cpu": "Build box", "build_load": "12.0"}
    executed = tmp_path / "executed"
    executed.mkdir()
    for lab in book.LABS:
        nb = json.loads(lab.read_text(encoding="utf-8"))
        if lab.name.startswith("01"):
            nb["metadata"][book.SITE_META] = meta
        (executed / lab.name).write_text(json.dumps(nb), encoding="utf-8")
    fake = tmp_path / "mathjax" / "es5"
    fake.mkdir(parents=True)
    monkeypatch.setattr(book, "mathjax", lambda vendor=None: fake)
    monkeypatch.setattr(book, "SRC", tmp_path / "src")
    notes = {p.name[:2]: "".join(json.loads(p.read_text(encoding="utf-8"))["cells"][1]["source"])
             for p in book.stage(executed)}
    assert meta["cpu"] in notes["01"] and "amd-epyc-avx512-bf16/fast" in notes["01"] and "快速模式" in notes["01"]
    assert "2026-12-07 05:41" in notes["01"] and "04/3-sweep" in notes["01"] and "Build box" in notes["01"]
    assert "构建本站的机器以快速模式" in notes["02"]             # make test's copies: that run, said so
