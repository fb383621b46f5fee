"""The class hub's parts, without a hub: the instructor's password, the class view's rows, the instructor's
tools (push, reset, export), the learner's server flags, cgroup v2 limits, the Makefile's hub and dashboard
lines, and learners loading the C kernels a class's set-up built. Each runs in well under a second (the
kernel test loads the library the suite builds anyway).

The same paths run for real in tests/hub/test_hub.py (a hub, its proxy, three learners).
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import shutil
import stat
import textwrap
import time
from pathlib import Path

import pytest

from labkit.assess.progress import LabProgress
from labkit.hub import class_tools, instructor
from labkit.hub.class_view import Learner, class_rows, page
from labkit.hub.limits import LearnerCgroup, Limits
from labkit.hub.results import exercise_totals
from labkit.hub.settings import from_env
from labkit.hub.spawner import NoAccount, kernel_culling

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- the instructor's password

@pytest.fixture(autouse=True)
def quick_bcrypt(monkeypatch):
    """bcrypt's cheapest cost (4 rounds, not 12) for hashes made in these tests: the same code, 256x faster."""
    import bcrypt

    gensalt = bcrypt.gensalt
    monkeypatch.setattr(bcrypt, "gensalt", lambda rounds=4, prefix=b"2b": gensalt(4, prefix))

def test_the_instructors_password_file_is_a_bcrypt_hash_only_its_owner_reads(tmp_path):
    path = tmp_path / "instructor-password"
    instructor.set_password(path, "correct horse")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and b"correct horse" not in path.read_bytes()
    assert instructor.password_matches(path, "correct horse")
    assert not instructor.password_matches(path, "correct hors")
    path.chmod(0o644)                         # readable by others: refused, whatever the password
    assert not instructor.password_matches(path, "correct horse")
    with pytest.raises(ValueError, match="mode 644"):
        instructor.check_file(path)


def test_no_instructor_password_means_no_login_and_says_how_to_set_one(tmp_path):
    assert not instructor.password_matches(tmp_path / "none", "")
    with pytest.raises(ValueError, match="set one with `python -m labkit.hub instructor`"):
        instructor.check_file(tmp_path / "none")
    with pytest.raises(ValueError, match="at least 8"):
        instructor.set_password(tmp_path / "short", "1234567")


class _Request:
    remote_ip = "192.0.2.7"


class _Handler:
    request = _Request()


def test_the_instructors_name_is_never_first_use_and_learners_still_are(tmp_path):
    """A first login under the instructor's name with any password is refused (the first-use store is not
    consulted for them); a learner's first login still sets their password."""
    import asyncio

    from labkit.hub.jupyterhub_setup import ClassAuthenticator

    auth = ClassAuthenticator(instructor="teacher", password_file=str(tmp_path / "instructor-password"),
                              dbm_path=str(tmp_path / "passwords.dbm"), create_users=True)
    login = lambda name, password: asyncio.run(auth.authenticate(_Handler(), {"username": name,  # noqa: E731
                                                                              "password": password}))
    assert login("teacher", "anything-at-all") is None            # no password set yet: nobody gets in
    instructor.set_password(tmp_path / "instructor-password", "the right one")
    assert login("teacher", "a wrong one!") is None
    assert login("teacher", "the right one") == "teacher"
    assert login("ann", "ann's first") == "ann" and login("ann", "someone else") is None
    assert "success" in auth.reset_password("teacher", "a new password")
    assert login("teacher", "a new password") == "teacher" and login("teacher", "the right one") is None


