"""``make lab`` and the learner's workspace, through the Makefile's own command lines.

The Makefile runs in a scratch copy of the repository's layout (its Makefile, ``etc/``, a few
notebooks under ``labs/``) with a stand-in ``.venv/bin/python`` that records how JupyterLab would be
started, and a stand-in ``id`` that says which user runs it. Then JupyterLab is really started with
the recorded command line, as whoever runs the tests (root in most containers), and must answer.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser_util import free_port, start_server

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = {"cells": [], "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
RECORDER = """#!/bin/sh
# Stand-in for the venv's python: record the arguments of `python -m jupyter lab ...`.
printf '%s\\n' "$@" > "{record}"
"""


def write_notebook(path: Path, marker: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**NOTEBOOK, "metadata": {**NOTEBOOK["metadata"], "marker": marker}}))


def marker(path: Path) -> str:
    return json.loads(path.read_text())["metadata"]["marker"]


@pytest.fixture
def checkout(tmp_path):
    """A scratch repository layout whose set-up is already done (the stamp is newer than the Makefile)."""
    root = tmp_path / "repo"
    (root / "etc").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", root / "Makefile")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "etc" / "jupyterlab", root / "etc" / "jupyterlab")
    write_notebook(root / "labs" / "01_kv_cache.ipynb", "lab01 v1")
    write_notebook(root / "labs" / "dashboards" / "engine_room.ipynb", "dashboard v1")
    venv_bin = root / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"
    python.write_text(RECORDER.format(record=tmp_path / "lab-args"))
    python.chmod(0o755)
    time.sleep(0.01)
    (root / ".venv" / ".labkit-setup-done").touch()
    return root


def make(root: Path, *args: str, uid: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if uid is not None:      # a stand-in `id` first on PATH decides who "runs" make
        fake = root.parent / f"bin-uid{uid}"
        fake.mkdir(exist_ok=True)
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    return subprocess.run(["make", "--no-print-directory", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=60)


def recorded_args(root: Path) -> list[str]:
    return (root.parent / "lab-args").read_text().splitlines()


@pytest.mark.parametrize("uid, allow_root", [(0, True), (1000, False)])
def test_make_lab_passes_allow_root_only_as_root_and_the_learner_flags(checkout, uid, allow_root):
    done = make(checkout, "lab", "LAB_FLAGS=--ServerApp.port=9999 --no-browser", uid=uid)
    assert done.returncode == 0, done.stderr
    args = recorded_args(checkout)
    assert args[:3] == ["-m", "jupyter", "lab"]
    assert ("--ServerApp.allow_root=True" in args) is allow_root
    assert args[-2:] == ["--ServerApp.port=9999", "--no-browser"]          # LAB_FLAGS come last: they win
    assert "--ServerApp.root_dir=work" in args                              # the learner's copies, not labs/
    assert f"--LabApp.app_settings_dir={checkout}/etc/jupyterlab" in args   # no news pop-up


def test_make_lab_keeps_its_workspaces_in_the_checkout_not_the_user_wide_default(checkout, tmp_path):
    """Another JupyterLab on the machine must not reopen this one's tabs (and start their kernels)."""
    assert make(checkout, "lab").returncode == 0
    dirs = [a.split("=", 1)[1] for a in recorded_args(checkout) if a.startswith("--LabApp.workspaces_dir=")]
    assert dirs == [f"{checkout}/work/.jupyterlab/workspaces"]
    ignored = subprocess.run(["git", "check-ignore", "-q", "work/.jupyterlab/workspaces/lab-a511.jupyterlab-workspace"],
                             cwd=REPO)
    assert ignored.returncode == 0, "the workspaces must stay out of git"


def test_the_settings_switch_jupyterlab_news_and_update_checks_off():
    overrides = json.loads((REPO / "etc" / "jupyterlab" / "overrides.json").read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}


