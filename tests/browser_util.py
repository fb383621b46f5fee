"""Helpers for the real-browser tests: local servers, Debian's chromium through playwright, page errors.

Nothing here downloads anything: chromium is the distribution's (``/usr/bin/chromium``, never
``playwright install``), the servers listen on 127.0.0.1, and every request the page makes to
another host is aborted before it leaves the machine (see ``block_external_requests``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOOPBACK_HOSTS = {"127.0.0.1", "localhost"}

# How the dashboard is served: the Makefile's VOILA_FLAGS, read from it (one place for ``make dashboard`` and
# the tests; its comment says why each flag):
# - Voila 0.5.13 shuts a page's kernel down with a beacon on ``beforeunload``, but never sets the
#   ``_xsrf`` cookie that request needs (voila-dashboards/voila#1458, open), so the check is off for it.
# - Culling is the backstop for pages that vanish without the beacon (a crashed tab): a kernel with no
#   page connected is shut down after 900 s without activity, far above the slowest page load measured
#   under load (230 s), so a page still on its way keeps its kernel.
# - ``jupyter trust`` signs the notebook first (``trust_notebook``), so Voila does not warn that it is
#   untrusted (it has no outputs to trust; Voila executes it afresh).
MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def makefile_variable(name: str, makefile: Path = MAKEFILE) -> list[str]:
    """The words of the Makefile's ``NAME := ...`` (continuation lines joined)."""
    text = makefile.read_text(encoding="utf-8").replace("\\\n", " ")
    found = re.search(rf"^{name}\s*:?=(.*)$", text, re.MULTILINE)
    if found is None:
        raise ValueError(f"{makefile} defines no {name}")
    return found.group(1).split()


VOILA_FLAGS = makefile_variable("VOILA_FLAGS")


def trust_notebook(path: Path, env: dict[str, str]) -> None:
    """``jupyter trust path`` in ``env`` (the signature goes to that environment's Jupyter data dir)."""
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(path)], env=env, check=True,
                   capture_output=True, timeout=120)


def missing_browser_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (CI installs Debian's chromium package; never `playwright install`)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright Python package is not installed (pip install playwright)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A server process we started (its own process group) and the log it writes."""

    name: str
    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Jupyter servers then shut their kernels down), SIGKILL if that hangs."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)   # the group of the server we started
            self.process.wait(5)


def start_server(name: str, cmd: list[str], url: str, log_path: Path, env: dict[str, str],
                 cwd: Path, probe_url: str | None = None, timeout: float = 90.0) -> Server:
    """Start ``cmd`` serving ``url``; wait until ``probe_url`` (default ``url``) answers over HTTP.

    Probe a URL that has no side effects: Voila starts a kernel for every request to its page.
    Raises, with the end of the server's log, if it exits or never answers.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")
    process = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    log.close()
    server = Server(name, process, url, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{server.log()[-4000:]}")
        if _answers(probe_url or url):
            return server
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{name} did not answer at {url} within {timeout:.0f} s:\n{server.log()[-4000:]}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True    # the server is up (a 404/403 still means it answers)
    except (urllib.error.URLError, OSError):
        return False


def kernel_pids(kernel_id: str) -> list[int]:
    """Processes whose command line names this kernel's connection file (Linux /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "ipykernel" in cmdline and kernel_id in cmdline:
            pids.append(int(proc.name))
    return pids


def is_external(url: str) -> bool:
    host = urlparse(url).hostname
    return bool(host) and host not in LOOPBACK_HOSTS


@dataclass
class PageErrors:
    """Everything a page reports as going wrong, split into ours and clearly external.

    External: a console error whose source is another host. The only ones expected are Voila's
    hard-coded font-awesome stylesheets from cdn.jsdelivr.net (voila/templates/lab/index.html.j2;
    Voila already bundles the same icons), which ``block_external_requests`` aborts so nothing
    leaves the machine; the page then logs "Failed to load resource" for each.
    """

    errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)   # URLs block_external_requests refused

    def attach(self, page) -> None:
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("requestfailed", self._on_request_failed)

    def _on_console(self, message) -> None:
        if message.type != "error":
            return
        source = (message.location or {}).get("url", "")
        text = f"console.error: {message.text} ({source})"
        (self.external if is_external(source) else self.errors).append(text)

    def _on_request_failed(self, request) -> None:
        if not is_external(request.url):
            self.errors.append(f"request failed: {request.url} ({request.failure})")


def block_external_requests(context) -> list[str]:
    """Abort every request to a host other than loopback; returns the list of aborted URLs."""
    aborted: list[str] = []

    def handle(route) -> None:
        if is_external(route.request.url):
            aborted.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", handle)
    return aborted


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


CANVAS_SIGNATURE_JS = """(selector) => Array.from(document.querySelectorAll(selector))
    .map((canvas) => canvas.width + "x" + canvas.height + ":" + canvas.toDataURL()).join("|")"""


def canvas_signature(page, selector: str) -> str:
    """The pixels of every canvas matching ``selector`` (as data URLs): equal iff the picture is."""
    return page.evaluate(CANVAS_SIGNATURE_JS, selector)


def wait_for_canvas_change(page, selector: str, before: str, timeout_s: float) -> None:
    """Wait until the canvases matching ``selector`` show something other than ``before``."""
    page.wait_for_function(f"([sel, before]) => ({CANVAS_SIGNATURE_JS})(sel) !== before",
                           arg=[selector, before], timeout=timeout_s * 1000, polling=250)


def wait_until(predicate, timeout: float, interval: float = 0.25, what: str = "condition"):
    """Poll ``predicate()`` (no page involved) until truthy; raises TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def jupyterlab_command(port: int, root: Path, state: Path, settings: dict[str, dict] | None = None) -> list[str]:
    """JupyterLab serving ``root`` on loopback with its state (settings, workspaces, checkpoints) under
    ``state``: no autosave (outputs are never written), no news toast, root allowed (CI containers often
    run as root), the app exposed to the page's JavaScript. ``settings``: more plugin settings,
    ``{"@jupyterlab/notebook-extension:tracker": {...}}``."""
    import json

    chosen = {"@jupyterlab/docmanager-extension:plugin": {"autosave": False},
              "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}, **(settings or {})}
    for plugin, values in chosen.items():
        package, _, name = plugin.rpartition(":")
        folder = state / "lab-settings" / package
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    return [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
            "--ServerApp.allow_root=True", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={state / 'lab-settings'}", f"--LabApp.workspaces_dir={state / 'workspaces'}",
            f"--FileCheckpoints.root_dir={state / 'checkpoints'}",   # no .ipynb_checkpoints beside the notebooks
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]


# JupyterLab (``--LabApp.expose_app_in_browser``): open a notebook and run all its cells (awaiting the
# run when ``wait``), and close it with its kernel shut down, without saving.
OPEN_AND_RUN_ALL_JS = """async ([path, wait]) => {
    const app = window.jupyterapp;
    const panel = await app.commands.execute("docmanager:open", {path, factory: "Notebook"});
    await panel.context.ready;
    await panel.sessionContext.ready;
    app.shell.activateById(panel.id);
    const done = app.commands.execute("notebook:run-all-cells");   // resolves when every cell has run
    if (wait) await done;
}"""
CLOSE_AND_SHUTDOWN_JS = """async (path) => {
    const app = window.jupyterapp;
    for (const widget of Array.from(app.shell.widgets("main"))) {
        if (widget.context?.path === path) {
            await widget.sessionContext.shutdown();
            widget.dispose();   // no "save changes?" dialog: the outputs must not be saved
        }
    }
}"""