def test_on_kubernetes_the_instructors_password_is_a_mounted_secret_never_first_use(tmp_path, monkeypatch):
    """zero-to-jupyterhub (no Kubernetes here): the values' hub.extraConfig snippet, run as the chart's config
    runs it, with the chart's hub image's authenticator (FirstUseAuthenticator 1.1.1, bcrypt 5, as pinned
    here). It reads the file where the values mount the secret; the file is what `password-file` writes."""
    import asyncio
    import io

    import yaml
    from traitlets.config import Config

    from labkit.hub.__main__ import main

    hub = yaml.safe_load((REPO / "deploy" / "z2jh-values.yaml").read_text(encoding="utf-8"))["hub"]
    c = Config()
    exec(hub["extraConfig"]["labkit-instructor"], {"c": c})      # the chart: exec(config_py) in its config file
    authenticator = c.JupyterHub.authenticator_class
    where = Path(authenticator.class_traits()["instructor_password_file"].default_value)
    mount = next(m for m in hub["extraVolumeMounts"] if m["name"] == "labkit-instructor")
    volume = next(v for v in hub["extraVolumes"] if v["name"] == "labkit-instructor")
    assert where.parent == Path(mount["mountPath"]) and volume["secret"]["secretName"] == "labkit-instructor"
    assert f"--from-file={where.name}" in (REPO / "docs" / "hub.md").read_text(encoding="utf-8")
    teacher = hub["config"]["Authenticator"]["admin_users"][0]
    secret = tmp_path / where.name
    auth = authenticator(instructor_password_file=str(secret), admin_users={teacher}, create_users=True,
                         dbm_path=str(tmp_path / "passwords.dbm"))
    login = lambda name, password: asyncio.run(auth.authenticate(_Handler(), {"username": name,  # noqa: E731
                                                                              "password": password}))
    assert login(teacher, "anything-at-all") is None              # no secret mounted: nobody gets in
    monkeypatch.setattr("sys.stdin", io.StringIO("the right one\n"))
    main(["password-file", str(secret)])
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and instructor.password_matches(secret, "the right one")
    assert login(teacher, "a wrong one!") is None and login(teacher, "the right one") == teacher
    assert login(teacher, "a wrong one!") is None                 # the refused try set no first-use password
    assert login("ann", "ann's first") == "ann" and login("ann", "someone else") is None
    assert "kubectl" in auth.reset_password(teacher, "a new password")
    assert login(teacher, "the right one") == teacher


# ----------------------------------------------------------------------------- settings

@pytest.mark.parametrize("value", ["60", "300"])
def test_an_idle_cull_at_or_below_the_activity_interval_is_refused(value):
    with pytest.raises(ValueError, match="LABKIT_HUB_CULL_IDLE.*every 300 s"):
        from_env({"LABKIT_HUB_CULL_IDLE": value})
    assert from_env({"LABKIT_HUB_CULL_IDLE": "301"}).cull_idle_s == 301


def test_kernels_idle_inside_a_learners_server_are_culled_by_default_even_with_their_tab_open():
    s = from_env({})
    assert s.cull_kernels_s == 1200 and s.password_file == Path("/srv/labkit/instructor-password")
    assert kernel_culling(s.cull_kernels_s) == [
        "--MappingKernelManager.cull_idle_timeout=1200", "--MappingKernelManager.cull_interval=60",
        "--MappingKernelManager.cull_connected=True", "--MappingKernelManager.cull_busy=False"]
    assert kernel_culling(0) == []
    with pytest.raises(ValueError, match="LABKIT_HUB_CULL_KERNELS"):
        from_env({"LABKIT_HUB_CULL_KERNELS": "-1"})


def test_the_hub_waits_for_a_busy_machines_server_well_past_the_90_s_that_gave_up(monkeypatch):
    """8 learners opening lab 01 at once on 2 busy cores: a server took more than the 90 s the hub then waited,
    and the spawn was given up. The hub now waits 240 s for the server's answer (300 s for its start), as
    docs/hub.md says."""
    import sys

    from traitlets.config import Config

    from labkit.hub import jupyterhub_setup

    monkeypatch.setattr(jupyterhub_setup, "learner_python", lambda: Path(sys.executable))
    c = Config()
    jupyterhub_setup.configure_spawner(c, from_env({}))
    assert c.Spawner.http_timeout >= 240 and c.Spawner.start_timeout >= c.Spawner.http_timeout
    docs = " ".join((REPO / "docs" / "hub.md").read_text(encoding="utf-8").split())
    assert (f"(`http_timeout` {c.Spawner.http_timeout} s, `start_timeout` {c.Spawner.start_timeout} s)" in docs)


