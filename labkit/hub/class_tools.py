"""What an instructor does to a running class, from the server's terminal (as root)::

    python -m labkit.hub push-update [NAME...]     # the course's new notebooks into every learner's ~/work now
    python -m labkit.hub reset-lab NAME 01         # one learner's lab 01 back to the course's (theirs to .backup/)
    python -m labkit.hub export-csv results.csv    # every learner's results, one row per learner and lab

A push and a reset run `workspace` as the learner, with their rights only, exactly as their server's
start and their own terminal do: a push copies the notebooks they do not have and lists the changed ones
in ``~/work/course-updates.md``, never overwriting their copy; a reset keeps theirs in ``~/work/.backup/``.
A running JupyterLab shows the new files at its next refresh of the file browser; nothing restarts.

The export reads the same files as the class view (`results.copy_own_results`): results the learners'
kernels wrote, which learners can edit, so self-reported.
"""

from __future__ import annotations

import csv
import os
import pwd
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from labkit.assess.progress import LABS, read_progress
from labkit.hub.results import copy_own_results, exercise_totals
from labkit.hub.settings import WORK

CSV_COLUMNS = ("learner", "lab", "opened", "quiz_first_right", "quiz_size", "quiz_answered", "exercises_passed",
               "exercises_first_try", "exercises_attempted", "exercises_total", "predictions", "predictions_judged",
               "predictions_right", "updated")


def as_learner(account: pwd.struct_passwd, python: Path, course: Path, args: Sequence[str]) -> str:
    """Run ``python -m labkit.hub.workspace ARGS`` as the learner (their uid, gid and home); its output.
    RuntimeError with the learner's name and the command's error when it fails."""
    home = Path(account.pw_dir)
    env = {"HOME": str(home), "USER": account.pw_name, "LOGNAME": account.pw_name, "PATH": "/usr/bin:/bin",
           "LABKIT_COURSE": str(course), "LABKIT_WORK": str(home / WORK), "LANG": "C.UTF-8"}
    become = ({} if account.pw_uid == os.geteuid()
              else {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []})
    done = subprocess.run([str(python), "-m", "labkit.hub.workspace", *args], env=env, cwd=home,
                          capture_output=True, text=True, timeout=120, **become)
    if done.returncode != 0:
        raise RuntimeError(f"{account.pw_name}: workspace {' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    return done.stdout + done.stderr


def push_update(accounts: Sequence[pwd.struct_passwd], python: Path, course: Path) -> dict[str, str]:
    """The course's new notebooks into each learner's work dir now; learner -> what their sync said."""
    return {a.pw_name: as_learner(a, python, course, ["sync"]) for a in accounts}


def reset_lab(account: pwd.struct_passwd, python: Path, course: Path, lab: str) -> str:
    return as_learner(account, python, course, ["reset", lab])


def class_rows(accounts: Sequence[pwd.struct_passwd], course: Path) -> list[dict]:
    """One dict per learner and lab (CSV_COLUMNS), from each learner's own results files."""
    totals = exercise_totals(course)
    rows = []
    for account in accounts:
        with tempfile.TemporaryDirectory() as tmp:
            copy_own_results(account, Path(tmp))
            opened = {lab for lab in LABS if (Path(tmp) / f"lab{lab}.json").is_file()}
            labs = read_progress(tmp)
        for p in labs:
            rows.append({"learner": account.pw_name, "lab": p.lab, "opened": int(p.lab in opened),
                         "quiz_first_right": p.quiz_first_right, "quiz_size": p.quiz_size or "",
                         "quiz_answered": p.quiz_answered, "exercises_passed": p.exercises_passed,
                         "exercises_first_try": p.exercises_first_try, "exercises_attempted": p.exercises_attempted,
                         "exercises_total": totals.get(p.lab, ""), "predictions": len(p.predictions),
                         "predictions_judged": len(p.judged_predictions), "predictions_right": p.predictions_right,
                         "updated": p.updated or ""})
    return rows


def export_csv(accounts: Sequence[pwd.struct_passwd], course: Path, path: Path) -> int:
    """Write the class's results to ``path`` as CSV; returns the number of rows."""
    rows = class_rows(accounts, course)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)
