"""The instructor's password: set at the hub's set-up, never by whoever logs in first.

The learners set their passwords at their first login (the first-use authenticator). The instructor is
the hub's admin, so their name cannot work that way: anyone who reached the hub before them would own
it. Their password is set before the hub starts, as a bcrypt hash in a file only root can read::

    python -m labkit.hub instructor               # asks twice on the terminal (or reads one line of stdin)
        -> $LABKIT_HUB_DIR/instructor-password      mode 0600, owner root

`jupyterhub_setup.ClassAuthenticator` checks the instructor's logins against that file (read at each login, so a new
password needs no restart) and leaves every other name to the first-use rules. `start` refuses to run
while the file is missing, or readable by anyone but its owner.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

import bcrypt

MIN_LENGTH = 8
FILE_MODE = 0o600


def check_file(path: Path) -> None:
    """ValueError, saying what to do, unless ``path`` is a password file only its owner (this user) reads."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ValueError(f"no instructor password at {path}: set one with `python -m labkit.hub "
                         "instructor` (make hub asks for it)") from None
    if info.st_mode & 0o077 or info.st_uid != os.geteuid():
        raise ValueError(f"{path} is mode {info.st_mode & 0o777:o}, owner uid {info.st_uid}: it must be "
                         f"mode {FILE_MODE:o} and owned by uid {os.geteuid()} (chmod 600, or set it again)")


def set_password(path: Path, password: str) -> None:
    """Write the bcrypt hash of ``password`` to ``path`` (mode 0600 from its creation, then renamed over)."""
    if len(password) < MIN_LENGTH:
        raise ValueError(f"the instructor's password must be at least {MIN_LENGTH} characters")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(bcrypt.hashpw(password.encode(), bcrypt.gensalt()) + b"\n")
    os.replace(tmp, path)


def password_matches(path: Path, password: str) -> bool:
    """True when ``password`` is the instructor's; False for any other, or when the file is unusable."""
    try:
        check_file(path)
        stored = path.read_bytes().strip()
        return bcrypt.checkpw(password.encode(), stored)
    except (OSError, ValueError):
        return False


def ask_password() -> str:
    """The new password: asked twice on the terminal, or one line of stdin when it is not a terminal."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass("the instructor's password (at least 8 characters): ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the two passwords differ")
    return first