def test_a_hub_user_without_an_account_gets_a_page_that_says_to_run_add_learners():
    error = NoAccount("dan")
    assert error.status_code == 409
    assert "add-learners dan" in error.jupyterhub_message


# ----------------------------------------------------------------------------- the class view

def test_exercises_are_counted_out_of_each_labs_total_from_the_course():
    totals = exercise_totals(REPO / "labs")
    assert totals["01"] == 2 and set(totals) == {"01", "02", "03", "04", "05"}
    assert all(n >= 2 for n in totals.values())


def test_the_class_view_has_a_row_for_every_learner_and_every_lab_they_opened():
    done = LabProgress("01", quiz_answered=1, quiz_first_right=1, quiz_size=10, exercises_attempted=1,
                       exercises_passed=1, exercises_first_try=1)
    learners = [Learner("ann", True, None, [done, LabProgress("02")], "home", opened=frozenset({"01", "02"})),
                Learner("bo", False, None, [LabProgress("01")], "home", starting=True),
                Learner("cy", False, None, [LabProgress("01")], "home")]
    rows = class_rows(learners, {"01": 2, "02": 3})
    assert rows == [["ann", "01", "1/10（已答 1）", "通过 1/2（一次通过 1）", "—", ""],
                    ["ann", "02", "—", "—", "—", "已打开，尚未作答"],
                    ["bo", "—", "—", "—", "—", "还没有打开任何实验"],
                    ["cy", "—", "—", "—", "—", "还没有打开任何实验"]]
    html = page(learners, {"01": 2, "02": 3})
    assert "启动中" in html and "运行中" in html and "未运行" in html
    assert "自报" in html and "labkit-self-reported" in html


# ----------------------------------------------------------------------------- the instructor's tools

def _notebook(path: Path, code: str) -> None:
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": [code]}], "metadata": {},
                                "nbformat": 4, "nbformat_minor": 5}))


@pytest.fixture
def a_class(tmp_path):
    """A course and one learner whose account is this process's user, with a home in tmp_path."""
    course, home = tmp_path / "course", tmp_path / "ann"
    course.mkdir()
    home.mkdir()
    _notebook(course / "01_kv.ipynb", 'ex1 = exercise("a")\nex2 = exercise("b")')
    me = pwd.getpwuid(os.getuid())
    account = pwd.struct_passwd(("ann", "x", me.pw_uid, me.pw_gid, "", str(home), "/bin/sh"))
    return course, home, account


def test_a_push_brings_new_notebooks_to_a_learner_now_and_keeps_their_copy(a_class):
    import sys

    course, home, account = a_class
    said = class_tools.push_update([account], Path(sys.executable), course)
    assert (home / "work" / "01_kv.ipynb").is_file() and "new:" in said["ann"]
    (home / "work" / "01_kv.ipynb").write_text("my answers")
    os.utime(home / "work" / "01_kv.ipynb", (1, 1))
    _notebook(course / "02_next.ipynb", "pass")
    class_tools.push_update([account], Path(sys.executable), course)
    assert (home / "work" / "01_kv.ipynb").read_text() == "my answers"
    assert (home / "work" / "02_next.ipynb").is_file()
    assert "reset 01_kv" in (home / "work" / "course-updates.md").read_text()
    class_tools.reset_lab(account, Path(sys.executable), course, "01")
    assert (home / "work" / "01_kv.ipynb").read_text() != "my answers"
    assert [p.read_text() for p in (home / "work" / ".backup").iterdir()] == ["my answers"]
    with pytest.raises(RuntimeError, match="ann: workspace reset 09"):
        class_tools.reset_lab(account, Path(sys.executable), course, "09")


