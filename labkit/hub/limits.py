"""Per-learner memory and CPU limits, through cgroups, where this machine lets the hub write them.

JupyterHub's LocalProcessSpawner starts a learner's server as a plain process and enforces nothing. Here
each learner gets a cgroup of their own, a child of the hub's own cgroup (so the learners share whatever
the hub itself was given)::

    <hub's cgroup>/labkit-hub/<learner>/     memory limit, CPU quota
        jupyterhub-singleuser  (joins before it drops root; everything it starts stays inside)
        └─ ipykernel, ipykernel, ...

cgroup v2 (one hierarchy at /sys/fs/cgroup): ``memory.max`` and ``cpu.max``, once the parent lets the
``memory`` and ``cpu`` controllers down to its children. cgroup v1 (one hierarchy per controller):
``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted) and
``cpu.cfs_quota_us``. A limit that cannot be written is reported as not enforced, with the reason, in
the hub's log: nothing pretends. On a systemd host, SystemdSpawner does this job instead (jupyterhub_setup.py).

A page is charged to the cgroup that first brought it into memory: the shared weight pack, written by
the hub's set-up (``python -m labkit.hub prepare``), is charged to the hub's cgroup, not to a learner's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "labkit-hub"
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None
    cpus: float | None = None


@dataclass(frozen=True)
class Enforcement:
    """What a learner's cgroup enforces: the file holding each limit, or why it could not be set."""

    memory: Path | None
    cpu: Path | None
    problems: tuple[str, ...] = ()

    def describe(self, limits: Limits) -> str:
        parts = []
        if limits.memory_bytes is not None:
            parts.append(f"memory limit {limits.memory_bytes / 2**30:.2f} GiB "
                         + (f"enforced ({self.memory})" if self.memory else "NOT enforced"))
        if limits.cpus is not None:
            parts.append(f"CPU limit {limits.cpus:g} cores " + (f"enforced ({self.cpu})" if self.cpu else "NOT enforced"))
        text = "; ".join(parts) or "no limits configured"
        return text + "".join(f"; {p}" for p in self.problems)


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """controller -> this process's cgroup path ("" for the v2 hierarchy), from /proc/self/cgroup."""
    own = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _v1_mounts(proc_mounts: str) -> dict[str, Path]:
    """controller -> mount point of its v1 hierarchy, from /proc/self/mounts."""
    mounts = {}
    for line in proc_mounts.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == "cgroup":
            for option in fields[3].split(","):
                mounts.setdefault(option, Path(fields[1]))
    return mounts


