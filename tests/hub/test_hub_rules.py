"""The hub's rules, each from its definition, on its own functions: cgroup limits written in each version's
own files and units (into a directory standing in for /sys/fs/cgroup), the class list and its accounts (the
system calls stood in by fakes that record them), and the class view's cells. No hub runs; these are the
fast selection ``make mutation`` gives the hub modules (test_hub.py runs the real hub, slowly).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from pathlib import Path

import pytest

from labkit.assess.progress import LabProgress
from labkit.hub import class_view, learners
from labkit.hub import limits as hub_limits
from labkit.hub.limits import Enforcement, LearnerCgroup, Limits
from labkit.i18n import get_language, set_language

GIB = 1 << 30


@pytest.fixture
def english():
    before = get_language()
    set_language("en")
    yield
    set_language(before)


# ------------------------------------------------------------------------------------------ cgroup limits


def test_what_is_enforced_is_said_in_gib_and_cores_with_the_file_or_the_reason():
    enforced = Enforcement(Path("/cg/memory.max"), Path("/cg/cpu.max"))
    assert enforced.describe(Limits(memory_bytes=3 * GIB // 2, cpus=1.5)) == (
        "memory limit 1.50 GiB enforced (/cg/memory.max); CPU limit 1.5 cores enforced (/cg/cpu.max)")
    assert Enforcement(None, None, ("memory: denied", "cpu: gone")).describe(Limits(2 * GIB, 2)) == (
        "memory limit 2.00 GiB NOT enforced; CPU limit 2 cores NOT enforced; memory: denied; cpu: gone")
    assert Enforcement(None, None).describe(Limits()) == "no limits configured"
    assert Enforcement(None, None, ("x",)).describe(Limits()) == "no limits configured; x"
    assert Enforcement(None, Path("/c")).describe(Limits(cpus=0.25)) == "CPU limit 0.25 cores enforced (/c)"


def test_a_process_cgroups_are_read_per_controller_on_v1_and_as_one_path_on_v2():
    assert hub_limits._own_cgroups("0::/user.slice/hub.service\n") == {"": "/user.slice/hub.service"}
    v1 = "12:memory:/hub\n4:cpu,cpuacct:/hub/cpu\n1:name=systemd:/a:b\n"
    assert hub_limits._own_cgroups(v1) == {"memory": "/hub", "cpu": "/hub/cpu", "cpuacct": "/hub/cpu",
                                           "name=systemd": "/a:b"}


def test_v1_mount_points_come_from_cgroup_mounts_only_the_first_of_each_controller():
    mounts = ("cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
              "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,memory 0 0\n"
              "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
              "cgroup /elsewhere/memory cgroup rw,memory 0 0\n"
              "tmpfs /sys/fs/cgroup tmpfs ro 0 0\nshort line\n")
    got = hub_limits._v1_mounts(mounts)
    assert got["memory"] == Path("/sys/fs/cgroup/memory")
    assert got["cpu"] == got["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert "tmpfs" not in str(got.values()) and set(got) == {"rw", "nosuid", "memory", "cpu", "cpuacct"}


def test_a_learners_cgroup_is_below_the_hubs_own_on_either_version(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert hub_limits.learner_dirs("ana", v2, proc_cgroup="0::/system.slice/hub\n") == {
        "v2": v2 / "system.slice/hub/labkit-hub/ana"}
    assert hub_limits.learner_dirs("ana", v2, proc_cgroup="") == {"v2": v2 / "labkit-hub/ana"}
    v1 = tmp_path / "v1"
    v1.mkdir()
    mounts = f"cgroup {v1}/memory cgroup rw,memory 0 0\ncgroup {v1}/cpu cgroup rw,cpu 0 0\n"
    assert hub_limits.learner_dirs("ana", v1, proc_cgroup="3:memory:/hub\n2:cpu:/\n", proc_mounts=mounts) == {
        "memory": v1 / "memory/hub/labkit-hub/ana", "cpu": v1 / "cpu/labkit-hub/ana"}
    # A controller not mounted, or not in the process's list, has no directory.
    assert hub_limits.learner_dirs("ana", v1, proc_cgroup="3:memory:/hub\n", proc_mounts=mounts) == {
        "memory": v1 / "memory/hub/labkit-hub/ana"}


def v1_tree(tmp_path: Path, period: str = "50000", memsw: bool = True) -> dict[str, Path]:
    memory, cpu = tmp_path / "memory/labkit-hub/ana", tmp_path / "cpu/labkit-hub/ana"
    memory.mkdir(parents=True)
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_period_us").write_text(period + "\n")
    if memsw:
        (memory / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    return {"memory": memory, "cpu": cpu}


def test_cgroup_v1_limits_are_bytes_and_a_quota_in_the_groups_own_period(tmp_path):
    dirs = v1_tree(tmp_path)
    group = LearnerCgroup("ana", dirs)
    got = group.apply(Limits(memory_bytes=2 * GIB, cpus=1.5))
    assert got == Enforcement(dirs["memory"] / "memory.limit_in_bytes", dirs["cpu"] / "cpu.cfs_quota_us", ())
    assert (dirs["memory"] / "memory.limit_in_bytes").read_text() == str(2 * GIB)
    assert (dirs["memory"] / "memory.memsw.limit_in_bytes").read_text() == str(2 * GIB)   # no escape to swap
    assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "75000"                       # 1.5 x its 50 ms
    assert group.joined == [dirs["memory"], dirs["cpu"]]
    group.join(4321)
    assert (dirs["memory"] / "cgroup.procs").read_text() == "4321"
    assert (dirs["cpu"] / "cgroup.procs").read_text() == "4321"


def test_cgroup_v1_without_swap_accounting_writes_no_swap_limit_and_a_tiny_quota_is_1_ms(tmp_path):
    dirs = v1_tree(tmp_path, period="100000", memsw=False)
    LearnerCgroup("ana", dirs).apply(Limits(memory_bytes=1000, cpus=0.001))
    assert not (dirs["memory"] / "memory.memsw.limit_in_bytes").exists()
    assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "1000"
    LearnerCgroup("ana", dirs).apply(Limits(cpus=0.0101))
    assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "1010"


def test_cgroup_v1_says_which_limit_it_could_not_set_and_why(tmp_path):
    got = LearnerCgroup("ana", {"cpu": tmp_path / "cpu"}).apply(Limits(memory_bytes=GIB, cpus=1))
    assert got.memory is None and got.problems[0] == "memory: no v1 memory hierarchy is mounted"
    assert got.problems[1].startswith("cpu: ") and "cpu.cfs_period_us" in got.problems[1]
    got = LearnerCgroup("ana", {"memory": tmp_path / "m"}).apply(Limits(cpus=1))
    assert got == Enforcement(None, None, ("cpu: no v1 cpu hierarchy is mounted",))
    dirs = v1_tree(tmp_path / "x", period="not a number")
    group = LearnerCgroup("ana", dirs)
    got = group.apply(Limits(cpus=1))
    assert got.cpu is None and got.problems[0].startswith("cpu: invalid literal") and group.joined == []
    assert LearnerCgroup("ana", {}).apply(Limits(GIB)) == Enforcement(
        None, None, ("no cgroup hierarchy with the memory or cpu controller is mounted",))
    # Only what was asked for is written.
    dirs = v1_tree(tmp_path / "y")
    assert LearnerCgroup("ana", dirs).apply(Limits()) == Enforcement(None, None, ())
    assert sorted(p.name for p in dirs["memory"].iterdir()) == ["memory.memsw.limit_in_bytes"]


def v2_tree(tmp_path: Path, hub_enabled: str = "", group_enabled: str = "") -> Path:
    hub = tmp_path / "hub"
    (hub / "labkit-hub").mkdir(parents=True)
    (hub / "cgroup.subtree_control").write_text(hub_enabled + "\n")
    (hub / "labkit-hub/cgroup.subtree_control").write_text(group_enabled + "\n")
    return hub / "labkit-hub/ana"


def test_cgroup_v2_limits_are_bytes_and_quota_over_a_100_ms_period_with_the_controllers_delegated(tmp_path):
    where = v2_tree(tmp_path, hub_enabled="cpu io", group_enabled="")
    group = LearnerCgroup("ana", {"v2": where})
    got = group.apply(Limits(memory_bytes=3 * GIB, cpus=1.5))
    assert got == Enforcement(where / "memory.max", where / "cpu.max", ())
    assert (where / "memory.max").read_text() == str(3 * GIB)
    assert (where / "cpu.max").read_text() == "150000 100000"
    assert (where.parent.parent / "cgroup.subtree_control").read_text() == "+memory"       # cpu was on already
    assert (where.parent / "cgroup.subtree_control").read_text() == "+memory +cpu"
    assert group.joined == [where]
    group.join(99)
    assert (where / "cgroup.procs").read_text() == "99"


def test_cgroup_v2_a_tiny_quota_is_1_ms_and_only_the_asked_controllers_are_delegated(tmp_path):
    where = v2_tree(tmp_path, hub_enabled="memory cpu", group_enabled="memory")
    LearnerCgroup("ana", {"v2": where}).apply(Limits(cpus=0.001))
    assert (where / "cpu.max").read_text() == "1000 100000"
    assert (where.parent / "cgroup.subtree_control").read_text() == "+cpu"
    assert (where.parent.parent / "cgroup.subtree_control").read_text() == "memory cpu\n"   # untouched
    where = v2_tree(tmp_path / "b")
    group = LearnerCgroup("ana", {"v2": where})
    assert group.apply(Limits(memory_bytes=GIB)) == Enforcement(where / "memory.max", None, ())
    assert (where.parent / "cgroup.subtree_control").read_text() == "+memory"
    assert not (where / "cpu.max").exists()
    group = LearnerCgroup("ana", {"v2": v2_tree(tmp_path / "c")})
    assert group.apply(Limits()) == Enforcement(None, None, ()) and group.joined == []


def test_cgroup_v2_that_cannot_be_delegated_says_so_and_a_limit_that_cannot_be_written_is_named(tmp_path,
                                                                                                monkeypatch):
    where = tmp_path / "hub/labkit-hub/ana"          # the hub's cgroup has no subtree_control: not delegable
    got = LearnerCgroup("ana", {"v2": where}).apply(Limits(memory_bytes=GIB, cpus=1))
    assert got.memory is None and got.cpu is None and len(got.problems) == 1
    assert got.problems[0].startswith(f"cgroup v2: cannot delegate memory+cpu below {tmp_path / 'hub'} (")
    assert got.problems[0].endswith("); a hub in its own cgroup (systemd, a container) can")
    real = hub_limits._write

    def refuse_cpu(path, value):
        if path.name == "cpu.max":
            raise PermissionError("denied")
        real(path, value)

    monkeypatch.setattr(hub_limits, "_write", refuse_cpu)
    where = v2_tree(tmp_path / "d", "memory cpu", "memory cpu")
    group = LearnerCgroup("ana", {"v2": where})
    assert group.apply(Limits(memory_bytes=GIB, cpus=1)) == Enforcement(where / "memory.max", None, ("cpu: denied",))
    assert group.joined == [where]                  # the memory limit holds: the server joins

    def refuse_memory(path, value):
        if path.name == "memory.max":
            raise PermissionError("no")
        real(path, value)

    monkeypatch.setattr(hub_limits, "_write", refuse_memory)
    where = v2_tree(tmp_path / "e", "memory cpu", "memory cpu")
    group = LearnerCgroup("ana", {"v2": where})
    assert group.apply(Limits(memory_bytes=GIB, cpus=1)) == Enforcement(None, where / "cpu.max", ("memory: no",))
    assert group.joined == [where]
    where = v2_tree(tmp_path / "f", "memory cpu", "memory cpu")
    group = LearnerCgroup("ana", {"v2": where})
    assert group.apply(Limits(memory_bytes=GIB)).problems == ("memory: no",) and group.joined == []


def test_a_cgroups_processes_are_read_from_each_hierarchy_and_a_missing_one_is_skipped(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / "cgroup.procs").write_text("12\n34\n")
    assert LearnerCgroup("ana", {"memory": a, "cpu": b}).pids() == {12, 34}
    b.mkdir()
    (b / "cgroup.procs").write_text("34\n56\n")
    assert LearnerCgroup("ana", {"memory": a, "cpu": b}).pids() == {12, 34, 56}


def test_ending_a_cgroup_kills_what_is_left_and_removes_its_directories(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr(hub_limits, "kill_until_gone", lambda pids, wait_s, pause: killed.append((pids(), wait_s)))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "cgroup.procs").write_text("7\n")
    group = LearnerCgroup("ana", {"memory": a, "cpu": b})
    (a / "cgroup.procs").unlink()                  # a real cgroup's files go with it; here rmdir needs it empty
    assert group.end(wait_s=1.0) == []
    assert not a.exists() and not b.exists() and killed == [(set(), 1.0)]
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    (stuck / "file").write_text("x")
    problems = LearnerCgroup("ana", {"v2": stuck}).end(wait_s=0.1)
    assert len(problems) == 1 and problems[0].startswith(f"{stuck}: ")


def test_kill_until_gone_kills_every_listed_process_until_none_is_left(monkeypatch):
    sent = []

    def kill(pid, sig):
        sent.append((pid, sig))
        if pid == 3:
            raise ProcessLookupError

    monkeypatch.setattr(hub_limits.os, "kill", kill)
    rounds = iter([[1, 3], [2], []])
    hub_limits.kill_until_gone(lambda: next(rounds), wait_s=5, pause=0)
    assert sent == [(1, hub_limits.signal.SIGKILL), (3, hub_limits.signal.SIGKILL), (2, hub_limits.signal.SIGKILL)]
    sent.clear()
    hub_limits.kill_until_gone(lambda: [5], wait_s=0.05, pause=0.01)     # never gone: gives up after wait_s
    assert 1 <= len(sent) <= 10 and set(sent) == {(5, hub_limits.signal.SIGKILL)}


# ------------------------------------------------------------------------------------------ learners


@pytest.mark.parametrize("name,ok", [("a", True), ("_", True), ("ana-b_2", True), ("a" * 31, True),
                                     ("a" * 32, False), ("", False), ("2ana", False), ("-ana", False),
                                     ("Ana", False), ("an a", False), ("ana/..", False)])
def test_a_learner_name_is_what_useradd_accepts_and_a_url_segment(name, ok):
    if ok:
        assert learners.check_name(name) == name
    else:
        with pytest.raises(ValueError, match=f"a learner name is 1-31 lowercase .* got {name!r}"):
            learners.check_name(name)


def test_the_class_list_is_one_sorted_name_a_line_without_repeats(tmp_path):
    path = tmp_path / "new/dir/learners.txt"
    assert learners.read_learners(path) == []
    learners.write_learners(path, ["bo", "ana", "bo"])
    assert path.read_text(encoding="utf-8") == "ana\nbo\n"
    path.write_text("  cy \n\nana\n", encoding="utf-8")
    assert learners.read_learners(path) == ["cy", "ana"]
    path.write_text("ana\nBad Name\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'Bad Name'"):
        learners.read_learners(path)
    assert learners.read_learners(tmp_path) == []            # a directory is not a class list


class Accounts:
    """pwd and useradd / userdel stood in: the accounts a test says exist, and the commands run."""

    def __init__(self, monkeypatch, tmp_path, **existing):
        self.entries = {name: self.entry(tmp_path, name, gecos) for name, gecos in existing.items()}
        self.commands, self.modes, self.ended, self.tmp_path = [], {}, [], tmp_path
        monkeypatch.setattr(learners.pwd, "getpwnam", self.getpwnam)
        monkeypatch.setattr(learners.subprocess, "run", self.run)
        monkeypatch.setattr(learners.os, "chmod", lambda path, mode: self.modes.__setitem__(path, mode))
        monkeypatch.setattr(learners, "end_processes", lambda uid: self.ended.append(uid))

    @staticmethod
    def entry(tmp_path, name, gecos):
        return pwd.struct_passwd((name, "x", 2000 + len(name), 2000, gecos, str(tmp_path / name), "/bin/bash"))

    def getpwnam(self, name):
        return self.entries[name]

    def run(self, argv, check, capture_output, text):
        assert check and capture_output and text
        self.commands.append(argv)
        if argv[0] == "useradd":
            self.entries[argv[-1]] = self.entry(self.tmp_path, argv[-1], argv[argv.index("--comment") + 1])


def test_a_new_learner_gets_a_marked_account_and_a_home_of_mode_0700(monkeypatch, tmp_path):
    accounts = Accounts(monkeypatch, tmp_path)
    assert learners.ensure_user("ana") is True
    assert accounts.commands == [["useradd", "--create-home", "--shell", "/bin/bash", "--comment", "labkit learner",
                                  "ana"]]
    assert accounts.modes == {str(tmp_path / "ana"): 0o700}
    assert learners.ensure_user("ana") is False                 # made by labkit: accepted, home made private again
    assert len(accounts.commands) == 1 and accounts.modes == {str(tmp_path / "ana"): 0o700}


def test_an_account_labkit_did_not_make_is_never_taken_over_nor_removed(monkeypatch, tmp_path):
    accounts = Accounts(monkeypatch, tmp_path, postgres="PostgreSQL administrator", bob="")
    with pytest.raises(ValueError, match=r"^postgres is an existing account not made by labkit \(PostgreSQL "
                                         r"administrator\): choose another name$"):
        learners.ensure_user("postgres")
    with pytest.raises(ValueError, match=r"\(no comment\)"):
        learners.ensure_user("bob")
    assert learners.remove_learner("postgres") is False and learners.remove_learner("nobody_here") is False
    assert accounts.commands == [] and accounts.modes == {} and accounts.ended == []
    with pytest.raises(ValueError):
        learners.ensure_user("Bad")


def test_adding_learners_returns_those_created_and_merges_the_class_list(monkeypatch, tmp_path):
    Accounts(monkeypatch, tmp_path, ana="labkit learner")
    class_list = tmp_path / "learners.txt"
    class_list.write_text("zed\n", encoding="utf-8")
    assert learners.add_learners(["bo", "ana", "cy"], class_list) == ["bo", "cy"]
    assert class_list.read_text(encoding="utf-8") == "ana\nbo\ncy\nzed\n"


def test_removing_a_learner_ends_their_processes_deletes_the_account_and_drops_them_from_the_list(monkeypatch,
                                                                                                 tmp_path):
    accounts = Accounts(monkeypatch, tmp_path, ana="labkit learner", bo="labkit learner")
    class_list = tmp_path / "learners.txt"
    class_list.write_text("ana\nbo\n", encoding="utf-8")
    assert learners.remove_learner("ana", class_list) is True
    assert accounts.ended == [accounts.entries["ana"].pw_uid]
    assert accounts.commands == [["userdel", "--remove", "ana"]]
    assert class_list.read_text(encoding="utf-8") == "bo\n"
    assert learners.remove_learner("bo") is True and class_list.read_text(encoding="utf-8") == "bo\n"


def test_a_users_processes_are_found_in_proc_by_owner():
    mine = learners.user_pids(os.getuid())
    assert os.getpid() in mine and all(isinstance(p, int) for p in mine)
    assert os.getpid() not in learners.user_pids(os.getuid() + 12345)


def test_ending_a_users_processes_kills_until_none_is_left(monkeypatch):
    seen = []
    monkeypatch.setattr(learners, "kill_until_gone", lambda pids, wait_s: seen.append((pids(), wait_s)))
    monkeypatch.setattr(learners, "user_pids", lambda uid: [uid, uid + 1])
    learners.end_processes(40, wait_s=2.5)
    assert seen == [([40, 41], 2.5)]
    learners.end_processes(7)
    assert seen[-1] == ([7, 8], 5.0)


# ------------------------------------------------------------------------------------------ class view


def test_a_learners_server_state_is_running_starting_or_stopped(english):
    make = lambda running, starting: class_view.Learner("ana", running, None, [], "x", starting)  # noqa: E731
    assert make(True, False).state() == "running"
    assert make(True, True).state() == "running"
    assert make(False, True).state() == "starting"
    assert make(False, False).state() == "stopped"
    assert make(False, False).opened == frozenset()


def test_a_lab_row_counts_the_quiz_exercises_and_predictions_as_their_names_say(english):
    assert class_view.lab_cells(LabProgress("01"), 4) == ["—", "—", "—", "opened, nothing attempted"]
    p = LabProgress("01", quiz_answered=3, quiz_first_right=2, quiz_size=5, exercises_attempted=2,
                    exercises_passed=1, exercises_first_try=1,
                    predictions=({"correct": True}, {"correct": False}, {"correct": None}, {}))
    assert class_view.lab_cells(p, 4) == ["2/5 (answered 3)", "passed 1/4 (first try 1)", "4 made, right 1/2", ""]
    assert class_view.lab_cells(p, None)[1] == "passed 1/2 (first try 1)"          # no total: of those attempted
    only_quiz = LabProgress("02", quiz_answered=3, quiz_first_right=0)
    assert class_view.lab_cells(only_quiz, 6) == ["0/3 (answered 3)", "0/6, none attempted", "—", ""]
    only_predictions = LabProgress("03", predictions=({"correct": None},))
    assert class_view.lab_cells(only_predictions, None) == ["—", "0/0, none attempted", "1 made, right 0/0", ""]
    only_exercises = LabProgress("04", exercises_attempted=1)
    assert class_view.lab_cells(only_exercises, 3)[:3] == ["—", "passed 0/3 (first try 0)", "—"]


def test_the_class_table_has_a_row_per_opened_lab_and_one_for_a_learner_who_opened_none(english):
    ana = class_view.Learner("ana", True, None, [LabProgress("01", quiz_answered=1, quiz_first_right=1),
                                                 LabProgress("02"), LabProgress("03")], "x",
                             opened=frozenset({"01", "03"}))
    bo = class_view.Learner("bo", False, None, [LabProgress("01")], "x")
    rows = class_view.class_rows([ana, bo], {"01": 2})
    assert rows == [["ana", "01", "1/1 (answered 1)", "0/2, none attempted", "—", ""],
                    ["ana", "03", "—", "—", "—", "opened, nothing attempted"],
                    ["bo", "—", "—", "—", "—", "no lab opened yet"]]


def test_the_page_escapes_what_learners_wrote_and_says_the_results_are_self_reported(english):
    who = class_view.Learner("<b>x</b>", False, "2026-12-01T10:11:12.345Z", [], "home on this machine")
    page = class_view.page([who], {})
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "2026-12-01 10:11:12<" in page and "Class view (1 learners)" in page
    assert "<meta http-equiv='refresh' content='30'>" in page and "Reloads every 30 s." in page
    assert "self-reported" in page and "class='labkit-class-table'" in page
    assert "<td style='border:1px solid #ccc;padding:3px 8px;text-align:left'>stopped</td>" in page
    nobody = class_view.page([class_view.Learner("a", True, None, [], "x")], {})
    assert "<td style='border:1px solid #ccc;padding:3px 8px;text-align:left'>—</td>" in nobody


class FakeHub(class_view.Hub):
    """The hub's API stood in: ``pages`` answer the users' URL in turn, ``files`` a server's contents URL."""

    def __init__(self, pages=(), files=None):
        super().__init__("http://hub/api/", "tok", "http://public/")
        self.pages, self.files, self.urls = list(pages), files or {}, []

    async def get(self, url, **headers):
        self.urls.append((url, headers))
        if "/users?" in url:
            return json.dumps(self.pages.pop(0)).encode()
        if url in self.files:
            return json.dumps({"content": self.files[url]}).encode()
        from tornado.httpclient import HTTPClientError
        raise HTTPClientError(404 if "lab" in url else 500)


