"""Build the course as a static site: the five labs, their measured sections from a recorded quiet bundle, and
the docs.

    .venv/bin/python scripts/build_book.py                 # execute the labs (LABKIT_FAST=1) replaying a quiet
                                                           # bundle's records, then build
    .venv/bin/python scripts/build_book.py --bundle data/lab-runs/<cpu kind>/<mode>   # that bundle
    .venv/bin/python scripts/build_book.py --labs 01       # some labs only (a quick look)
    .venv/bin/python scripts/build_book.py --executed DIR  # build from notebooks executed before (make test's)
    .venv/bin/python scripts/build_book.py --check         # and fail on a broken link, a missing figure, a cell
                                                           # error; then open two pages in chromium

Numbers on the site are a recorded machine's, never the build machine's of the moment: each lab runs with
``LABKIT_SITE_BUNDLE`` pointing at a recorded bundle (``data/lab-runs/<cpu kind>/<mode>/``; the fast-mode one by
default, as the labs run in fast mode here), and only its quiet records (measured with the load at or below the
cores) stand in for a section. In
every cell that saves a section's record (``save_record(<name>)``) the name is rebound to
``labkit.labs.common.beside.site_record(<name>)`` first, so the section's tables, sentences and figures are
rendered from the bundle's record, with a printed line naming its CPU, mode, load and date; the first cell
says the same instead of the build machine's load. The page shows the lab's own code (the rebinding is the
site's), and its note lists the sections replayed and those measured while building (no record yet, or a
``save_record(<expression>)`` the site cannot rebind). Building from ``--executed`` copies (make test's)
replays nothing; the note then says the page is that run's.

The site is Sphinx with MyST-NB (the builder under Jupyter Book 1, from PyPI, with no Node.js toolchain):
it reads executed notebooks and Markdown as they are and renders every output the notebook kept. Sources are
staged in build/book/src (the tracked labs/ are never written): book/conf.py, an index made from the
README, docs/*.md, and the executed labs. Plotly figures are rendered as HTML against plotly.js served with
the site, so they draw offline; an ipywidgets output (live only in JupyterLab) is replaced by a note
saying so. Formulas are typeset by a copy of MathJax served with the site too (taken once from the npm
registry with `npm pack`, kept under build/book/vendor, never committed), so a classroom without internet
sees the formulas, not raw LaTeX. The front page and the docs index are Chinese first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "book"
SRC, HTML = BUILD / "src", BUILD / "html"
LABS = sorted(REPO.glob("labs/0*_*.ipynb"))
DOCS = ["engine", "performance", "serving", "assessment", "instructors", "hub", "mutation"]
WIDGET = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET_NOTE = ("▶ 此处是交互部件（ipywidgets），只在 JupyterLab 里运行：`make lab` 打开本实验即可操作。"
               " (An interactive widget: it runs in JupyterLab only; `make lab` opens this lab.)")
MATHJAX_VERSION = "3.2.2"
VENDOR = BUILD / "vendor"
# What the site needs of MathJax: the TeX-to-HTML bundle and the fonts it loads relative to itself.
MATHJAX_FILES = ("es5/tex-chtml.js", "es5/output/chtml/fonts/woff-v2/")
DOC_TITLES_ZH = {
    "engine": ("引擎", "引擎的结构：调度器、分页 KV、模型执行、投机解码、C 内核与线程"),
    "performance": ("性能", "各 CPU 上的基准数字：与 llama.cpp、transformers 的对照，比值与测量方法"),
    "serving": ("服务与压测", "`labkit serve`（兼容 OpenAI 的服务器）与 `labkit bench`（压测客户端）"),
    "assessment": ("评测", "测验、练习与进度：怎么判分、为什么这样设计"),
    "instructors": ("教师指南", "给一个班上课：准备、分发、收集进度"),
    "hub": ("一台服务器上的一个班", "JupyterHub：每个学员一个内核、资源限制与部署"),
    "mutation": ("变异测试", "测试能否抓住我们会犯的错：变异测试的记录"),
}


def mathjax(vendor: Path = VENDOR) -> Path:
    """A MathJax 3 copy (``es5/``) for the site, fetched once with ``npm pack`` into ``vendor`` and reused."""
    root = vendor / f"mathjax-{MATHJAX_VERSION}"
    if (root / MATHJAX_FILES[0]).exists():
        return root / "es5"
    vendor.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("the course site ships MathJax so formulas render offline: install npm (apt-get install npm), "
                         f"or unpack mathjax@{MATHJAX_VERSION} from the npm registry into {root}")
    out = subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--silent", "--pack-destination", str(vendor)],
                         capture_output=True, text=True, timeout=300)
    tgz = vendor / f"mathjax-{MATHJAX_VERSION}.tgz"
    if out.returncode != 0 or not tgz.exists():
        raise SystemExit(f"npm pack mathjax@{MATHJAX_VERSION} failed: {out.stderr[-2000:]}")
    with tarfile.open(tgz) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and any(
            m.name == f"package/{f}" or (f.endswith("/") and m.name.startswith(f"package/{f}")) for f in MATHJAX_FILES)]
        for m in members:
            m.name = m.name.removeprefix("package/")
        tar.extractall(root, members=members, filter="data")
    tgz.unlink()
    return root / "es5"


def docs_index() -> str:
    """The docs' index page, Chinese first: each page's Chinese name and what it holds."""
    rows = "\n".join(f"- [{zh}（{Path(REPO / 'docs' / f'{d}.md').read_text(encoding='utf-8').splitlines()[0].lstrip('# ')}）]"
                     f"({d}.md)：{what}" for d, (zh, what) in DOC_TITLES_ZH.items() if d in DOCS)
    return ("# 文档（Documentation）\n\n面向想了解引擎内部、运行课程或复现数字的读者。各页目前以英文写成，"
            "下面是每页的中文概要。\n\n" + rows + "\n\n```{toctree}\n:hidden:\n\n" + "\n".join(DOCS) + "\n```\n")


LIVE_ONLY = ("交互部件、预测和练习只在 JupyterLab 中可用（`make lab`）。",
             "The widgets, predictions and exercises are live only in JupyterLab (`make lab`).")
SITE_META = "labkit_site"          # notebook metadata: where the page's numbers come from
SETUP_CELL = "from labkit.labs.common.beside import site_record, use_site_bundle; use_site_bundle()"
SAVED = re.compile(r"^(?P<indent>[ \t]*)save_record\([ \t]*(?P<name>[A-Za-z_][A-Za-z_0-9]*)[ \t]*\)[ \t]*(#.*)?$")


def site_note(meta: dict | None) -> str:
    """The note at the top of a lab page: which CPU, mode, load and date its measured sections were recorded on
    (and which sections the build machine measured), or that the page is one run of the build machine."""
    if not meta:
        return ("```{note}\n这是实验的静态版本：本页是构建本站的机器以快速模式（LABKIT_FAST=1）运行一次的结果，"
                "数字是那台机器当时测的（各节写着测量时的负载）。" + LIVE_ONLY[0] + "\n"
                "This is the lab as executed once in fast mode by the machine that built the site; its numbers are "
                "that machine's at the time (each section prints the load). " + LIVE_ONLY[1] + "\n```\n")
    mode_zh, mode_en = ("快速模式", "fast mode") if meta["mode"] == "fast" else ("完整模式", "full mode")
    replayed = "、".join(meta["replayed"]) or "无"
    zh = (f"这是实验的静态版本。本页各测量节（{replayed}）的表、图和结论来自录制的记录包 `{meta['bundle']}`："
          f"**{meta['cpu']}**，{meta['cores']} 个核，{mode_zh}，负载至多 {meta['load']}，录于 {meta['recorded']} "
          "（UTC）——不是构建本站的机器测的；每节开头也写着这一行。")
    en = (f"Measured sections ({', '.join(meta['replayed']) or 'none'}) are rendered from the recorded bundle "
          f"`{meta['bundle']}`: **{meta['cpu']}**, {meta['cores']} cores, {mode_en}, load at most {meta['load']}, "
          f"recorded {meta['recorded']} (UTC), not measured by the machine that built the site.")
    live = meta.get("live", [])
    if live:
        zh += (f"其余计时的输出（{'、'.join(live)}）是构建本站时在 {meta['build_cpu']} 上以快速模式现场测得的"
               f"（负载 {meta['build_load']}）。")
        en += (f" Other timed outputs ({', '.join(live)}) were measured while building the site, on "
               f"{meta['build_cpu']} in fast mode (load {meta['build_load']}).")
    return f"```{{note}}\n{zh}{LIVE_ONLY[0]}\n{en} {LIVE_ONLY[1]}\n```\n"


def replay_source(source: str) -> tuple[str, list[str], list[str]]:
    """A code cell's source with ``NAME = site_record(NAME)`` before each ``save_record(NAME)`` line; returns it,
    the names rebound, and the expressions saved that cannot be rebound (``save_record(<expression>)``)."""
    lines, names, inline = [], [], []
    for line in source.splitlines():
        m = SAVED.match(line)
        if m:
            lines.append(f"{m.group('indent')}{m.group('name')} = site_record({m.group('name')})")
            names.append(m.group("name"))
        elif "save_record(" in line.split("#", 1)[0] and not line.lstrip().startswith(("from ", "import ")):
            inline.append(line.split("#", 1)[0].strip())
        lines.append(line)
    return "\n".join(lines), names, inline


def quiet_records(bundle: Path) -> tuple[int, int]:
    """(records measured with the load known and at or below the cores, all records) of a bundle."""
    from labkit.labs.common.records import load_bundle

    records = [r for recs in load_bundle(bundle).values() for r in recs.values()]
    return sum(r.context.load is not None and not r.context.busy for r in records), len(records)


def busy_outputs(nb: dict) -> int:
    """How many cell outputs of an executed notebook say "机器正忙" (machine busy)."""
    return sum("机器正忙" in json.dumps(o, ensure_ascii=False) for c in nb["cells"] for o in c.get("outputs", []))


def site_bundle(choice: Path | None = None, mode: str = "fast", root: Path = REPO / "data" / "lab-runs") -> Path:
    """The bundle the site renders from: ``choice``, else among the bundles under ``root`` named by their mode
    alone (a ``fast-busy2`` one was recorded beside busy loops on purpose) the one in ``mode`` with the most quiet
    records, else the one of any mode with the most. A bundle without a quiet record is refused; a busy record in
    the chosen one is not replayed (``beside.site_record`` says so on the page)."""
    from labkit.labs.common.beside import bundle_dirs

    if choice is not None:
        if quiet_records(choice)[0] == 0:
            raise SystemExit(f"{choice}: not a quiet bundle (every record measured with the load above the cores, "
                             "or unknown): the site renders from quiet recordings only")
        return choice
    found = {p: quiet_records(p) for p in bundle_dirs(root).values() if p.name in ("fast", "full")}
    ranked = sorted((p for p, (quiet, _) in found.items() if quiet), key=lambda p: (p.name != mode, -found[p][0], str(p)))
    if not ranked:
        raise SystemExit(f"no quiet bundle under {root} ({len(found)} bundle(s), none with a record measured with the "
                         "load at or below the cores): run `make record` on an idle machine, or pass --bundle")
    return ranked[0]


def provenance(bundle: Path, replayed: list[str], live: list[str]) -> dict:
    from labkit.labs.common.measure import describe_machine, machine_load
    from labkit.labs.common.records import load_bundle

    records = [r for recs in load_bundle(bundle).values() for r in recs.values()]
    loads = [r.context.load for r in records if r.context.load is not None]
    first = min(records, key=lambda r: r.context.recorded)
    load = machine_load()
    return {"bundle": f"{bundle.parent.name}/{bundle.name}", "cpu": first.context.cpu, "cores": first.context.cores,
            "mode": first.context.mode, "load": f"{max(loads):.1f}" if loads else "?",
            "recorded": first.context.recorded[:16].replace("T", " "), "replayed": replayed, "live": live,
            "build_cpu": describe_machine(), "build_load": "?" if load is None else f"{load:.1f}"}


def execute(out: Path, bundle: Path | None) -> None:
    """Run every lab top to bottom in fast mode into ``out`` (the tracked notebooks are only read), each
    recorded section replayed from ``bundle`` (None: measured here, as the labs are in JupyterLab)."""
    import tempfile

    import nbformat
    from nbclient import NotebookClient

    out.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(LABS, 1):
        start = time.monotonic()
        print(f"[{i}/{len(LABS)}] executing {path.name} in fast mode"
              + (f", recorded sections from {bundle.relative_to(REPO) if bundle.is_relative_to(REPO) else bundle}"
                 if bundle else "") + " ...", flush=True)
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory(prefix="labkit-book-") as tmp:
            log = Path(tmp) / "site.jsonl"
            env = dict(os.environ, LABKIT_FAST="1", PYTHONPATH=str(REPO), LABKIT_RESULTS=str(Path(tmp) / "results"))
            inline: list[str] = []
            if bundle is not None:
                env.update(LABKIT_SITE_BUNDLE=str(bundle.resolve()), LABKIT_SITE_LOG=str(log))
                for cell in nb.cells:
                    if cell.cell_type == "code" and "save_record(" in cell.source:
                        source, names, saved = replay_source(cell.source)
                        inline += saved
                        if names:
                            cell.metadata[SITE_META] = {"source": cell.source}
                            cell.source = source
                setup = nbformat.v4.new_code_cell(SETUP_CELL)
                setup.metadata[SITE_META] = {"setup": True}
                nb.cells.insert(0, setup)
            env.pop("LABKIT_RECORDS", None)
            try:
                NotebookClient(nb, timeout=600, kernel_name="python3",
                               resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
            except Exception as e:      # nbclient's CellExecutionError: say what a replay failure most likely means
                hint = ("" if bundle is None else f"\n(if the failing cell rebinds a record to the bundle's, the bundle "
                        f"{bundle} may predate this lab's record format: re-record it with `make record` on an idle "
                        "machine, or pass --bundle)")
                raise SystemExit(f"{path.name} failed while building the site: {e}{hint}") from e
            if bundle is not None:
                entries = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
                nb.cells = [c for c in nb.cells if not c.metadata.get(SITE_META, {}).get("setup")]
                for cell in nb.cells:
                    original = cell.metadata.pop(SITE_META, None)
                    if original:
                        cell.source = original["source"]       # the page shows the lab's code
                replayed = [f"{e['lab']}/{e['section']}" for e in entries if e["replayed"]]
                live = [f"{e['lab']}/{e['section']}" for e in entries if not e["replayed"]] + inline
                nb.metadata[SITE_META] = provenance(bundle, replayed, live)
                print(f"      replayed {len(replayed)} section(s); measured here: {live or 'none'}", flush=True)
        nbformat.write(nb, out / path.name)
        print(f"      done in {time.monotonic() - start:.0f} s", flush=True)


def static_outputs(nb: dict) -> dict:
    """Plotly figures as HTML (plotly.js comes with the site), widgets as a note; the rest as it is."""
    import plotly.io as pio

    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data")
            if not data:
                continue
            if PLOTLY in data:
                fig = pio.from_json(json.dumps(data[PLOTLY]))
                output["data"] = {"text/html": fig.to_html(include_plotlyjs=False, full_html=False),
                                  "text/plain": "<plotly figure>"}
            elif WIDGET in data:
                output["data"] = {"text/markdown": WIDGET_NOTE, "text/plain": WIDGET_NOTE}
    return nb


def staged_links(text: str, page: Path, staged: dict[Path, str]) -> str:
    """Relative links to pages on the site point at them; links to other repository files become plain
    text naming the file (the site has no copy of them)."""
    def fix(match: re.Match) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        if resolved in staged:
            return f"[{label}]({staged[resolved]}{'#' + anchor if anchor else ''})"
        return f"{label} (`{resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else path}`)"

    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", fix, text)


def stage(executed: Path) -> list[Path]:
    """Write the site's sources into SRC; returns the staged lab notebooks. (No nbformat here: importing it
    imports jsonschema's format checkers, seconds on a busy machine, for one markdown cell.)"""
    if SRC.exists():
        shutil.rmtree(SRC)
    (SRC / "_static").mkdir(parents=True)
    (SRC / "labs").mkdir()
    (SRC / "docs").mkdir()
    shutil.copy(REPO / "book" / "conf.py", SRC / "conf.py")
    shutil.copytree(mathjax(), SRC / "_static" / "mathjax")
    with open(SRC / "conf.py", "a", encoding="utf-8") as conf:
        conf.write('\n# MathJax served with the site (scripts/build_book.py copies it): formulas render offline\n'
                   'mathjax_path = "mathjax/tex-chtml.js"\n')
    import plotly

    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", SRC / "_static" / "plotly.min.js")
    site_page = {REPO / "README.md": "index.md", **{REPO / "docs" / f"{d}.md": f"docs/{d}.md" for d in DOCS},
                 **{p: f"labs/{p.name}" for p in LABS}}
    staged_labs = []
    for path in LABS:
        source = executed / path.name
        if not source.exists():
            raise SystemExit(f"no executed copy of {path.name} in {executed}: run without --executed, or run the "
                             "notebook tests first")
        nb = static_outputs(json.loads(source.read_text(encoding="utf-8")))
        nb["cells"] = [c for c in nb["cells"] if "".join(c.get("source", "")) != "import sys; print(sys.prefix)"]
        first = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), 0)
        nb["cells"].insert(first + 1, {"cell_type": "markdown", "id": "labkit-site-note", "metadata": {},
                                       "source": site_note(nb.get("metadata", {}).get(SITE_META))})
        from_labs = {p.resolve(): os.path.relpath(v, "labs") for p, v in site_page.items()}
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                cell["source"] = staged_links(text, path, from_labs)
        target = SRC / "labs" / path.name
        target.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        staged_labs.append(target)
    for page, name in site_page.items():
        if page.suffix != ".md":
            continue
        text = page.read_text(encoding="utf-8")
        rel = {p.resolve(): os.path.relpath(v, os.path.dirname(name) or ".") for p, v in site_page.items()}
        text = staged_links(text, page, rel)
        if name == "index.md":
            text = ("本站是 labkit 实验课的静态版本：五个实验（各测量节的数字来自录制的记录，每页开头写明录制它的 CPU、模式和日期）和文档。"
                    "要亲手运行、操作交互部件、做练习，请在自己的电脑上 `make lab`。\n\n" + text +
                    "\n\n```{toctree}\n:hidden:\n:caption: 实验 Labs\n\n" +
                    "\n".join(f"labs/{p.stem}" for p in LABS) + "\n```\n\n```{toctree}\n:hidden:\n:caption: "
                    "文档 Docs\n\ndocs/index\n```\n")
        elif name.startswith("docs/"):
            zh, what = DOC_TITLES_ZH.get(Path(name).stem, ("", ""))
            if zh:                       # a Chinese summary right under the page's title
                note = f"```{{note}}\n中文概要（{zh}）：{what}。本页正文目前为英文。\n```\n"
                title, _, body = text.partition("\n") if text.startswith("# ") else ("", "", text)
                text = f"{title}\n\n{note}\n{body}" if title else f"{note}\n{body}"
        (SRC / name).write_text(text, encoding="utf-8")
    (SRC / "docs" / "index.md").write_text(docs_index(), encoding="utf-8")
    return staged_labs


