"""How the hub starts a learner's server: their own copy of the course, labkit's environment, their limits.

`LearnerCourse` holds what every learner's server gets, whatever starts the process:

- ``LABKIT_COURSE`` / ``LABKIT_WORK``: the course and their copy of it (``~/work``, `workspace.sync` at each
  start, by `learner_server`); JupyterLab opens there;
- ``LABKIT_RESULTS``: ``~/work/results``, where the labs write their summaries and the class view reads them;
- ``LABKIT_THREADS`` / ``OMP_NUM_THREADS``: the threads a learner computes on;
- ``LABKIT_SHARED_CACHE``: the class's one copy of the model (labkit.model.shared_cache).

`LabkitSpawner` starts it as a local process (JupyterHub's LocalProcessSpawner) inside a cgroup with the
learner's memory and CPU limits (`limits`). On a systemd host jupyterhub_setup.py pairs `LearnerCourse` with
SystemdSpawner instead, which enforces the same limits through systemd.
"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner, Spawner
from tornado import web
from traitlets import Bool, Instance, Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from labkit.hub.limits import Enforcement, LearnerCgroup, Limits
from labkit.hub.settings import REPO, RESULTS, WORK
from labkit.i18n import t


class NoAccount(web.HTTPError):
    """A user of the hub with no account on this machine (added on the admin page only): the page they get
    says what to do instead of a bare error (JupyterHub shows ``jupyterhub_message``)."""

    def __init__(self, name: str):
        super().__init__(409, f"{name} has no account on this machine: the instructor runs `sudo .venv/bin/python "
                              f"-m labkit.hub add-learners {name}`")
        self.jupyterhub_message = t(
            f"{name} 在这台机器上还没有账户，无法启动服务器。请老师在服务器上运行："
            f"sudo .venv/bin/python -m labkit.hub add-learners {name}，然后再登录。",
            f"{name} has no account on this machine, so their server cannot start. The instructor runs, on the "
            f"server: sudo .venv/bin/python -m labkit.hub add-learners {name}; then log in again.")


class LearnerCourse(LoggingConfigurable):
    """What every labkit learner's server gets: mixed into a spawner, before it in the bases (it calls the
    spawner's `get_env` and `get_args` and adds to them). Configured as ``c.LearnerCourse``."""

    course = Unicode(str(REPO / "labs"), config=True, help="The course notebooks each learner gets a copy of.")
    shared_cache = Unicode("", config=True, help="The class's shared model cache (LABKIT_SHARED_CACHE); '' for none.")
    threads = Integer(1, config=True, help="LABKIT_THREADS and OMP_NUM_THREADS of a learner's kernels.")
    fast = Bool(False, config=True, help="Run every lab in fast mode (LABKIT_FAST=1).")
    cull_kernels_s = Integer(1200, config=True,
                             help="A kernel idle this long (seconds) inside the learner's server stops; 0: never.")
    python = Unicode(sys.executable, config=True,
                     help="The interpreter of a learner's server (interpreter.learner_python: one every user can run).")

    @default("cmd")
    def _learner_server(self) -> list[str]:
        return [self.python, "-m", "labkit.hub.learner_server"]

    @default("notebook_dir")
    def _work_dir(self) -> str:
        return f"~/{WORK}"          # JupyterLab opens on the learner's copy of the course

    def learner_home(self) -> Path:
        try:
            return Path(pwd.getpwnam(self.user.name).pw_dir)
        except KeyError:
            raise NoAccount(self.user.name) from None

    def course_env(self) -> dict[str, str]:
        work = self.learner_home() / WORK
        env = {"LABKIT_COURSE": self.course, "LABKIT_WORK": str(work), "LABKIT_RESULTS": str(work / RESULTS),
               "LABKIT_THREADS": str(self.threads), "OMP_NUM_THREADS": str(self.threads),
               # the environment's python first in a learner's terminal, then the system's (not the hub's PATH)
               "PATH": f"{Path(self.python).parent}:/usr/local/bin:/usr/bin:/bin"}
        if self.shared_cache:
            env["LABKIT_SHARED_CACHE"] = self.shared_cache
        if self.fast:
            env["LABKIT_FAST"] = "1"
        return env

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(self.course_env())
        return env

    def get_args(self) -> list[str]:
        return [*super().get_args(),
                # JupyterLab's settings as make lab sets them: no news pop-up over the figures, no update check
                f"--LabApp.app_settings_dir={REPO / 'etc' / 'jupyterlab'}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                *kernel_culling(self.cull_kernels_s)]


def kernel_culling(idle_s: int) -> list[str]:
    """jupyter_server's own culler, inside a learner's server: a kernel with no execution for ``idle_s``
    seconds stops, even with its notebook open in a tab (``cull_connected``): an open lab's kernel holds
    300 MiB or more of the learner's memory. The notebook and its outputs stay; a run restarts the kernel."""
    if idle_s <= 0:
        return []
    return [f"--MappingKernelManager.cull_idle_timeout={idle_s}", "--MappingKernelManager.cull_interval=60",
            "--MappingKernelManager.cull_connected=True", "--MappingKernelManager.cull_busy=False"]


class LabkitSpawner(LearnerCourse, LocalProcessSpawner):
    """A learner's server as a local process of theirs, in a cgroup holding their memory and CPU limits."""

    cgroup = Instance(LearnerCgroup, allow_none=True, help="The running server's cgroup (set by start).")

    def limits(self) -> Limits:
        return Limits(memory_bytes=self.mem_limit or None, cpus=self.cpu_limit or None)

    async def start(self):
        self.learner_home()                     # NoAccount, before anything is made for them
        self.cgroup = LearnerCgroup(self.user.name)
        enforcement: Enforcement = self.cgroup.apply(self.limits())
        message = f"learner {self.user.name}: {enforcement.describe(self.limits())}"
        if enforcement.problems:
            self.log.warning(message)
        else:
            self.log.info(message)
        try:
            return await super().start()
        except BaseException:
            self.end_cgroup()                   # a failed spawn leaves no cgroup behind
            raise

    def make_preexec_fn(self, name):
        become_learner = super().make_preexec_fn(name)
        cgroup = self.cgroup

        def preexec() -> None:          # in the new process, still root: join the cgroup, then drop root
            if cgroup is not None:
                cgroup.join(os.getpid())
            become_learner()

        return preexec

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        self.end_cgroup()

    def run_post_stop_hook(self):
        # JupyterHub calls stop() only for a server still running; one that crashed comes here alone
        self.end_cgroup()
        return super().run_post_stop_hook()

    def end_cgroup(self) -> None:
        """Kill what is left in the learner's cgroup and remove it (after a hub restart it is found by name)."""
        cgroup = self.cgroup or LearnerCgroup(self.user.name)
        for problem in cgroup.end():
            self.log.warning(f"learner {self.user.name}: cgroup not removed: {problem}")
        self.cgroup = None


def systemd_init() -> bool:
    """True when systemd is this machine's init (PID 1): then SystemdSpawner is the better choice."""
    try:
        return Path("/proc/1/comm").read_text().strip() == "systemd"
    except OSError:
        return False


def systemd_spawner_class() -> type[Spawner]:
    """`LearnerCourse` on SystemdSpawner (PyPI jupyterhub-systemdspawner, installed by the instructor on a
    systemd host): each learner's server is a transient systemd unit that enforces ``mem_limit`` and
    ``cpu_limit`` itself."""
    # optional: installed only where systemd runs the machine
    from systemdspawner import SystemdSpawner

    class LabkitSystemdSpawner(LearnerCourse, SystemdSpawner):
        """A learner's server as a systemd unit of theirs, with labkit's course, environment and limits."""

    return LabkitSystemdSpawner