def test_every_user_is_read_page_by_page():
    hub = FakeHub([{"items": [{"name": "a"}], "_pagination": {"next": {"offset": 200}}},
                   {"items": [{"name": "b"}], "_pagination": {"next": None}}])
    assert hub.api_url == "http://hub/api" and hub.public_url == "http://public"
    assert [u["name"] for u in asyncio.run(hub.users())] == ["a", "b"]
    assert [u for u, _ in hub.urls] == ["http://hub/api/users?offset=0&limit=200",
                                        "http://hub/api/users?offset=200&limit=200"]
    assert hub.urls[0][1] == {"Accept": "application/jupyterhub-pagination+json"}


def test_a_learner_without_a_home_here_is_read_through_their_running_server(monkeypatch, tmp_path, english):
    monkeypatch.setattr(class_view, "local_account", lambda name: None)
    summary = {"quiz": {"q1": {"first_right": True}}}
    url = "http://public/user/ana/api/contents/work/results/lab01.json?content=1&type=file&format=text"
    hub = FakeHub(files={url.replace("work/results", class_view.RESULTS): json.dumps(summary)})
    user = {"name": "ana", "last_activity": "t", "servers": {"": {"ready": True, "url": "/user/ana/"}}}
    got = asyncio.run(class_view.learner(hub, user))
    assert (got.name, got.running, got.starting, got.last_activity, got.source) == (
        "ana", True, False, "t", "through their server")
    assert got.opened == frozenset({"01"})
    stopped = asyncio.run(class_view.learner(hub, {"name": "bo", "servers": {"": {"pending": "spawn"}}}))
    assert (stopped.running, stopped.starting, stopped.source, stopped.opened) == (
        False, True, "none: server not running", frozenset())
    assert asyncio.run(class_view.learner(hub, {"name": "cy"})).starting is False