def build() -> None:
    if HTML.exists():
        shutil.rmtree(HTML)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(SRC), str(HTML)]
    print("building:", " ".join(cmd[2:]), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"sphinx failed (a broken link, a missing page or another warning):\n{out.stderr[-4000:]}")


def check(staged_labs: list[Path]) -> list[str]:
    """Every lab page exists, carries as many figures as its notebook made, and no cell ended in an error."""
    problems = []
    for nb_path in staged_labs:
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        if errors:
            problems.append(f"{nb_path.name}: {len(errors)} cell error(s): {errors[0].get('ename')}")
        figures = sum("plotly-graph-div" in o.get("data", {}).get("text/html", "") for o in outputs)
        figures += sum("image/png" in o.get("data", {}) for o in outputs)
        page = HTML / "labs" / f"{nb_path.stem}.html"
        if not page.exists():
            problems.append(f"{page.relative_to(REPO)} was not built")
            continue
        html = page.read_text(encoding="utf-8")
        shown = html.count('class="plotly-graph-div"') + len(re.findall(r"<img [^>]*src=\"[^\"]*_images/", html))
        if shown < figures:
            problems.append(f"{page.name}: {figures} figure(s) in the notebook, {shown} on the page")
        if figures == 0:
            problems.append(f"{page.name}: no figure at all (the executed notebook kept none)")
        problems += offline_problems(html, page.name)
    return problems