def test_the_export_has_a_row_per_learner_and_lab_with_the_labs_total(a_class, tmp_path):
    course, home, account = a_class
    results = home / "work" / "results"
    results.mkdir(parents=True)
    (results / "lab01.json").write_text(json.dumps({
        "schema": "labkit-results/1", "lab": "01", "updated": "2026-12-07T04:00:00+00:00",
        "exercises": {"a": {"passed": True, "passed_at_attempt": 1, "attempts": 1}}}))
    assert class_tools.export_csv([account], course, tmp_path / "class.csv") == 5
    rows = list(csv.DictReader(open(tmp_path / "class.csv", encoding="utf-8")))
    assert [r["lab"] for r in rows] == ["01", "02", "03", "04", "05"]
    assert {k: rows[0][k] for k in ("learner", "opened", "exercises_passed", "exercises_total")} == {
        "learner": "ann", "opened": "1", "exercises_passed": "1", "exercises_total": "2"}
    assert rows[1]["opened"] == "0"


# ----------------------------------------------------------------------------- cgroup v2, the limits line

def test_cgroup_v2_limits_are_written_as_microseconds_and_bytes(tmp_path):
    """A v2 tree: the hub's cgroup and labkit-hub must delegate memory and cpu, then the learner's cgroup
    gets ``memory.max`` in bytes and ``cpu.max`` as "QUOTA PERIOD" in microseconds."""
    hub = tmp_path / "hub.service"
    hub.mkdir()
    (hub / "cgroup.subtree_control").write_text("")
    where = hub / "labkit-hub" / "ann"
    (hub / "labkit-hub").mkdir()
    (hub / "labkit-hub" / "cgroup.subtree_control").write_text("")
    enforcement = LearnerCgroup("ann", {"v2": where}).apply(Limits(memory_bytes=3 * 2**30, cpus=1.5))
    assert (hub / "cgroup.subtree_control").read_text() == "+memory +cpu"
    assert (where / "memory.max").read_text() == str(3 * 2**30)
    assert (where / "cpu.max").read_text() == "150000 100000"            # 1.5 cores: 150 ms per 100 ms
    LearnerCgroup("bo", {"v2": hub / "labkit-hub" / "bo"}).apply(Limits(cpus=1.0))
    assert (hub / "labkit-hub" / "bo" / "cpu.max").read_text() == "100000 100000"
    assert enforcement.describe(Limits(3 * 2**30, 1.5)) == (
        f"memory limit 3.00 GiB enforced ({where / 'memory.max'}); CPU limit 1.5 cores enforced ({where / 'cpu.max'})")


def test_the_limits_line_prints_gib_of_2_30_bytes_and_cores():
    line = LearnerCgroup("x", {}).apply(Limits(2 * 2**30, 1.0)).describe(Limits(2 * 2**30, 1.0))
    assert line.startswith("memory limit 2.00 GiB NOT enforced; CPU limit 1 cores NOT enforced")
    assert LearnerCgroup("x", {}).apply(Limits(1536 * 2**20)).describe(Limits(1536 * 2**20)).startswith(
        "memory limit 1.50 GiB")


# ----------------------------------------------------------------------------- the Makefile

def _recipe(target: str) -> list[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.MULTILINE).group(1)
    return [line[1:] for line in body.splitlines()]


def test_make_hub_echoes_no_line_that_carries_hub_flags_and_sets_the_instructors_password():
    lines = _recipe("hub")
    assert all(line.startswith("@") for line in lines if "HUB_ENV" in line or "HUB_FLAGS" in line)
    commands = [re.search(r"labkit\.hub (\S+)", line).group(1) for line in lines if "$(PY) -m labkit.hub" in line]
    assert commands == ["add-learners", "instructor", "prepare", "start"]


def test_a_dashboards_kernel_outlives_the_slowest_page_load_measured():
    """Culling is only for kernels with no page connected; one whose page took 230 s to arrive (measured at
    load 20-60 on a 2-core machine) must still be there, with a margin: the timeout is at least 3x that."""
    from tests.browser_util import VOILA_FLAGS

    flags = dict(f.split("=", 1) for f in VOILA_FLAGS if f.startswith("--MappingKernelManager."))
    assert int(flags["--MappingKernelManager.cull_idle_timeout"]) >= 3 * 230
    assert flags.get("--MappingKernelManager.cull_connected", "False") == "False"


