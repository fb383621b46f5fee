"""The hub's set-up and start, as ``make hub`` runs them (each as root; settings from LABKIT_HUB_*)::

    python -m labkit.hub add-learners ann bo     # system users with private homes; the class list
    python -m labkit.hub instructor              # the instructor's account; their password, asked once
    python -m labkit.hub password-file FILE      # only the password's bcrypt file (for a Kubernetes secret)
    python -m labkit.hub remove-learners bo      # the account and its home (only accounts labkit made)
    python -m labkit.hub prepare                 # the class's one copy of the model, read-only
    python -m labkit.hub check                   # what this machine enforces per learner
    python -m labkit.hub start                   # JupyterHub with deploy/jupyterhub_config.py

and, while a class runs (class_tools.py): ``push-update``, ``reset-lab NAME LAB``, ``export-csv FILE``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labkit.hub import instructor, learners
from labkit.hub.interpreter import learner_python, readable_by_all
from labkit.hub.limits import LearnerCgroup, Limits
from labkit.hub.settings import REPO, HubSettings, from_env

CONFIG = REPO / "deploy" / "jupyterhub_config.py"


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"{what} needs root: learners are system users and the hub starts their servers as them")


def add_learners(s: HubSettings, names: list[str]) -> None:
    need_root("add-learners")
    for name in names:
        learners.check_name(name)
        if name == s.instructor:
            raise SystemExit(f"{name} is the instructor (LABKIT_HUB_INSTRUCTOR), not a learner")
    created = learners.add_learners(names, s.learners_file)
    for name in names:
        print(f"learner {name}: {'account created' if name in created else 'account exists'}")
    print(f"class list {s.learners_file}: {len(learners.read_learners(s.learners_file))} learners "
          "(a running hub reads it at its next start)")


def setup_instructor(s: HubSettings, new_password: bool) -> None:
    """The instructor's account (their own server runs as it), and their password: asked when there is none
    (or with ``new_password``), kept when there is one."""
    need_root("instructor")
    if learners.ensure_user(s.instructor):
        print(f"instructor: account {s.instructor} created")
    if s.auth != "firstuse":
        print(f"instructor {s.instructor}: logs in with the machine's password (LABKIT_HUB_AUTH={s.auth}; chpasswd)")
        return
    if not new_password:
        try:
            instructor.check_file(s.password_file)
            print(f"instructor {s.instructor}: password kept ({s.password_file}; --new-password to change it)")
            return
        except ValueError:
            pass
    try:
        instructor.set_password(s.password_file, instructor.ask_password())
    except ValueError as exc:
        raise SystemExit(f"instructor {s.instructor}: {exc}") from None
    print(f"instructor {s.instructor}: password set ({s.password_file}, mode 600)")


def password_file(path: Path) -> None:
    """The instructor's password as a bcrypt file at ``path`` and nothing else: no account, no root. For a hub
    that is not this machine's (zero-to-jupyterhub reads it from a Kubernetes secret, docs/hub.md)."""
    try:
        instructor.set_password(path, instructor.ask_password())
    except ValueError as exc:
        raise SystemExit(f"password-file: {exc}") from None
    print(f"the instructor's password: a bcrypt hash in {path} (mode 600)")


def class_accounts(s: HubSettings, names: list[str]):
    """The accounts of ``names`` (default: the class list); SystemExit naming one that has none."""
    accounts = []
    for name in names or learners.read_learners(s.learners_file):
        if (entry := learners.account(learners.check_name(name))) is None:
            raise SystemExit(f"{name} has no account on this machine (python -m labkit.hub add-learners {name})")
        accounts.append(entry)
    return accounts


def push_update(s: HubSettings, names: list[str]) -> None:
    need_root("push-update")
    # the class tools are imported where used: they load ipywidgets (the results' reader), which the hub's
    # set-up commands do not need, and each of those would start a second slower
    from labkit.hub import class_tools

    for name, said in class_tools.push_update(class_accounts(s, names), learner_python(), s.course).items():
        print(f"{name}: " + ("; ".join(said.strip().splitlines()) or "up to date"))


def reset_lab(s: HubSettings, name: str, lab: str) -> None:
    need_root("reset-lab")
    from labkit.hub import class_tools  # see push_update

    try:
        print(class_tools.reset_lab(class_accounts(s, [name])[0], learner_python(), s.course, lab).strip())
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def export_csv(s: HubSettings, path: Path) -> None:
    from labkit.hub import class_tools  # see push_update

    rows = class_tools.export_csv(class_accounts(s, []), s.course, path)
    print(f"{path}: {rows} rows (one per learner and lab; self-reported results, see docs/hub.md)")


