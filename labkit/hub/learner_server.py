"""A learner's server, as the hub starts it: bring their copy of the course up to date, then JupyterLab.

    python -m labkit.hub.learner_server [jupyterhub-singleuser arguments]

It runs as the learner (the spawner has already dropped root), so it can only write in their home. The
workspace is synced on every start: a ``git pull`` of the course reaches a learner at their next login,
new notebooks copied and changed ones noted, as ``make lab`` does for one person (`workspace.sync`).
"""

from __future__ import annotations

import os
import sys

from labkit.hub import workspace


def main(argv: list[str]) -> None:
    workspace.main(["sync"])
    os.execv(sys.executable, [sys.executable, "-m", "jupyterhub.singleuser", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
