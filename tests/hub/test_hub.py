"""A class on one server, for real (labkit.hub): JupyterHub with its proxy from npm, the first-use password
authenticator, three learners who are system users, their servers spawned through the hub's REST API, lab 01
run through each server's kernel API, then what a class needs checked: each learner works on their own copy,
no learner reads another's files, the instructor's class view shows every learner and refuses a learner,
each learner's server sits in a cgroup with its limits, the kernels map the class's one copy of the model,
and stopping the hub stops everything.

To keep ``make test`` within its time on a 2-core machine, each learner runs lab 01's cells (fast mode,
``LABKIT_FAST=1``) through its model load, a generation and the first exercise, all three at the same time;
the whole of lab 01 runs headless in tests/course/test_notebooks.py and in JupyterLab in tests/browser/test_browser.py. Set
``LABKIT_HUB_TEST_FULL_LAB=1`` to run every cell of lab 01 in the first learner (21-37 s more here). The first
run also prepares the class's shared cache (``python -m labkit.hub prepare``, kept in build/hub/test-shared
for later runs).

Skips, saying why, when not root (learners are system users), or without node and the proxy
(``make test`` installs it with npm: ``make hub-proxy``). Learner accounts are named ``lkt<random><a|b|c|i>``
and deleted with their homes afterwards, also when a test fails; accounts a killed run left are deleted by
the next one.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from labkit.hub import learners
from labkit.hub.interpreter import learner_python, readable_by_all
from labkit.hub.limits import learner_dirs
from labkit.hub.settings import PROXY
from scripts.class_memory import mapping_kb, smaps_rollup

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "build" / "hub" / "test-shared"
FULL_LAB = os.environ.get("LABKIT_HUB_TEST_FULL_LAB") == "1"
STALE = re.compile(r"^lkt[0-9a-f]{6}[abci]$")
LAB = "01_kv_cache.ipynb"



def hub_unavailable() -> str | None:
    """Why the real hub cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "the hub starts each learner's server as a system user: needs root"
    if shutil.which("node") is None:
        return "configurable-http-proxy needs node >= 20 (apt-get install nodejs npm)"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        return f"configurable-http-proxy 5.2 needs node >= 20, this machine has {version}"
    if not PROXY.is_file():
        return f"no configurable-http-proxy at {PROXY}: run make hub-proxy (npm installs it; make test does)"
    if not readable_by_all(REPO / "labkit") or not readable_by_all(REPO / "labs"):
        return f"learners cannot read this checkout ({REPO}): a directory above it is private"
    try:
        learner_python()
    except RuntimeError as exc:
        return str(exc)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args: str, env: dict[str, str], timeout: float = 600, stdin: str = "") -> str:
    done = subprocess.run([sys.executable, "-m", "labkit.hub", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, input=stdin)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def remove_stale_accounts() -> None:
    """Test accounts a killed run left behind (labkit made them, and their names are this test's)."""
    for entry in pwd.getpwall():
        if STALE.match(entry.pw_name) and entry.pw_gecos == learners.MARK:
            learners.remove_learner(entry.pw_name)


@dataclass
class Hub:
    url: str                         # the public URL (the proxy)
    token: str                       # an admin API token (the labkit-admin service)
    instructor: str
    learners: list[str]
    log: Path
    proc: subprocess.Popen
    env: dict[str, str]
    instructor_password: str
    first_logins: list[tuple[str, int]]            # the instructor's, before anyone else's: (password, status)
    tokens: dict[str, str] = field(default_factory=dict)
    launches: Path | None = None                   # every process the hub's tree started (`watch_launches`)

    def login(self, user: str, password: str) -> int:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            client.get("/hub/login")
            form = {"username": user, "password": password, "_xsrf": client.cookies.get("_xsrf", "")}
            return client.post("/hub/login", data=form).status_code

    def api(self, method: str, path: str, token: str | None = None, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"token {token or self.token}"}
        return httpx.request(method, f"{self.url}/hub/api{path}", headers=headers, timeout=60, **kwargs)

    def user_token(self, name: str) -> str:
        if name not in self.tokens:
            answer = self.api("POST", f"/users/{name}/tokens", json={"note": "tests/hub/test_hub.py"})
            assert answer.status_code == 201, answer.text
            self.tokens[name] = answer.json()["token"]
        return self.tokens[name]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_until(predicate, timeout: float, what: str, hub: Hub | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := predicate()):
            return value
        time.sleep(0.25)
    log = hub.log_text()[-4000:] if hub else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{log}")


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else None
        except (OSError, IndexError):
            continue
        if ppid is not None:
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop(0))
        todo += children.get(tree[-1], [])
    return tree


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the hub and everything it started (its proxy, services, learners' servers): the last resort."""
    for pid in process_tree(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def stop_hub(hub: Hub) -> None:
    """SIGTERM: the hub stops the learners' servers, its services and its proxy, as on a real server."""
    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_tree(hub.proc)


# Loaded by every Python process of the hub's tree through PYTHONPATH, which the spawner passes on to the
# learners' servers and their kernels: an audit hook that logs each process one of them starts (its program
# and arguments), one file per process named by its uid. How the test sees that no learner ran a compiler.
AUDIT = """import json, os, sys
_LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log")
# event: (index of the program, index of the arguments) in the event's arguments
_STARTS = {"subprocess.Popen": (0, 1), "os.exec": (0, 1), "os.posix_spawn": (0, 1), "os.spawn": (1, 2),
           "os.system": (None, 0)}


def _text(value):
    return "" if value is None else os.fsdecode(value) if isinstance(value, (bytes, os.PathLike)) else str(value)


def _hook(event, args):
    if event in _STARTS:
        try:
            program, argv = _STARTS[event]
            argv = args[argv]
            argv = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or [])
            with open(os.path.join(_LOG, f"{os.getuid()}-{os.getpid()}"), "a") as f:
                f.write(json.dumps([event, "" if program is None else _text(args[program]),
                                    [_text(a) for a in argv]]) + "\\n")
        except Exception:
            pass


sys.addaudithook(_hook)
"""


def watch_launches() -> Path:
    """A directory every user can read, holding `AUDIT` as sitecustomize.py, and log/ every user may write to."""
    where = Path(tempfile.mkdtemp(prefix="labkit-hub-launches-"))
    where.chmod(0o755)
    (where / "sitecustomize.py").write_text(AUDIT)
    (where / "log").mkdir(mode=0o1777)
    (where / "log").chmod(0o1777)
    return where


def launches_by(uid: int, where: Path) -> list[tuple[str, str, list[str]]]:
    """(event, program, argv) of every process started by a process of ``uid`` that loaded `AUDIT`."""
    found = []
    for log in (where / "log").glob(f"{uid}-*"):
        found += [tuple(json.loads(line)) for line in log.read_text().splitlines()]
    return found


@pytest.fixture(scope="module")
def machine() -> None:
    if (reason := hub_unavailable()) is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def shared_cache(machine) -> Path:
    """The class's model cache, prepared as make hub does (on disk, not on a tmpfs), kept across runs in
    build/hub/test-shared: the first run converts the model, later ones find it done in seconds."""
    cli("prepare", "--on-disk", env=dict(os.environ, LABKIT_HUB_SHARED=str(SHARED)), timeout=900)
    return SHARED


@pytest.fixture(scope="module")
def hub(machine, tmp_path_factory, shared_cache):
    remove_stale_accounts()
    prefix = f"lkt{secrets.token_hex(3)}"
    names = [prefix + x for x in "abc"]
    state = tmp_path_factory.mktemp("hub")
    env = dict(os.environ, LABKIT_HUB_DIR=str(state), LABKIT_HUB_SHARED=str(shared_cache),
               LABKIT_HUB_INSTRUCTOR=prefix + "i", LABKIT_HUB_PORT=str(free_port()), LABKIT_HUB_IP="127.0.0.1",
               LABKIT_HUB_ADMIN_TOKEN=secrets.token_hex(16), LABKIT_HUB_FAST="1", LABKIT_HUB_MEM="3G",
               LABKIT_HUB_CPUS="1")
    log = state / "hub.log"
    proc = None
    launches = watch_launches()
    password = secrets.token_urlsafe(12)
    try:
        cli("add-learners", *names, env=env)
        cli("instructor", env=env, stdin=password + "\n")
        with open(log, "w") as out:
            watched = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(launches), env.get("PYTHONPATH")])))
            proc = subprocess.Popen([sys.executable, "-m", "labkit.hub", "start"], env=watched, cwd=REPO, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        hub = Hub(f"http://127.0.0.1:{env['LABKIT_HUB_PORT']}", env["LABKIT_HUB_ADMIN_TOKEN"], prefix + "i", names,
                  log, proc, env, password, [], launches=launches)

        def answers() -> bool:
            assert proc.poll() is None, hub.log_text()[-4000:]
            try:
                return hub.api("GET", "/").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, 60, "the hub behind its proxy", hub)
        # before anyone else logs in: the instructor's name with a wrong password, then the right one
        hub.first_logins += [(p, hub.login(hub.instructor, p)) for p in ("anything-first", password)]
        yield hub
        stop_hub(hub)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                for name in names for pid in learners.user_pids(pwd.getpwnam(name).pw_uid)}
        assert left == {}, f"processes of learners still running after the hub stopped: {left}"
        assert "Cleaning up proxy" in hub.log_text()
    finally:
        if proc is not None and proc.poll() is None:
            kill_tree(proc)
        for name in [*names, prefix + "i"]:
            learners.remove_learner(name)
        shutil.rmtree(launches, ignore_errors=True)
        for where in learner_dirs(names[0]).values():        # the hub's group of learner cgroups, if now empty
            try:
                where.parent.rmdir()
            except OSError:
                pass


# ----------------------------------------------------------------------------- a learner's kernel over the API

class Kernel:
    """One kernel of a learner's server, driven as JupyterLab drives it: a session for their notebook, then
    execute_request messages over the kernel's websocket."""

    def __init__(self, hub: Hub, name: str):
        self.hub, self.name = hub, name
        self.base = f"{hub.url}/user/{name}"
        self.headers = {"Authorization": f"token {hub.user_token(name)}"}
        self.session = uuid.uuid4().hex
        self.ws = None

    def notebook_cells(self, path: str) -> list[str]:
        """The code cells of the learner's own copy of ``path``, read through their server."""
        answer = httpx.get(f"{self.base}/api/contents/{path}", headers=self.headers, timeout=60)
        assert answer.status_code == 200, answer.text
        return ["".join(c["source"]) for c in answer.json()["content"]["cells"] if c["cell_type"] == "code"]

    async def start(self, path: str) -> None:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.post(f"{self.base}/api/sessions", headers=self.headers,
                                       json={"path": path, "type": "notebook", "name": path,
                                             "kernel": {"name": "python3"}})
        assert answer.status_code == 201, answer.text
        self.kernel_id = answer.json()["kernel"]["id"]
        url = f"{self.base.replace('http', 'ws', 1)}/api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        self.ws = await websocket_connect(HTTPRequest(url, headers=self.headers), max_message_size=256 * 2**20)

    async def execute(self, code: str, timeout: float = 300) -> tuple[str, str | None]:
        """Run ``code``; returns (its printed text, the error it raised as 'Name: value', or None)."""
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session, "username": self.name,
                  "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        await self.ws.write_message(json.dumps({
            "header": header, "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        # done when the shell channel has replied and iopub says idle: outputs come on iopub, before its idle
        text, error, replied, idle, deadline = [], None, False, False, time.monotonic() + timeout
        while not (replied and idle):
            raw = await asyncio.wait_for(self.ws.read_message(), max(1.0, deadline - time.monotonic()))
            assert raw is not None, f"{self.name}: the kernel's websocket closed"
            if isinstance(raw, bytes):
                continue                                   # binary frames: widget buffers
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status":
                idle = content["execution_state"] == "idle"
            elif kind == "execute_reply":
                replied = True
        return "".join(text), error

    async def close(self) -> None:
        if self.ws is not None:
            self.ws.close()


