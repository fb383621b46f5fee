"""A learner's own copy of the course: ``make lab``'s ``work/`` rule, for one home on a hub.

`sync` copies each course notebook the learner does not have yet and notes each one the course changed
after their copy was made; it never overwrites their copy (their edits and outputs are theirs). `reset`
takes the course's version of one lab, keeping theirs in ``.backup/``. Both run as the learner (from
their server's start, or from a terminal in their JupyterLab)::

    python -m labkit.hub.workspace sync            # LABKIT_COURSE -> LABKIT_WORK (default ~/work)
    python -m labkit.hub.workspace reset 01         # like make reset-lab LAB=01
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.hub.settings import REPO, RESULTS, WORK
from labkit.i18n import t

NOTES = "course-updates.md"        # in the learner's work dir: what the last sync found changed


@dataclass(frozen=True)
class SyncReport:
    new: tuple[str, ...]           # notebooks copied now (paths relative to the work dir)
    changed: tuple[str, ...]       # the course's version is newer than the learner's copy, which was kept


def course_notebooks(course: Path) -> list[Path]:
    """Every notebook of the course, relative to it, checkpoints left out."""
    return sorted(p.relative_to(course) for p in course.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def sync(course: Path, work: Path) -> SyncReport:
    new, changed = [], []
    for rel in course_notebooks(course):
        src, dest = course / rel, work / rel
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            new.append(str(rel))
        elif src.stat().st_mtime > dest.stat().st_mtime:
            changed.append(str(rel))
    (work / RESULTS).mkdir(parents=True, exist_ok=True)
    return SyncReport(tuple(new), tuple(changed))


def reset(course: Path, work: Path, lab: str) -> list[str]:
    """Copy the course's notebooks whose name starts with ``lab`` over the learner's, theirs moved to
    ``.backup/``; returns the notebooks reset. ValueError when no notebook matches."""
    matches = [rel for rel in course_notebooks(course) if rel.name.startswith(lab)]
    if not matches:
        raise ValueError(f"no notebook of {course} starts with {lab!r}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for rel in matches:
        dest = work / rel
        if dest.exists():
            backup = work / ".backup" / f"{rel.stem}.{stamp}.ipynb"
            backup.parent.mkdir(parents=True, exist_ok=True)
            dest.replace(backup)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(course / rel, dest)
    return [str(rel) for rel in matches]


def notes(report: SyncReport) -> str:
    """The text of ``NOTES``: which notebooks the course changed after the learner's copy was made."""
    lines = [t("# 课程更新", "# Course updates"), ""]
    if report.new:
        lines += [t("新加入你的工作区：", "New in your workspace:"), *[f"- {p}" for p in report.new], ""]
    if report.changed:
        lines += [t("课程改动了这些实验，你的副本保留未动：", "The course changed these labs; your copy was kept:"),
                  *[f"- {p}" for p in report.changed], "",
                  t("要换成新版本（你的副本移到 .backup/），在终端运行：",
                    "To take the new version (your copy moves to .backup/), run in a terminal:"),
                  "", *[f"    python -m labkit.hub.workspace reset {Path(p).stem}" for p in report.changed], ""]
    if not report.new and not report.changed:
        lines.append(t("没有更新。", "Nothing new."))
    return "\n".join(lines) + "\n"


def write_notes(work: Path, report: SyncReport) -> None:
    if report.new or report.changed or (work / NOTES).exists():
        (work / NOTES).write_text(notes(report), encoding="utf-8")


def locations() -> tuple[Path, Path]:
    """(course, work) from ``LABKIT_COURSE`` and ``LABKIT_WORK`` (defaults: this checkout's labs/, ~/work)."""
    course = Path(os.environ.get("LABKIT_COURSE", "").strip() or REPO / "labs")
    work = Path(os.environ.get("LABKIT_WORK", "").strip() or Path.home() / WORK)
    return course, work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.hub.workspace", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="copy the course notebooks you do not have yet; note the changed ones")
    one = sub.add_parser("reset", help="take the course's version of a lab (yours moves to .backup/)")
    one.add_argument("lab", help="a name prefix, e.g. 01")
    args = parser.parse_args(argv)
    course, work = locations()
    if args.command == "sync":
        report = sync(course, work)
        write_notes(work, report)
        for rel in report.new:
            print(f"new: {work / rel}", file=sys.stderr)
        for rel in report.changed:
            print(f"note: {course / rel} changed after your copy {work / rel}", file=sys.stderr)
        return 0
    try:
        for rel in reset(course, work, args.lab):
            print(f"reset: {work / rel} (from {course / rel})")
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