def remove_learners(s: HubSettings, names: list[str]) -> None:
    need_root("remove-learners")
    for name in names:
        gone = learners.remove_learner(name, s.learners_file)
        print(f"learner {name}: {'account and home deleted' if gone else 'removed from the class list only'}")


def prepare(s: HubSettings, on_disk: bool) -> None:
    """The class's one copy of the model, by the hub's set-up: never from a learner's server."""
    if os.environ.get("JUPYTERHUB_USER"):
        raise SystemExit("prepare runs in the hub's set-up, not in a learner's server")
    # imported here: it loads torch, which nothing else in this command needs
    from labkit.model import shared_cache

    packs = shared_cache.prepare(s.shared_cache, progress=True, in_memory=not on_disk)
    print(f"shared model cache: {s.shared_cache} (weight packs in {packs}); learners get "
          f"{shared_cache.ENV}={s.shared_cache}")


def check(s: HubSettings) -> str:
    """One line on the limits this machine enforces, found by making a learner's cgroup and removing it."""
    probe = LearnerCgroup(f"probe-{os.getpid()}")
    limits = Limits(memory_bytes=2**30, cpus=s.cpu_limit)
    try:
        enforcement = probe.apply(limits)
    finally:
        probe.end()
    how = "enforced" if enforcement.memory and enforcement.cpu else "NOT (fully) enforced"
    return (f"per-learner limits {how} by cgroups on this machine (probe: {enforcement.describe(limits)}); "
            f"configured: memory {s.mem_limit}, CPU {s.cpu_limit:g} cores, {s.threads} thread(s)")


def start(s: HubSettings) -> None:
    need_root("start")
    if s.auth == "firstuse":
        try:
            instructor.check_file(s.password_file)
        except ValueError as exc:
            raise SystemExit(f"the hub does not start without the instructor's password: {exc}") from None
    if not s.proxy.is_file():
        raise SystemExit(f"configurable-http-proxy is not at {s.proxy}: run `make hub-proxy` (npm installs it there)")
    print(check(s), file=sys.stderr)
    try:
        print(f"learners' servers run on {learner_python()}", file=sys.stderr)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    if not readable_by_all(s.course):
        raise SystemExit(f"learners cannot read the course at {s.course}: a directory above it is private")
    if not s.shared_cache.is_dir():
        print(f"warning: no shared model cache at {s.shared_cache} (python -m labkit.hub prepare): each learner's "
              "first LLM() converts a copy of their own", file=sys.stderr)
    if not learners.read_learners(s.learners_file):
        print(f"warning: the class list {s.learners_file} is empty (python -m labkit.hub add-learners NAME...)",
              file=sys.stderr)
    s.hub_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(s.hub_dir)
    os.execv(sys.executable, [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m labkit.hub", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add-learners", help="make learners' accounts; add them to the class")
    add.add_argument("names", nargs="*")
    teacher = sub.add_parser("instructor", help="make the instructor's account; set their password if none is set")
    teacher.add_argument("--new-password", action="store_true", help="set the password again")
    secret = sub.add_parser("password-file", help="write the instructor's password, bcrypt-hashed, to FILE only")
    secret.add_argument("path", type=Path)
    push = sub.add_parser("push-update", help="copy the course's new notebooks into learners' work dirs now")
    push.add_argument("names", nargs="*", help="default: the class list")
    reset = sub.add_parser("reset-lab", help="one learner's lab back to the course's version (theirs to .backup/)")
    reset.add_argument("name")
    reset.add_argument("lab", help="a name prefix, e.g. 01")
    export = sub.add_parser("export-csv", help="every learner's results as CSV")
    export.add_argument("path", type=Path)
    remove = sub.add_parser("remove-learners", help="delete learners' accounts and homes")
    remove.add_argument("names", nargs="+")
    prep = sub.add_parser("prepare", help="convert the model once into the shared cache")
    prep.add_argument("--on-disk", action="store_true", help="keep the weight packs on disk, not on a tmpfs")
    sub.add_parser("check", help="say which per-learner limits this machine enforces")
    sub.add_parser("start", help="start the hub")
    args = parser.parse_args(argv)
    s = from_env()
    if args.command == "add-learners":
        add_learners(s, args.names)
    elif args.command == "instructor":
        setup_instructor(s, args.new_password)
    elif args.command == "password-file":
        password_file(args.path)
    elif args.command == "push-update":
        push_update(s, args.names)
    elif args.command == "reset-lab":
        reset_lab(s, args.name, args.lab)
    elif args.command == "export-csv":
        export_csv(s, args.path)
    elif args.command == "remove-learners":
        remove_learners(s, args.names)
    elif args.command == "prepare":
        prepare(s, args.on_disk)
    elif args.command == "check":
        print(check(s))
    else:
        start(s)


if __name__ == "__main__":
    main()