# ----------------------------------------------------------------------------- the class's C kernels

def test_a_learner_loads_the_kernels_the_class_set_up_built_and_starts_no_compiler_process(tmp_path, monkeypatch):
    """``prepare`` builds the library into the shared cache's kernels/ and records the compiler it keyed it with
    (its file's sha256 and version line); a learner's process with LABKIT_SHARED_CACHE keys and loads that
    library, read-only, without starting any process: no build, and no ``cc --version`` either."""
    import subprocess

    from labkit.kernels import native

    if not native.available():
        pytest.skip(f"no C kernels here: {native.why_unavailable()}")
    cc, runtime = native.compiler(), native.openmp_runtime()
    built = native.library_path(cc, runtime)
    shared = tmp_path / "shared"
    (shared / "kernels").mkdir(parents=True)
    shutil.copy(built, shared / "kernels" / built.name)
    native.record_compiler(shared / "kernels")                  # the set-up's part: it may run the compiler
    (shared / "kernels").chmod(0o555)
    monkeypatch.setenv("LABKIT_CACHE", str(tmp_path / "own"))
    monkeypatch.setenv("LABKIT_SHARED_CACHE", str(shared))
    started = []

    def no_process(args, *rest, **kwargs):
        started.append(args)
        raise AssertionError(f"a learner's process started {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert native.library_path(cc, runtime) == shared / "kernels" / built.name
    assert native._load()                        # a fresh load, not the process's cached one
    assert started == [] and not (tmp_path / "own").exists()
    monkeypatch.delenv("LABKIT_SHARED_CACHE")
    with pytest.raises(AssertionError, match="--version"):     # without the class's record: cc --version runs
        native.library_path(cc, runtime)


def test_a_learner_whose_compiler_is_not_the_recorded_one_runs_it_and_gets_a_key_of_its_own(tmp_path, monkeypatch):
    """The recorded version line is used only for the very file the set-up ran (same path, same bytes): a
    compiler with other bytes, or another compiler ($CC), is asked for its version as before, so its library
    has another key and a wrong one is never loaded."""
    from labkit.kernels import native

    cc = native.compiler()
    if cc is None:
        pytest.skip("no C compiler here")
    kernels = tmp_path / "shared" / "kernels"
    line = native.record_compiler(kernels)
    monkeypatch.setenv("LABKIT_SHARED_CACHE", str(tmp_path / "shared"))
    monkeypatch.setattr(native, "_version_line", lambda cc: f"asked {Path(cc).name}")
    assert native._compiler_line(cc) == line                   # the recorded file: nothing is asked
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / Path(cc).name).symlink_to(os.path.realpath(cc))     # the same file, the same name,
    assert native._compiler_line(str(tmp_path / "bin" / Path(cc).name)) == line  # elsewhere (/bin, /usr/bin)
    (tmp_path / "bin" / "other-name").symlink_to(os.path.realpath(cc))     # another name: gcc prints the name
    assert native._compiler_line(str(tmp_path / "bin" / "other-name")) == "asked other-name"
    record = json.loads((kernels / "compilers.json").read_text())
    ((key, entry),) = record.items()
    assert entry["file"] == os.path.realpath(cc) and entry["version"] == line
    entry["sha256"] = "0" * 64                                  # the compiler was upgraded since the set-up
    (kernels / "compilers.json").write_text(json.dumps(record))
    assert native._compiler_line(cc) == f"asked {Path(cc).name}"
    other = tmp_path / "othercc"
    other.write_text("#!/bin/sh\necho 'othercc 1.0'\n")
    other.chmod(0o755)
    monkeypatch.setenv("CC", str(other))
    assert native._compiler_line(native.compiler()) == "asked othercc"