def learner_dirs(name: str, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None,
                 proc_mounts: str | None = None) -> dict[str, Path]:
    """Where ``name``'s cgroup lives: {"memory": dir, "cpu": dir} on cgroup v1, {"v2": dir} on v2."""
    proc_cgroup = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    own = _own_cgroups(proc_cgroup)
    if (root / "cgroup.controllers").exists():
        return {"v2": root / own.get("", "/").lstrip("/") / GROUP / name}
    mounts = _v1_mounts(proc_mounts if proc_mounts is not None else Path("/proc/self/mounts").read_text())
    return {c: mounts[c] / own[c].lstrip("/") / GROUP / name for c in ("memory", "cpu") if c in mounts and c in own}


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class LearnerCgroup:
    """One learner's cgroup: made with their limits (`apply`), joined by their server (`join`), emptied
    and removed when the server stops (`end`)."""

    def __init__(self, name: str, dirs: dict[str, Path] | None = None):
        self.name = name
        self.dirs = dirs if dirs is not None else learner_dirs(name)
        self.joined: list[Path] = []      # the directories whose limits were written

    def apply(self, limits: Limits) -> Enforcement:
        if not self.dirs:
            return Enforcement(None, None, ("no cgroup hierarchy with the memory or cpu controller is mounted",))
        if "v2" in self.dirs:
            return self._apply_v2(self.dirs["v2"], limits)
        return self._apply_v1(limits)

    def _apply_v1(self, limits: Limits) -> Enforcement:
        memory = cpu = None
        problems = []
        if limits.memory_bytes is not None:
            where = self.dirs.get("memory")
            try:
                if where is None:
                    raise OSError("no v1 memory hierarchy is mounted")
                where.mkdir(parents=True, exist_ok=True)
                _write(where / "memory.limit_in_bytes", str(limits.memory_bytes))
                memory = where / "memory.limit_in_bytes"
                self.joined.append(where)
                if (where / "memory.memsw.limit_in_bytes").exists():       # memory + swap: no escape to swap
                    _write(where / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            except OSError as exc:
                problems.append(f"memory: {exc}")
        if limits.cpus is not None:
            where = self.dirs.get("cpu")
            try:
                if where is None:
                    raise OSError("no v1 cpu hierarchy is mounted")
                where.mkdir(parents=True, exist_ok=True)
                period = int((where / "cpu.cfs_period_us").read_text())
                _write(where / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * period))))
                cpu = where / "cpu.cfs_quota_us"
                self.joined.append(where)
            except (OSError, ValueError) as exc:
                problems.append(f"cpu: {exc}")
        return Enforcement(memory, cpu, tuple(problems))

    def _apply_v2(self, where: Path, limits: Limits) -> Enforcement:
        wanted = [c for c, v in (("memory", limits.memory_bytes), ("cpu", limits.cpus)) if v is not None]
        try:
            for parent in (where.parent.parent, where.parent):       # the hub's cgroup, then labkit-hub
                parent.mkdir(exist_ok=True)
                enabled = (parent / "cgroup.subtree_control").read_text().split()
                missing = [c for c in wanted if c not in enabled]
                if missing:
                    _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
            where.mkdir(exist_ok=True)
        except OSError as exc:
            return Enforcement(None, None, (f"cgroup v2: cannot delegate {'+'.join(wanted)} below {where.parent.parent} "
                                            f"({exc}); a hub in its own cgroup (systemd, a container) can",))
        memory = cpu = None
        problems = []
        if limits.memory_bytes is not None:
            try:
                _write(where / "memory.max", str(limits.memory_bytes))
                memory = where / "memory.max"
            except OSError as exc:
                problems.append(f"memory: {exc}")
        if limits.cpus is not None:
            try:
                _write(where / "cpu.max", f"{max(1000, int(limits.cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}")
                cpu = where / "cpu.max"
            except OSError as exc:
                problems.append(f"cpu: {exc}")
        if memory or cpu:
            self.joined.append(where)
        return Enforcement(memory, cpu, tuple(problems))

    def join(self, pid: int) -> None:
        """Move ``pid`` into the learner's cgroup(s); its children are born there."""
        for where in self.joined:
            _write(where / "cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        found = set()
        for where in self.dirs.values():
            try:
                found |= {int(p) for p in (where / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def end(self, wait_s: float = 5.0) -> list[str]:
        """Kill whatever is left in the learner's cgroup (kernels a stopped server left behind) and remove
        it; returns the problems (a directory that would not go)."""
        deadline = time.monotonic() + wait_s
        kill_until_gone(self.pids, wait_s, pause=0.05)
        problems = []
        for where in self.dirs.values():
            while where.is_dir():
                try:
                    where.rmdir()
                except OSError as exc:
                    if time.monotonic() > deadline:
                        problems.append(f"{where}: {exc}")
                        break
                    time.sleep(0.05)
        return problems


def kill_until_gone(pids: Callable[[], Collection[int]], wait_s: float, pause: float = 0.1) -> None:
    """SIGKILL every process ``pids()`` lists, again until it lists none or ``wait_s`` has passed (a process
    may fork while it is being killed)."""
    deadline = time.monotonic() + wait_s
    while (found := pids()) and time.monotonic() < deadline:
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(pause)
