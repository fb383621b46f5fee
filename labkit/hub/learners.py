"""The class list: each learner is a local system user with a home of their own (mode 0700).

JupyterHub's local spawners start a learner's server as that user, so the operating system keeps learners
apart: learner A's kernel cannot open learner B's notebooks or results. Accounts made here carry the
comment ``MARK`` in their passwd entry; `remove_learner` deletes only such accounts, never one it did not make.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from pathlib import Path

from labkit.hub.limits import kill_until_gone

MARK = "labkit learner"
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,30}$")      # what useradd accepts everywhere, and a hub URL segment
HOME_MODE = 0o700


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"a learner name is 1-31 lowercase letters, digits, '-' or '_', starting with a letter "
                         f"or '_', got {name!r}")
    return name


def read_learners(path: Path) -> list[str]:
    """The names in the class list at ``path`` (none when it does not exist yet)."""
    if not path.is_file():
        return []
    return [check_name(line.strip()) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_learners(path: Path, names: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{n}\n" for n in sorted(set(names))), encoding="utf-8")


def account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def ensure_user(name: str) -> bool:
    """Make ``name`` a system user with a private home; True when it was created now.

    An existing account is accepted only if this module made it: a learner named like a service
    account (``postgres``) or a person's login must not silently become a hub user."""
    entry = account(check_name(name))
    if entry is None:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--comment", MARK, name],
                       check=True, capture_output=True, text=True)
        entry = pwd.getpwnam(name)
        created = True
    elif entry.pw_gecos != MARK:
        raise ValueError(f"{name} is an existing account not made by labkit ({entry.pw_gecos or 'no comment'}): "
                         "choose another name")
    else:
        created = False
    os.chmod(entry.pw_dir, HOME_MODE)
    return created


def add_learners(names: list[str], class_list: Path) -> list[str]:
    """Create the accounts that do not exist yet and add ``names`` to the class list; returns the created ones."""
    created = [name for name in names if ensure_user(name)]
    write_learners(class_list, read_learners(class_list) + list(names))
    return created


def user_pids(uid: int) -> list[int]:
    """Processes running as ``uid`` (from /proc), zombies left out: they have ended, only their exit status
    waits to be collected."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    pids.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return pids


def end_processes(uid: int, wait_s: float = 5.0) -> None:
    """SIGKILL every process of ``uid`` (a learner's leftovers; their server is already stopped)."""
    kill_until_gone(lambda: user_pids(uid), wait_s)


def remove_learner(name: str, class_list: Path | None = None) -> bool:
    """Delete the account ``name`` and its home, if labkit made it; True when something was deleted."""
    if class_list is not None:
        write_learners(class_list, [n for n in read_learners(class_list) if n != name])
    entry = account(check_name(name))
    if entry is None or entry.pw_gecos != MARK:
        return False
    end_processes(entry.pw_uid)
    subprocess.run(["userdel", "--remove", name], check=True, capture_output=True, text=True)
    return True