def test_the_hub_does_not_start_without_the_instructors_password(tmp_path, monkeypatch):
    from labkit.hub.__main__ import main

    if os.geteuid() != 0:
        pytest.skip("start needs root before anything else")
    monkeypatch.setenv("LABKIT_HUB_DIR", str(tmp_path))
    with pytest.raises(SystemExit, match="without the instructor's password.*instructor-password"):
        main(["start"])
    instructor.set_password(tmp_path / "instructor-password", "set at set-up")
    (tmp_path / "instructor-password").chmod(0o640)
    with pytest.raises(SystemExit, match="mode 640"):
        main(["start"])


def test_add_learners_makes_no_account_for_the_instructor(monkeypatch, tmp_path):
    """Only `instructor` makes the instructor's account: a live add-learners without LABKIT_HUB_INSTRUCTOR
    makes no stray account, and a learner named like the instructor is refused."""
    from labkit.hub import __main__ as cli
    from labkit.hub import learners

    made = []
    monkeypatch.setattr(cli, "need_root", lambda what: None)
    monkeypatch.setattr(learners, "ensure_user", lambda name: made.append(name) or True)
    cli.add_learners(from_env({"LABKIT_HUB_DIR": str(tmp_path)}), ["ann"])
    assert made == ["ann"]
    with pytest.raises(SystemExit, match="instructor is the instructor"):
        cli.add_learners(from_env({"LABKIT_HUB_DIR": str(tmp_path)}), ["instructor"])


def test_a_failed_spawn_and_a_crashed_server_leave_no_cgroup(tmp_path, monkeypatch):
    """The learner's cgroup is made before their server starts: a start that fails removes it, and so does
    the post-stop hook JupyterHub runs for a server that died on its own (stop() is not called then)."""
    import asyncio
    from types import SimpleNamespace

    from jupyterhub.spawner import LocalProcessSpawner

    from labkit.hub import spawner as spawners

    group = tmp_path / "hub" / "labkit-hub"
    group.mkdir(parents=True)
    for where in (group.parent, group):
        (where / "cgroup.subtree_control").write_text("memory cpu")

    class TmpCgroup(LearnerCgroup):
        """A cgroup in a plain directory: rmdir of a real one drops its interface files, here they are removed."""

        def __init__(self, name: str):
            super().__init__(name, {"v2": group / name})

        def end(self, wait_s: float = 5.0) -> list[str]:
            shutil.rmtree(group / self.name, ignore_errors=True)
            return []

    monkeypatch.setattr(spawners, "LearnerCgroup", TmpCgroup)

    async def fails(self):
        assert (group / self.user.name / "memory.max").is_file()      # the limits were in place
        raise RuntimeError("the server did not start")

    monkeypatch.setattr(LocalProcessSpawner, "start", fails)
    me = pwd.getpwuid(os.getuid()).pw_name
    spawner = spawners.LabkitSpawner(user=SimpleNamespace(name=me), mem_limit=2**30, cpu_limit=1.0)
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(spawner.start())
    assert list(group.iterdir()) == [group / "cgroup.subtree_control"]
    TmpCgroup(me).apply(Limits(2**30))                               # a server that then crashed
    spawner.run_post_stop_hook()
    assert not (group / me).exists()


def test_the_tljh_snippet_in_docs_sets_real_spawner_options_and_labkits_server_command():
    """What this machine can check of the TLJH page (no systemd here, so no TLJH): its config snippet runs,
    sets only configurable Spawner traits, and starts learners with labkit's server command."""
    from jupyterhub.spawner import Spawner
    from traitlets.config import Config

    page = (REPO / "docs" / "hub.md").read_text(encoding="utf-8").split("## On an existing TLJH", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", page, re.DOTALL).group(1)
    c = Config()
    exec(textwrap.dedent(snippet), {"c": c})
    for name in c.Spawner:
        assert Spawner.class_traits(config=True).get(name) is not None, f"Spawner.{name} is not an option"
    assert c.Spawner.cmd[1:] == ["-m", "labkit.hub.learner_server"]
    assert {"LABKIT_COURSE", "LABKIT_SHARED_CACHE"} <= set(c.Spawner.environment)
    assert set(c.Spawner.args) <= set(kernel_culling(1200))


def _dashboard_page(tmp_path):
    """Voila serving a one-cell page with the Makefile's VOILA_FLAGS, and that page rendered once (its kernel
    started): (the server, its port, the page's kernel id)."""
    import sys
    import urllib.request

    from tests.browser_util import VOILA_FLAGS, free_port, start_server

    notebook = tmp_path / "page.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                               "execution_count": None, "source": ["print('page')"]}],
                                    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}},
                                    "nbformat": 4, "nbformat_minor": 5}))
    port = free_port()
    server = start_server("voila", [sys.executable, "-m", "voila", notebook.name, f"--port={port}", *VOILA_FLAGS],
                          f"http://127.0.0.1:{port}/", tmp_path / "voila.log", dict(os.environ), tmp_path,
                          probe_url=f"http://127.0.0.1:{port}/api/nothing")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=120) as answer:
            kernel = re.search(r'"kernelId":\s*"([0-9a-f-]{36})"', answer.read().decode()).group(1)
    except BaseException:
        server.stop()
        raise
    return server, port, kernel