def learner_kernel_pids(names: list[str]) -> dict[str, list[int]]:
    """For the shared-weights check: each learner's kernel processes (ipykernel), found in /proc by the
    learner's uid, whose /proc/PID/smaps and smaps_rollup the shared-weights check reads."""
    found: dict[str, list[int]] = {}
    for name in names:
        uid = pwd.getpwnam(name).pw_uid
        found[name] = [pid for pid in learners.user_pids(uid)
                       if b"ipykernel_launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return found


# What each learner writes into the first exercise's stub: two right answers, one that forgets V.
ANSWERS = ["def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype_bytes):\n"
           "    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes\n"] * 2 + [
           "def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype_bytes):\n"
           "    return num_layers * num_kv_heads * head_dim * dtype_bytes\n"]


def learner_cells(cells: list[str], answer: str, full: bool) -> list[str]:
    """The code cells a learner runs: lab 01 with their answer in the first exercise; all of it (``full``),
    or up to its model load, one generation, and that exercise (shown, answered, checked)."""
    stub = next(i for i, c in enumerate(cells) if c.startswith("def kv_bytes_per_token"))
    cells = [*cells[:stub], answer, *cells[stub + 1:]]
    if full:
        return cells
    load = next(i for i, c in enumerate(cells) if "LLM(" in c)
    generate = ("from labkit import SamplingParams\n"
                "print(llm.generate(['什么是 KV 缓存？'], SamplingParams(temperature=0.0, max_tokens=8))[0].text)")
    return [*cells[:load + 1], generate, *cells[stub - 1:stub + 2]]


@dataclass
class LabRun:
    name: str
    cells: int
    errors: list[str]
    wall_s: float


@pytest.fixture(scope="module")
def class_at_work(hub):
    """Every learner's server spawned through the hub API; lab 01 run in each, all at once. The kernels stay
    open (the lab is open) for the tests that follow."""
    def ready(name: str) -> bool:
        server = hub.api("GET", f"/users/{name}").json()["servers"].get("")
        return bool(server and server["ready"])

    def pending() -> set[str]:
        return {n for n in hub.learners if hub.api("GET", f"/users/{n}").json()["servers"].get("", {}).get("pending")}

    token = hub.user_token(hub.instructor)
    start = time.monotonic()
    with ThreadPoolExecutor(len(hub.learners)) as pool:         # the three spawns at once, as a class arrives
        posts = [pool.submit(hub.api, "POST", f"/users/{name}/server") for name in hub.learners]
        while not (before := pending()) and time.monotonic() < start + 10:
            time.sleep(0.1)
        # the class view while the servers start: a learner pending before and after the page was pending during it
        view = httpx.get(f"{hub.url}/services/class-view/", headers={"Authorization": f"token {token}"}, timeout=60)
        starting = {"pending": before & pending()}
        for post in posts:
            assert post.result().status_code in (201, 202), post.result().text
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", view.text.split("labkit-hub-learners", 1)[1].split("</table>", 1)[0])
    starting["shown"] = {cells[i]: cells[i + 1] for i in range(0, len(cells), 4)}
    wait_until(lambda: all(ready(n) for n in hub.learners), 120, "the learners' servers", hub)
    spawned_s = time.monotonic() - start
    kernels = {name: Kernel(hub, name) for name in hub.learners}

    async def run(index: int, name: str) -> LabRun:
        kernel, began = kernels[name], time.monotonic()
        cells = learner_cells(kernel.notebook_cells(LAB), ANSWERS[index], full=index == 0 and FULL_LAB)
        await kernel.start(LAB)
        errors = []
        for code in cells:
            _, error = await kernel.execute(code)
            if error:
                errors.append(f"{code[:60]!r}: {error}")
                break
        return LabRun(name, len(cells), errors, time.monotonic() - began)

    async def everyone() -> list[LabRun]:
        return await asyncio.gather(*(run(i, n) for i, n in enumerate(hub.learners)))

    loop = asyncio.new_event_loop()
    runs = loop.run_until_complete(everyone())
    print(f"servers ready in {spawned_s:.1f} s; " + "; ".join(f"{r.name}: {r.cells} cells in {r.wall_s:.1f} s"
                                                               for r in runs))
    yield {"runs": runs, "kernels": kernels, "loop": loop, "starting": starting}
    for kernel in kernels.values():
        loop.run_until_complete(kernel.close())
    loop.close()


# ----------------------------------------------------------------------------- the tests

@pytest.mark.slow
def test_the_instructors_password_is_set_before_the_hub_starts_so_a_first_login_cannot_claim_it(hub):
    assert hub.first_logins == [("anything-first", 403), (hub.instructor_password, 302)]
    assert hub.login(hub.instructor, "anything-first") == 403          # the refused try set nothing either
    password_file = Path(hub.env["LABKIT_HUB_DIR"]) / "instructor-password"
    assert oct(password_file.stat().st_mode & 0o777) == "0o600" and password_file.stat().st_uid == 0


@pytest.mark.slow
def test_the_hubs_log_shows_no_token_and_no_password(hub, class_at_work):
    """The admin token (LABKIT_HUB_ADMIN_TOKEN, which make hub does not echo either), the learners' API tokens
    and the instructor's password appear nowhere in what the hub, its proxy and the learners' servers log."""
    log = hub.log_text()
    assert hub.tokens and class_at_work["runs"]
    for secret in (hub.token, hub.instructor_password, *hub.tokens.values()):
        assert secret not in log


@pytest.mark.slow
def test_a_learner_on_the_class_list_sets_a_password_at_first_login_and_no_one_else_gets_in(hub):
    name = hub.learners[2]
    login = hub.login

    assert login(name, "first-password") == 302                 # first use: the password is set
    assert login(name, "another-password") == 403               # then only that password opens it
    assert login(name, "first-password") == 302
    assert login("lktnotaclassmember", "any-password") == 403   # not on the class list


@pytest.mark.slow
def test_each_learner_runs_lab_01_in_their_own_copy_of_the_course(hub, class_at_work):
    runs = class_at_work["runs"]
    assert [r.errors for r in runs] == [[], [], []]
    for name in hub.learners:
        home = Path(pwd.getpwnam(name).pw_dir)
        assert (home / "work" / LAB).is_file() and (home / "work" / LAB).stat().st_uid == pwd.getpwnam(name).pw_uid
    for name, passed in zip(hub.learners, (True, True, False)):
        summary = json.loads((Path(pwd.getpwnam(name).pw_dir) / "work" / "results" / "lab01.json").read_text())
        assert summary["exercises"]["kv_bytes_per_token"]["passed"] is passed
        assert oct(home.stat().st_mode & 0o777) == "0o700"
    assert (REPO / "labs" / LAB).stat().st_uid == 0           # the course itself was only read


@pytest.mark.slow
def test_a_learners_jupyterlab_opens_on_their_copy_with_the_courses_settings(hub, class_at_work):
    name = hub.learners[1]
    headers = {"Authorization": f"token {hub.user_token(name)}"}
    listing = httpx.get(f"{hub.url}/user/{name}/api/contents", headers=headers, timeout=60).json()
    assert {LAB, "dashboards", "results", "course-updates.md"} <= {item["name"] for item in listing["content"]}
    settings = httpx.get(f"{hub.url}/user/{name}/lab/api/settings/@jupyterlab/apputils-extension:notification",
                         headers=headers, timeout=60).json()
    assert settings["schema"]["properties"]["fetchNews"]["default"] == "false"     # etc/jupyterlab, as make lab
    # its kernels are culled when idle (LABKIT_HUB_CULL_KERNELS' default), even with the lab open in a tab
    from labkit.hub.spawner import kernel_culling

    servers = [Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
               for pid in learners.user_pids(pwd.getpwnam(name).pw_uid)
               if b"jupyterhub.singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert servers and all(set(kernel_culling(1200)) <= set(argv) for argv in servers), servers


@pytest.mark.slow
def test_a_learner_cannot_read_another_learners_work(hub, class_at_work):
    a, b = hub.learners[:2]
    theirs = Path(pwd.getpwnam(b).pw_dir) / "work" / "results" / "lab01.json"
    assert theirs.is_file()                                   # it is there: the refusal is about rights
    code = (f"import pathlib\n"
            f"for path in ({str(theirs)!r}, {str(theirs.parents[2])!r}):\n"
            f"    try:\n"
            f"        p = pathlib.Path(path); p.read_text() if p.is_file() else list(p.iterdir()); print('READ', path)\n"
            f"    except PermissionError:\n"
            f"        print('DENIED', path)\n")
    kernel, loop = class_at_work["kernels"][a], class_at_work["loop"]
    out, error = loop.run_until_complete(kernel.execute(code))
    assert error is None and out.split() == ["DENIED", str(theirs), "DENIED", str(theirs.parents[2])]


@pytest.mark.slow
def test_the_class_view_shows_every_learner_to_the_instructor_and_refuses_a_learner(hub, class_at_work):
    # a quiz question answered, and a prediction revealed, in the second learner's kernel, as their widgets do:
    # both show in the view
    kernel, loop = class_at_work["kernels"][hub.learners[1]], class_at_work["loop"]
    _, error = loop.run_until_complete(kernel.execute(
        "from labkit.labs.lab01_kv_cache.quiz import quiz\nquiz().view().views[0].answer(0)\n"
        "from labkit.labs.common.display import predict\n"
        "predict('KV cache bytes?', 64.0, kind='exact', lab='01', id='hub-test').reveal(64)"))
    assert error is None
    url = f"{hub.url}/services/class-view/"
    page = httpx.get(url, headers={"Authorization": f"token {hub.user_token(hub.instructor)}"}, timeout=60)
    assert page.status_code == 200, page.text
    assert "全班视图（3 位学习者）" in page.text and "自报" in page.text
    table = page.text.split("labkit-class-table", 1)[1]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    rows = {cells[i]: cells[i:i + 6] for i in range(0, len(cells), 6)}
    assert {name: rows[name][3] for name in hub.learners} == {      # each learner's lab 01 exercises, out of 2
        hub.learners[0]: "通过 1/2（一次通过 1）", hub.learners[1]: "通过 1/2（一次通过 1）",
        hub.learners[2]: "通过 0/2（一次通过 0）"}
    assert "（已答 1）" in rows[hub.learners[1]][2] and rows[hub.learners[0]][2] == "—"
    assert rows[hub.learners[1]][4] == "1 个，对 1/1" and rows[hub.learners[0]][4] == "—"      # predictions
    assert hub.instructor not in page.text
    english = httpx.get(url + "?lang=en", headers={"Authorization": f"token {hub.user_token(hub.instructor)}"},
                        timeout=60)
    assert "Class view (3 learners)" in english.text and "self-reported" in english.text
    refused = httpx.get(url, headers={"Authorization": f"token {hub.user_token(hub.learners[0])}"}, timeout=60)
    assert refused.status_code == 403


@pytest.mark.slow
def test_the_class_view_says_starting_while_a_learners_spawn_is_pending(hub, class_at_work):
    starting = class_at_work["starting"]
    if not starting["pending"]:
        pytest.skip("every server was up before the class view answered: nothing was pending to show")
    assert {name: starting["shown"][name] for name in starting["pending"]} == {
        name: "启动中" for name in starting["pending"]}


@pytest.mark.slow
def test_the_instructor_exports_the_class_resets_one_lab_and_pushes_an_update_without_a_restart(
        hub, class_at_work, tmp_path):
    from labkit.hub import class_tools

    # in this process, as root (each command is a line around these: tests/hub/test_hub_class.py runs them)
    class_tools.export_csv([pwd.getpwnam(n) for n in hub.learners], REPO / "labs", tmp_path / "class.csv")
    rows = {(r["learner"], r["lab"]): r for r in csv.DictReader(open(tmp_path / "class.csv", encoding="utf-8"))}
    assert [(rows[(n, "01")]["exercises_passed"], rows[(n, "01")]["exercises_total"]) for n in hub.learners] == [
        ("1", "2"), ("1", "2"), ("0", "2")]
    name = hub.learners[2]
    work = Path(pwd.getpwnam(name).pw_dir) / "work"
    said = class_tools.reset_lab(pwd.getpwnam(name), learner_python(), REPO / "labs", "01")
    assert f"reset: {work / LAB}" in said
    backups = list((work / ".backup").iterdir())
    assert len(backups) == 1 and backups[0].stat().st_uid == pwd.getpwnam(name).pw_uid    # done as the learner
    (work / LAB).unlink()                                   # gone from their copy: the push brings it back
    said = class_tools.push_update([pwd.getpwnam(name)], learner_python(), REPO / "labs")[name]
    assert f"new: {work / LAB}" in said and (work / LAB).stat().st_uid == pwd.getpwnam(name).pw_uid
    assert hub.api("GET", f"/users/{name}").json()["servers"][""]["ready"]       # their server kept running


@pytest.mark.slow
def test_a_hub_user_with_no_account_here_is_told_to_run_add_learners_and_leaves_no_cgroup(hub):
    name = hub.learners[0][:-1] + "z"                      # on the hub (admin page or API), not on the machine
    assert hub.api("POST", f"/users/{name}").status_code == 201
    answer = hub.api("POST", f"/users/{name}/server")
    assert answer.status_code == 409 and f"add-learners {name}" in answer.text, answer.text
    assert not any(where.exists() for where in learner_dirs(name).values())
    hub.api("DELETE", f"/users/{name}")


# a C compiler's program, by name (cc, gcc-12, x86_64-linux-gnu-gcc-12, clang-17, c++ ...)
COMPILER = re.compile(r"^(.*-)?(cc|c\+\+|gcc|g\+\+|clang|clang\+\+|cc1)(-[0-9.]+)?$")


@pytest.mark.slow
def test_the_learners_load_the_one_library_the_set_up_built_and_start_no_compiler(hub, class_at_work, shared_cache):
    """Every learner's kernel got LABKIT_SHARED_CACHE and maps the one library ``prepare`` built into it; no
    process of any learner started a compiler (not even ``cc --version``: the set-up recorded its compiler),
    and no learner has a library of their own."""
    from labkit.kernels import native

    built = sorted((shared_cache / "kernels").glob("labkit-*.so"))
    assert built, f"prepare built no C kernels into {shared_cache / 'kernels'}"
    assert (shared_cache / "kernels" / native.COMPILERS).is_file()
    cc = os.path.realpath(native.compiler())
    mapped = set()
    for name, pids in learner_kernel_pids(hub.learners).items():
        home = Path(pwd.getpwnam(name).pw_dir)
        assert not list(home.rglob("labkit-*.so")), f"{name} has a C kernels build of their own"
        for pid in pids:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"LABKIT_SHARED_CACHE={shared_cache}".encode() in environ
            maps = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                    if "labkit-" in line and line.endswith(".so")}
            assert maps, f"{name}'s kernel {pid} loaded no C kernels"
            mapped |= maps
        started = launches_by(pwd.getpwnam(name).pw_uid, hub.launches)
        assert any("ipykernel_launcher" in " ".join(argv) for _, _, argv in started), (
            f"{name}: no kernel launch was logged, so the watch on their processes did not run: {started}")
        compilers = [(program, argv) for _, program, argv in started    # a shell's command line included
                     if any(COMPILER.match(Path(word).name) or os.path.realpath(word) == cc
                            for word in " ".join([program, *argv]).split())]
        assert compilers == [], f"{name}'s processes started a compiler: {compilers}"
    assert len(mapped) == 1 and mapped <= {str(p) for p in built}, f"the learners' kernels map {mapped}"


@pytest.mark.slow
def test_each_learners_server_runs_in_a_cgroup_with_their_limits(hub, class_at_work):
    log = hub.log_text()
    for name, pids in learner_kernel_pids(hub.learners).items():
        assert pids, f"{name}: no kernel process"
        enforced = f"learner {name}: memory limit 3.00 GiB enforced" in log
        if not enforced:                      # a machine that cannot: the log must say so
            assert f"learner {name}: memory limit 3.00 GiB NOT enforced" in log
            continue
        where = re.search(rf"learner {name}: memory limit 3.00 GiB enforced \(([^)]+)\)", log).group(1)
        assert int(Path(where).read_text()) == 3 * 2**30
        procs = {int(p) for p in (Path(where).parent / "cgroup.procs").read_text().split()}
        assert set(pids) <= procs, f"{name}: kernels {pids} outside their cgroup {procs}"


@pytest.mark.slow
def test_the_learners_kernels_map_the_one_shared_copy_of_the_weights(hub, class_at_work, shared_cache):
    """Each learner's kernel reads its weights through the class's fp32 weight pack (resident in it, not
    copied); summed over the learners, the pack's proportional share (PSS) is at most its size: the
    weights are in memory once however many learners there are."""
    packs = sorted(shared_cache.glob("packs/*-float32.lkw"))         # lab 01's engines are fp32
    assert packs, f"no weight pack in {shared_cache}"
    size_kb = sum(p.stat().st_size for p in packs) / 1024
    mapped = {name: [mapping_kb(pid, "-float32.lkw") for pid in pids]
              for name, pids in learner_kernel_pids(hub.learners).items()}
    for name, kernels in mapped.items():
        assert any(m["Rss"] >= 0.9 * size_kb for m in kernels), f"{name}'s kernel does not read the shared pack"
    for name, pids in learner_kernel_pids(hub.learners).items():
        for pid, m in zip(pids, mapped[name]):
            rollup = smaps_rollup(pid)
            print(f"{name} kernel {pid}: RSS {rollup['Rss'] / 1024:.0f} MiB, PSS {rollup['Pss'] / 1024:.0f} MiB; "
                  f"weight pack RSS {m['Rss'] / 1024:.0f} MiB, PSS {m['Pss'] / 1024:.0f} MiB")
    for name in hub.learners:                # the learner's JupyterLab server, counted in docs/hub.md's sizes
        for pid in learners.user_pids(pwd.getpwnam(name).pw_uid):
            if b"jupyterhub.singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes():
                print(f"{name} JupyterLab server {pid}: PSS {smaps_rollup(pid)['Pss'] / 1024:.0f} MiB")
    maps = [m for kernels in mapped.values() for m in kernels]
    assert sum(m["Pss"] for m in maps) <= 1.01 * size_kb
    assert all(m["Anonymous"] < 0.01 * size_kb for m in maps)     # no kernel copied the weights it maps


# ----------------------------------------------------------------------------- the parts, without a hub

def test_a_sync_copies_new_notebooks_notes_changed_ones_and_never_overwrites_a_learners_copy(tmp_path):
    from labkit.hub import workspace

    course, work = tmp_path / "course", tmp_path / "work"
    (course / "dashboards").mkdir(parents=True)
    for rel in ("01_a.ipynb", "02_b.ipynb", "dashboards/progress.ipynb"):
        (course / rel).write_text(f"course {rel}")
    assert workspace.sync(course, work).new == ("01_a.ipynb", "02_b.ipynb", "dashboards/progress.ipynb")
    (work / "01_a.ipynb").write_text("my answers")
    os.utime(work / "01_a.ipynb", (1, 1))                     # the course changed after this copy
    report = workspace.sync(course, work)
    assert report == workspace.SyncReport(new=(), changed=("01_a.ipynb",))
    assert (work / "01_a.ipynb").read_text() == "my answers" and (work / "results").is_dir()
    assert "reset 01_a" in workspace.notes(report)
    assert workspace.reset(course, work, "01") == ["01_a.ipynb"]
    assert (work / "01_a.ipynb").read_text() == "course 01_a.ipynb"
    assert [p.read_text() for p in (work / ".backup").iterdir()] == ["my answers"]


@pytest.mark.parametrize("variable, value", [("LABKIT_HUB_PORT", "http"), ("LABKIT_HUB_CPUS", "0"),
                                             ("LABKIT_HUB_MEM", "2 GB"), ("LABKIT_HUB_AUTH", "dummy"),
                                             ("LABKIT_HUB_FAST", "yes")])
def test_a_bad_setting_is_refused_naming_its_variable(variable, value):
    from labkit.hub.settings import from_env

    with pytest.raises(ValueError, match=variable):
        from_env({variable: value})


def test_settings_default_to_a_class_server_and_follow_the_state_dir():
    from labkit.hub.settings import from_env

    s = from_env({"LABKIT_HUB_DIR": "/srv/class"})
    assert (s.shared_cache, s.learners_file, s.auth, s.threads) == (
        Path("/srv/class/shared"), Path("/srv/class/learners.txt"), "firstuse", 1)


def test_a_learners_cgroup_is_a_child_of_the_hubs_own_on_cgroup_v1_and_v2(tmp_path):
    v1_cgroup = "9:name=systemd:/\n4:memory:/jobs/7\n2:cpu,cpuacct:/\n0::/\n"
    v1_mounts = ("cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
                 "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n")
    assert learner_dirs("ann", tmp_path, v1_cgroup, v1_mounts) == {
        "memory": Path("/sys/fs/cgroup/memory/jobs/7/labkit-hub/ann"),
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/labkit-hub/ann")}
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert learner_dirs("ann", tmp_path, "0::/hub.service\n", "") == {"v2": tmp_path / "hub.service/labkit-hub/ann"}


def test_limits_are_written_where_they_can_be_and_the_rest_reported_not_enforced(tmp_path):
    from labkit.hub.limits import LearnerCgroup, Limits

    memory, cpu = tmp_path / "memory" / "labkit-hub" / "ann", tmp_path / "cpu" / "labkit-hub" / "ann"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    enforcement = LearnerCgroup("ann", {"memory": memory, "cpu": cpu}).apply(Limits(2 * 2**30, 1.5))
    assert (memory / "memory.limit_in_bytes").read_text() == str(2 * 2**30)
    assert (cpu / "cpu.cfs_quota_us").read_text() == "150000"
    assert enforcement.problems == () and "NOT" not in enforcement.describe(Limits(2 * 2**30, 1.5))
    missing = LearnerCgroup("bo", {"memory": tmp_path / "memory" / "labkit-hub" / "bo"}).apply(Limits(2**30, 1.0))
    assert missing.memory is not None and missing.cpu is None
    assert "CPU limit 1 cores NOT enforced" in missing.describe(Limits(2**30, 1.0))


def test_the_class_view_page_names_each_learner_their_server_and_their_results():
    from labkit.assess.progress import LabProgress
    from labkit.hub.class_view import Learner, page

    labs = [LabProgress("01", exercises_attempted=1, exercises_passed=1, exercises_first_try=1)]
    html = page([Learner("ann", True, "2026-12-01T10:00:00.000Z", labs, "home on this machine", opened=frozenset({"01"})),
                 Learner("bo", False, None, [LabProgress("01")], "none: server not running")], {"01": 2})
    assert "全班视图（2 位学习者）" in html and "运行中" in html and "未运行" in html
    assert "2026-12-01 10:00:00" in html and "通过 1/2（一次通过 1）" in html


def test_the_class_view_takes_only_regular_files_the_learner_owns(tmp_path):
    """It reads as root: a learner's link to someone else's file, or a named pipe, must not reach the page."""
    from labkit.hub.results import copy_own_results

    results = tmp_path / "home" / "work" / "results"
    results.mkdir(parents=True)
    (results / "lab01.json").write_text("{}")
    (tmp_path / "secret.json").write_text("{}")
    (results / "lab02.json").symlink_to(tmp_path / "secret.json")
    os.mkfifo(results / "lab03.json")                           # opening it for reading would block
    if os.geteuid() == 0:
        (results / "lab04.json").write_text("{}")
        os.chown(results / "lab04.json", 65534, 65534)          # someone else's file
    account = pwd.struct_passwd(("ann", "x", os.getuid(), os.getgid(), "", str(tmp_path / "home"), "/bin/sh"))
    copied = tmp_path / "copied"
    copied.mkdir()
    copy_own_results(account, copied)
    assert [p.name for p in copied.iterdir()] == ["lab01.json"]
