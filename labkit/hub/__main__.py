"""The hub's set-up and start, as ``make hub`` runs them (each as root; settings from LABKIT_HUB_*)::

    python -m labkit.hub add-learners ann bo     # system users with private homes; the class list
    python -m labkit.hub remove-learners bo      # the account and its home (only accounts labkit made)
    python -m labkit.hub prepare                 # the class's one copy of the model, read-only
    python -m labkit.hub check                   # what this machine enforces per learner
    python -m labkit.hub start                   # JupyterHub with hub/jupyterhub_config.py
"""

from __future__ import annotations

import argparse
import os
import sys

from labkit.hub import learners
from labkit.hub.interpreter import learner_python, readable_by_all
from labkit.hub.limits import LearnerCgroup, Limits
from labkit.hub.settings import REPO, HubSettings, from_env

CONFIG = REPO / "hub" / "jupyterhub_config.py"


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"{what} needs root: learners are system users and the hub starts their servers as them")


def add_learners(s: HubSettings, names: list[str]) -> None:
    need_root("add-learners")
    for name in [s.instructor, *names]:
        learners.check_name(name)
    if learners.ensure_user(s.instructor):
        print(f"instructor: account {s.instructor} created")
    created = learners.add_learners(names, s.learners_file)
    for name in names:
        print(f"learner {name}: {'account created' if name in created else 'account exists'}")
    print(f"class list {s.learners_file}: {len(learners.read_learners(s.learners_file))} learners "
          "(a running hub reads it at its next start)")


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
    add = sub.add_parser("add-learners", help="make learners' accounts (and the instructor's); add them to the class")
    add.add_argument("names", nargs="*")
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