def test_a_mounts_line_needs_its_type_and_options_fields_to_count():
    # /proc/self/mounts: device, mount point, type, options, ... ; a line cut short of the options says nothing
    assert hub_limits._v1_mounts("cgroup /a cgroup\ncgroup /b cgroup memory\n") == {"memory": Path("/b")}


def test_a_learners_v1_directories_are_made_with_their_parents(tmp_path):
    memory = tmp_path / "memory/hub/labkit-hub/ana"            # neither labkit-hub nor the hub's group exists yet
    cpu = tmp_path / "cpu"

    class NewCpuGroup:
        """A v1 cpu group below a labkit-hub not made yet; once made, the kernel fills it with its files."""

        def mkdir(self, parents=False, exist_ok=False):
            if not parents:
                raise FileNotFoundError(f"{tmp_path}/cpu/hub/labkit-hub does not exist")
            cpu.mkdir()
            (cpu / "cpu.cfs_period_us").write_text("100000\n")

        def __truediv__(self, name):
            return cpu / name

    got = LearnerCgroup("ana", {"memory": memory, "cpu": NewCpuGroup()}).apply(Limits(memory_bytes=GIB, cpus=0.5))
    assert got == Enforcement(memory / "memory.limit_in_bytes", cpu / "cpu.cfs_quota_us", ())
    assert (memory / "memory.limit_in_bytes").read_text() == str(GIB)
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000"