def test_a_dashboards_kernel_is_culled_only_unconnected_and_after_the_makefiles_timeout(tmp_path):
    """What a late-connecting viewer relies on, without waiting for it: Voila's own kernel manager took the
    Makefile's cull flags (its culler says so when the page's kernel starts): 900 s idle, and only kernels no
    page is connected to. The wait itself runs with LABKIT_DASHBOARD_DELAY_TEST=1 (below)."""
    from tests.browser_util import VOILA_FLAGS

    flags = dict(f.split("=", 1) for f in VOILA_FLAGS if f.startswith("--MappingKernelManager."))
    server, _, _ = _dashboard_page(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while "Culling kernels with idle" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = server.log()
    finally:
        server.stop()
    assert (f"Culling kernels with idle durations > {flags['--MappingKernelManager.cull_idle_timeout']} seconds at "
            f"{flags['--MappingKernelManager.cull_interval']} second intervals") in log, log[-3000:]
    assert "Culling kernels even with connected clients" not in log


@pytest.mark.skipif(os.environ.get("LABKIT_DASHBOARD_DELAY_TEST") != "1",
                    reason="waits 80 s on purpose: LABKIT_DASHBOARD_DELAY_TEST=1 runs it")
def test_a_dashboard_page_whose_viewer_connects_late_still_has_its_kernel(tmp_path):
    """Voila with the Makefile's flags: a page is rendered (its kernel started), then nobody connects for
    80 s, past the 60 s after which the old flags culled it (a page that took 157-230 s to reach its viewer
    under load met "Kernel does not exist"). The kernel must still be there."""
    import urllib.request

    server, port, kernel = _dashboard_page(tmp_path)
    try:
        time.sleep(80)                                  # the viewer's browser is slow to connect
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/kernels/{kernel}", timeout=30) as answer:
            assert answer.status == 200
        assert "Culling 'idle' kernel" not in server.log()
    finally:
        server.stop()


def test_the_instructors_commands_push_reset_and_export_for_the_class_list(a_class, tmp_path, monkeypatch, capsys):
    import sys

    from labkit.hub import __main__ as cli
    from labkit.hub import learners

    course, home, account = a_class
    monkeypatch.setattr(cli, "need_root", lambda what: None)
    monkeypatch.setattr(cli, "learner_python", lambda: Path(sys.executable))
    monkeypatch.setattr(learners, "account", lambda name: account if name == "ann" else None)
    monkeypatch.setenv("LABKIT_HUB_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LABKIT_HUB_COURSE", str(course))
    learners.write_learners(tmp_path / "state" / "learners.txt", ["ann"])
    cli.main(["push-update"])
    assert f"ann: new: {home / 'work' / '01_kv.ipynb'}" in capsys.readouterr().out
    cli.main(["reset-lab", "ann", "01"])
    assert f"reset: {home / 'work' / '01_kv.ipynb'}" in capsys.readouterr().out
    cli.main(["export-csv", str(tmp_path / "class.csv")])
    assert "5 rows" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="bo has no account on this machine"):
        cli.main(["reset-lab", "bo", "01"])
