"""A learner's results files as the hub reads them (as root, from their private home), and each lab's number
of exercises: what the class view and the instructor's export share. No JupyterHub imports, so the
instructor's commands stay quick to start."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
from pathlib import Path

from labkit.assess.progress import LABS
from labkit.hub.settings import RESULTS, WORK

MAX_SUMMARY_BYTES = 4 * 2**20       # a lab's results summary is a few kB


def local_account(name: str) -> pwd.struct_passwd | None:
    """The learner's account when their home is on this machine."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry if Path(entry.pw_dir).is_dir() else None


def copy_own_results(account: pwd.struct_passwd, folder: Path) -> None:
    """Copy the learner's ``~/work/results/labNN.json`` into ``folder``: each only if it is a regular file
    the learner owns, opened without following a link and without blocking. The service reads as root, so
    a learner's link to a file of someone else, or a named pipe that would hang the page, is left out."""
    results = Path(account.pw_dir) / WORK / RESULTS
    for lab in LABS:
        try:
            fd = os.open(results / f"lab{lab}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_uid == account.pw_uid and info.st_size <= MAX_SUMMARY_BYTES:
                (folder / f"lab{lab}.json").write_bytes(f.read(MAX_SUMMARY_BYTES))


_EXERCISE_CALL = re.compile(r"""exercise\(\s*["']([A-Za-z0-9_]+)""")


def exercise_totals(course: Path) -> dict[str, int]:
    """lab -> how many exercises its notebook (``NN_*.ipynb`` in ``course``) gives, counted from its code."""
    totals = {}
    for lab in LABS:
        for notebook in sorted(course.glob(f"{lab}_*.ipynb")):
            cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
            code = "".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
            totals[lab] = len(set(_EXERCISE_CALL.findall(code)))
    return totals