def test_a_learners_v2_group_left_from_before_is_used_again(tmp_path):
    where = v2_tree(tmp_path, "memory cpu", "memory cpu")
    where.mkdir()                                          # a server that stopped without its group removed
    group = LearnerCgroup("ana", {"v2": where})
    assert group.apply(Limits(memory_bytes=GIB, cpus=2)) == Enforcement(where / "memory.max", where / "cpu.max", ())
    assert (where / "cpu.max").read_text() == "200000 100000"


def test_only_the_leading_slash_of_a_cgroup_path_is_dropped(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert hub_limits.learner_dirs("ana", v2, proc_cgroup="0::/X11.slice\n") == {"v2": v2 / "X11.slice/labkit-hub/ana"}
    mounts = f"cgroup {tmp_path}/memory cgroup rw,memory 0 0\n"
    assert hub_limits.learner_dirs("ana", tmp_path, proc_cgroup="3:memory:/Xhub\n", proc_mounts=mounts) == {
        "memory": tmp_path / "memory/Xhub/labkit-hub/ana"}


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="Linux's /proc/self/cgroup")
def test_without_the_proc_texts_a_learners_cgroup_is_read_from_this_process(tmp_path):
    own = "/"                                                    # this process's v2 path, as the kernel lists it
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            own = line[3:]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("memory\n")
    assert hub_limits.learner_dirs("ana", v2) == {"v2": v2 / own.lstrip("/") / "labkit-hub/ana"}
    mounted = {}                                                 # v1: the memory hierarchy, if one is mounted here
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == "cgroup" and "memory" in fields[3].split(","):
            mounted.setdefault("memory", Path(fields[1]) / "hub/labkit-hub/ana")
    assert hub_limits.learner_dirs("ana", tmp_path / "v1", proc_cgroup="3:memory:/hub\n") == mounted


def test_a_learners_cgroup_is_where_learner_dirs_puts_their_name_unless_given(monkeypatch):
    asked = []
    monkeypatch.setattr(hub_limits, "learner_dirs", lambda name: asked.append(name) or {"v2": Path("/cg") / name})
    group = LearnerCgroup("ana")
    assert (group.name, group.dirs, asked) == ("ana", {"v2": Path("/cg/ana")}, ["ana"])
    assert LearnerCgroup("bo", {}).dirs == {} and asked == ["ana"]


def test_ending_waits_5_s_by_default_and_retries_a_directory_until_it_empties(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(hub_limits, "kill_until_gone", lambda pids, wait_s, pause: seen.append((wait_s, pause)))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "kernel").write_text("")                  # a process still leaving: the directory is not empty yet
    pauses = []

    def sleep(s):                                     # meanwhile the last process leaves
        pauses.append(s)
        (busy / "kernel").unlink(missing_ok=True)

    monkeypatch.setattr(hub_limits.time, "sleep", sleep)
    assert LearnerCgroup("ana", {"v2": busy}).end() == [] and not busy.exists()
    assert seen == [(5.0, 0.05)] and pauses == [0.05]     # killed again and retried well within the wait


def test_killing_until_gone_pauses_a_tenth_of_a_second_between_rounds(monkeypatch):
    pauses = []
    monkeypatch.setattr(hub_limits.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(hub_limits.time, "sleep", pauses.append)
    rounds = iter([[1], [1], []])
    hub_limits.kill_until_gone(lambda: next(rounds), wait_s=5)
    assert pauses == [0.1, 0.1]


def test_the_hubs_api_is_asked_with_the_services_token_and_a_time_limit():
    asked = []

    class Http:
        async def fetch(self, request):
            asked.append(request)
            return type("Response", (), {"body": b"{}"})()

    hub = class_view.Hub("http://hub/api", "tok", "http://public")
    hub.http = Http()
    assert asyncio.run(hub.get("http://hub/api/users", Accept="application/json")) == b"{}"
    (request,) = asked
    assert (request.url, request.request_timeout) == ("http://hub/api/users", 15)
    assert dict(request.headers) == {"Authorization": "token tok", "Accept": "application/json"}


def test_the_class_view_service_serves_its_prefix_with_the_hubs_api_and_the_courses_exercise_totals(monkeypatch,
                                                                                                   tmp_path):
    from jupyterhub.services.auth import HubOAuthCallbackHandler
    from tornado import web

    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/services/class-view/")
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/hub/api/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "tok")
    monkeypatch.delenv("LABKIT_HUB_PUBLIC_URL", raising=False)
    monkeypatch.setenv("LABKIT_HUB_COURSE", f" {tmp_path} ")
    courses = []
    monkeypatch.setattr(class_view, "exercise_totals", lambda path: courses.append(path) or {"01": 3})
    app = class_view.make_app()
    view, redirect, callback = [(r.matcher.regex.pattern, r.target, r.target_kwargs) for r in app.wildcard_router.rules]
    assert view[:2] == ("/services/class-view/$", class_view.ClassViewHandler) and view[2]["totals"] == {"01": 3}
    hub = view[2]["hub"]
    assert (hub.api_url, hub.token, hub.public_url) == ("http://hub:8081/hub/api", "tok", "http://127.0.0.1:8000")
    assert redirect == ("/services/class-view$", web.RedirectHandler, {"url": "/services/class-view/"})
    assert callback[:2] == ("/services/class-view/oauth_callback$", HubOAuthCallbackHandler)
    assert len(app.settings["cookie_secret"]) == 32 and courses == [tmp_path]
    monkeypatch.setenv("LABKIT_HUB_PUBLIC_URL", "https://class.example/")
    monkeypatch.setenv("LABKIT_HUB_COURSE", "  ")
    app = class_view.make_app()
    assert app.wildcard_router.rules[0].target_kwargs["hub"].public_url == "https://class.example"
    assert courses[-1] == class_view.REPO / "labs"


CELL_STYLE = "border:1px solid #ccc;padding:3px 8px;text-align:left"


def html_table(cls, head, rows):
    """A table as the class view's page defines it: bordered cells, a grey header row."""
    header = "".join(f"<th style='{CELL_STYLE};background:#f3f3f3'>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='{CELL_STYLE}'>{v}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table class='{cls}' style='border-collapse:collapse;font-size:90%;margin:4px 0 10px 0'><tr>{header}</tr>{body}</table>"


def test_a_lab_row_reads_in_chinese_too():
    before = get_language()
    set_language("zh")
    try:
        assert class_view.lab_cells(LabProgress("01"), 4) == ["—", "—", "—", "已打开，尚未作答"]
        p = LabProgress("01", quiz_answered=3, quiz_first_right=2, quiz_size=5, exercises_attempted=2,
                        exercises_passed=1, exercises_first_try=1, predictions=({"correct": True}, {"correct": None}))
        assert class_view.lab_cells(p, 4) == ["2/5（已答 3）", "通过 1/4（一次通过 1）", "2 个，对 1/1", ""]
        assert class_view.lab_cells(LabProgress("02", quiz_answered=3), 6)[:2] == ["0/3（已答 3）", "0/6，未尝试"]
    finally:
        set_language(before)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_class_page_is_the_servers_table_then_the_labs_table_then_the_self_reported_note(language):
    before = get_language()
    set_language(language)
    try:
        ana = class_view.Learner("ana", True, "2026-12-01T10:11:12.5Z", [LabProgress("01", quiz_answered=2,
                                 quiz_first_right=1, quiz_size=4)], "home", opened=frozenset({"01"}))
        bo = class_view.Learner("bo", False, None, [], "none")
        got = class_view.page([ana, bo], {"01": 3})
    finally:
        set_language(before)
    en = language == "en"
    servers = html_table("labkit-hub-learners", ["learner", "server", "last active (UTC)", "results from"] if en
                         else ["学习者", "服务器", "最近活动（UTC）", "结果来自"],
                         [["ana", "running" if en else "运行中", "2026-12-01 10:11:12", "home"],
                          ["bo", "stopped" if en else "未运行", "—", "none"]])
    labs = html_table("labkit-class-table", ["learner", "lab", "quiz (first attempt)", "exercises", "predictions", "note"]
                      if en else ["学习者", "实验", "测验（第一次就答对）", "练习", "预测", "说明"],
                      [["ana", "01", "1/4 (answered 2)" if en else "1/4（已答 2）", "0/3, none attempted" if en else "0/3，未尝试",
                        "—", ""], ["bo", "—", "—", "—", "—", "no lab opened yet" if en else "还没有打开任何实验"]])
    title = "labkit class progress" if en else "labkit 全班进度"
    note = ("These results are self-reported: files in each learner&#x27;s workspace (work/results/labNN.json), written "
            "by their kernel, which the learner can also edit. Read them as progress, not as verified grades." if en else
            "这些结果是学习者自报的：它们是每位学习者工作区里的文件（work/results/labNN.json），由其内核写入，"
            "学习者也能自己改写。请把它们当作进度参考，而不是经过核验的成绩。")
    assert got == (
        "<!doctype html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='30'>"
        f"<title>{title}</title></head><body style='font-family:sans-serif;margin:16px'><h3>{title}</h3>{servers}"
        f"<h4 style='margin:2px 0'>{'Class view (2 learners)' if en else '全班视图（2 位学习者）'}</h4>{labs}"
        f"<p class='labkit-self-reported' style='color:#444;font-size:90%'>{note}</p>"
        f"<div style='color:#666;font-size:85%'>{'Reloads every 30 s.' if en else '每 30 秒自动刷新。'}</div></body></html>")


def test_a_learner_with_a_home_here_is_read_from_it_and_each_source_is_said_in_chinese_too(monkeypatch):
    from labkit.report.results import SCHEMA

    copied = []

    def copy_own_results(account, folder):
        copied.append(account)
        (folder / "lab02.json").write_text(json.dumps({"schema": SCHEMA, "quiz": {"a": {"first_attempt_correct": True}}}))

    monkeypatch.setattr(class_view, "local_account", lambda name: f"account of {name}")
    monkeypatch.setattr(class_view, "copy_own_results", copy_own_results)
    before = get_language()
    set_language("en")
    try:
        got = asyncio.run(class_view.learner(FakeHub(), {"name": "ana", "servers": {"": {"ready": True, "url": "/u/"}}}))
        assert (got.source, got.opened, copied) == ("home on this machine", frozenset({"02"}), ["account of ana"])
        assert [p.quiz_first_right for p in got.labs] == [0, 1, 0, 0, 0]
        set_language("zh")
        assert asyncio.run(class_view.learner(FakeHub(), {"name": "ana"})).source == "本机主目录"
        monkeypatch.setattr(class_view, "local_account", lambda name: None)
        url = "http://public/u/api/contents/" + class_view.RESULTS + "/lab03.json?content=1&type=file&format=text"
        hub = FakeHub(files={url: json.dumps({"schema": SCHEMA})})         # lab 01 and 02 missing: 404, skipped
        got = asyncio.run(class_view.learner(hub, {"name": "bo", "servers": {"": {"ready": True, "url": "/u/"}}}))
        assert (got.source, got.opened) == ("经由其服务器", frozenset({"03"}))
        assert asyncio.run(class_view.learner(hub, {"name": "cy"})).source == "服务器未运行，暂无"
        assert class_view.Learner("cy", False, None, [], "x", starting=True).state() == "启动中"
    finally:
        set_language(before)


def test_the_hub_client_is_tornados_and_the_course_defaults_to_the_checkouts_labs(monkeypatch):
    from tornado.httpclient import AsyncHTTPClient

    assert isinstance(class_view.Hub("http://hub/api", "t", "http://p").http, AsyncHTTPClient)
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/services/class-view/")
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "tok")
    monkeypatch.delenv("LABKIT_HUB_COURSE", raising=False)
    courses = []
    monkeypatch.setattr(class_view, "exercise_totals", lambda path: courses.append(path) or {})
    class_view.make_app()
    assert courses == [class_view.REPO / "labs"]


def test_a_users_processes_leave_out_zombies_and_read_the_state_after_the_names_last_parenthesis(tmp_path):
    import shutil
    import subprocess

    odd = tmp_path / "a) Z (b"                                  # /proc/PID/stat: "PID (a) Z (b) S ..."
    odd.symlink_to(shutil.which("sleep"))
    alive = subprocess.Popen([str(odd), "30"])
    zombie = subprocess.Popen(["true"])                         # ended, not yet waited for: state Z
    try:
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)    # it has ended; left unreaped, a zombie
        mine = learners.user_pids(os.getuid())
        assert alive.pid in mine and zombie.pid not in mine
    finally:
        alive.kill()
        alive.wait()
        zombie.wait()