def offline_problems(html: str, name: str) -> list[str]:
    """A page must load no script from another host (MathJax and plotly.js are served with the site)."""
    remote = re.findall(r'<script[^>]+src="(https?://[^"]+)"', html)
    return [f"{name}: loads {src} from the network (the site must work offline)" for src in remote]


def browser_check() -> str:
    """Open the index and lab 01 in chromium over HTTP; a plotly figure must draw (its SVG appears)."""
    import functools
    import http.server
    import threading

    chromium = shutil.which("chromium")
    if chromium is None:
        return "skipped: no chromium (apt-get install chromium fonts-noto-cjk)"
    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):          # no access log on the terminal
            pass

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):     # the browser closed a connection it no longer needed
                pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{base}/index.html")
            assert "labkit" in page.title(), page.title()
            page.goto(f"{base}/labs/{LABS[0].stem}.html")
            page.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
            drawn = page.locator(".plotly-graph-div .main-svg").count()
            page.screenshot(path=str(BUILD / "lab01.png"), full_page=False)
            browser.close()
    finally:
        server.shutdown()
    if errors:
        raise SystemExit(f"javascript errors on the lab page: {errors[:3]}")
    return f"chromium drew {drawn} plotly figure(s) on {LABS[0].stem}.html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executed", type=Path, default=None, help="take executed notebooks from here")
    p.add_argument("--check", action="store_true", help="check figures, errors and two pages in chromium")
    p.add_argument("--bundle", type=Path, default=None, help="the quiet recorded bundle the labs' measured sections "
                   "come from (default: the first quiet fast-mode one under data/lab-runs)")
    p.add_argument("--labs", nargs="*", default=None, help="lab numbers to build (default: all)")
    p.add_argument("--live", action="store_true", help="replay no bundle: every number measured while building")
    args = p.parse_args(argv)
    global LABS
    if args.labs:
        LABS = [lab for lab in LABS if lab.name[:2] in args.labs]
    executed = args.executed or BUILD / "replayed"      # not make test's executed/ (the suite writes those)
    if args.executed is None:
        bundle = None if args.live else site_bundle(args.bundle)
        execute(executed, bundle)
        busy = {lab.name: busy_outputs(json.loads((executed / lab.name).read_text(encoding="utf-8"))) for lab in LABS}
        print(f"'机器正忙' marks in outputs: {({k: v for k, v in busy.items() if v}) or 'none'}", flush=True)
    staged = stage(executed)
    build()
    print(f"built {HTML.relative_to(REPO)}/index.html", flush=True)
    if args.check:
        problems = check(staged)
        if problems:
            print("\n".join(problems))
            return 1
        print(browser_check())
    return 0


if __name__ == "__main__":
    sys.exit(main())