def test_make_lab_copies_each_lab_once_and_never_overwrites_the_learners_copy(checkout):
    assert make(checkout, "lab").returncode == 0
    work = checkout / "work"
    assert marker(work / "01_kv_cache.ipynb") == "lab01 v1"
    assert marker(work / "dashboards" / "engine_room.ipynb") == "dashboard v1"

    write_notebook(work / "01_kv_cache.ipynb", "the learner's outputs")
    time.sleep(0.01)
    write_notebook(checkout / "labs" / "01_kv_cache.ipynb", "lab01 v2")        # a `git pull` updates the lab
    write_notebook(checkout / "labs" / "02_paged_attention.ipynb", "lab02 v1")  # and adds one
    done = make(checkout, "lab")
    assert done.returncode == 0, done.stderr
    assert marker(work / "01_kv_cache.ipynb") == "the learner's outputs"
    assert marker(work / "02_paged_attention.ipynb") == "lab02 v1"
    assert "make reset-lab LAB=01_kv_cache" in done.stdout                    # told how to take v2


def test_reset_lab_restores_one_lab_and_keeps_the_old_copy(checkout):
    assert make(checkout, "workspace").returncode == 0
    work = checkout / "work"
    write_notebook(work / "01_kv_cache.ipynb", "the learner's outputs")
    write_notebook(work / "dashboards" / "engine_room.ipynb", "dashboard edited")

    done = make(checkout, "reset-lab", "LAB=01")
    assert done.returncode == 0, done.stderr
    assert marker(work / "01_kv_cache.ipynb") == "lab01 v1"
    assert marker(work / "dashboards" / "engine_room.ipynb") == "dashboard edited"   # other labs untouched
    backups = list((work / ".backup").glob("01_kv_cache.*.ipynb"))
    assert [marker(p) for p in backups] == ["the learner's outputs"]

    missing = make(checkout, "reset-lab", "LAB=07")
    assert missing.returncode != 0 and "LAB=07" in missing.stderr


def test_the_workspace_is_ignored_by_git():
    ignored = subprocess.run(["git", "check-ignore", "-q", "work/01_kv_cache.ipynb"], cwd=REPO)
    assert ignored.returncode == 0, "work/ must be in .gitignore"


@pytest.mark.slow
def test_jupyterlab_starts_with_the_recorded_command_line_for_this_user(checkout, tmp_path):
    """As root (containers) JupyterLab refuses to start without allow_root; this runs the real thing."""
    port = free_port()
    flags = f"--ServerApp.port={port} --ServerApp.ip=127.0.0.1 --no-browser --IdentityProvider.token="
    assert make(checkout, "lab", f"LAB_FLAGS={flags}").returncode == 0
    (checkout / "work").mkdir(exist_ok=True)
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    cmd = [sys.executable, *recorded_args(checkout)]
    server = start_server("jupyterlab", cmd, f"http://127.0.0.1:{port}/", tmp_path / "lab.log", env, checkout,
                          probe_url=f"http://127.0.0.1:{port}/api", timeout=120)
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification"
        with urllib.request.urlopen(url, timeout=10) as answer:
            settings = json.loads(answer.read())
        assert settings["schema"]["properties"]["fetchNews"]["default"] == "false", shlex.join(cmd)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/api/workspaces", timeout=10) as answer:
            assert answer.status == 200                     # the server took the checkout's workspaces dir
    finally:
        server.stop()


def test_the_readme_lab_table_links_every_lab_and_only_labs_that_exist():
    """Each row of the README's lab table links its notebook; every lab in labs/ has its row (the table
    must stay true at every commit)."""
    import re

    linked = re.findall(r"^\| \[(0\d) [^]]*\]\((labs/[^)]+\.ipynb)\) \|", (REPO / "README.md").read_text(), re.M)
    assert len(linked) >= 5, "the README's lab table lost its rows or their links"
    for number, path in linked:
        assert (REPO / path).is_file() and Path(path).name.startswith(f"{number}_"), path
    labs = {p.name[:2] for p in (REPO / "labs").glob("0*_*.ipynb")}
    assert {number for number, _ in linked} == labs


def test_every_relative_link_in_the_readme_and_docs_resolves():
    """The front door and its docs link into the repository: every relative link must reach a file."""
    import re

    pages = [REPO / "README.md", REPO / "labs" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken
