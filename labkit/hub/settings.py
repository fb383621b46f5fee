"""The hub's settings: one frozen dataclass, read from ``LABKIT_HUB_*`` environment variables.

The Makefile, the command line (``python -m labkit.hub``), the JupyterHub config file and the tests all
pass settings the same way, through the environment, so the hub that ``make hub`` starts and the hub the
tests start are configured by the same code (``jupyterhub_setup.configure``).

=========================  ==============================  ===========================================
variable                   default                         what
=========================  ==============================  ===========================================
LABKIT_HUB_DIR             /srv/labkit                     the hub's state: database, passwords, learners
LABKIT_HUB_SHARED          $LABKIT_HUB_DIR/shared          the class's model cache (read-only to learners)
LABKIT_HUB_COURSE          <this checkout>/labs            the notebooks each learner gets a copy of
LABKIT_HUB_INSTRUCTOR      instructor                      the admin: opens the class view
LABKIT_HUB_IP              (all interfaces)                where learners reach the hub
LABKIT_HUB_PORT            8000
LABKIT_HUB_AUTH            firstuse                        ``firstuse`` (password set at first login), ``pam``
LABKIT_HUB_MEM             2G                              memory limit per learner (kernels included)
LABKIT_HUB_CPUS            1                               CPU limit per learner, in cores
LABKIT_HUB_THREADS         1                               LABKIT_THREADS / OMP_NUM_THREADS of a learner
LABKIT_HUB_CULL_IDLE       3600                            seconds idle before a learner's server stops (> 300)
LABKIT_HUB_CULL_KERNELS    1200                            seconds idle before a kernel in a server stops (0: never)
LABKIT_HUB_FAST            0                               1: every learner's labs run in fast mode
LABKIT_HUB_ADMIN_TOKEN     (none)                          an API token with admin rights, for scripts
LABKIT_HUB_PROXY           build/hub/node_modules/.bin/…   configurable-http-proxy (``make hub-proxy``)
=========================  ==============================  ===========================================
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parents[2]
PROXY = REPO / "build" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
WORK = "work"              # a learner's copy of the course, under their home (make lab's work/ rule)
RESULTS = "results"        # their results summaries, under WORK (labkit.report.results)
AUTHENTICATORS = ("firstuse", "pam")
# jupyterhub-singleuser posts its last activity to the hub every 300 s (JUPYTERHUB_ACTIVITY_INTERVAL's default)
ACTIVITY_INTERVAL_S = 300
_BYTES = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGT]?$")         # JupyterHub's ByteSpecification: 512M, 2G, 1.5G


@dataclass(frozen=True)
class HubSettings:
    state_dir: Path = Path("/srv/labkit")
    shared_cache: Path = Path("/srv/labkit/shared")
    course: Path = REPO / "labs"
    instructor: str = "instructor"
    ip: str = ""
    port: int = 8000
    auth: str = "firstuse"
    mem_limit: str = "2G"
    cpu_limit: float = 1.0
    threads: int = 1
    cull_idle_s: int = 3600
    cull_kernels_s: int = 1200
    fast: bool = False
    admin_token: str = ""
    proxy: Path = PROXY

    @property
    def hub_dir(self) -> Path:
        """JupyterHub's own files: its database, cookie secret, first-use passwords."""
        return self.state_dir / "hub"

    @property
    def password_file(self) -> Path:
        """The instructor's password, a bcrypt hash only root reads (``python -m labkit.hub instructor``)."""
        return self.state_dir / "instructor-password"

    @property
    def learners_file(self) -> Path:
        """The class list, one learner per line (``python -m labkit.hub add-learners`` writes it)."""
        return self.state_dir / "learners.txt"


def _positive(name: str, raw: str, kind: type) -> int | float:
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {raw!r}")
    return value


def from_env(environ: Mapping[str, str] | None = None) -> HubSettings:
    """Settings from ``environ`` (default ``os.environ``); a bad value raises ValueError naming its variable."""
    env = os.environ if environ is None else environ

    def get(name: str, default: str = "") -> str:
        return env.get(name, "").strip() or default

    state_dir = Path(get("LABKIT_HUB_DIR", "/srv/labkit")).absolute()   # learners' servers start elsewhere
    auth = get("LABKIT_HUB_AUTH", "firstuse")
    if auth not in AUTHENTICATORS:
        raise ValueError(f"LABKIT_HUB_AUTH must be one of {AUTHENTICATORS}, got {auth!r}")
    mem_limit = get("LABKIT_HUB_MEM", "2G")
    if not _BYTES.match(mem_limit):
        raise ValueError(f"LABKIT_HUB_MEM must be a size such as 512M or 2G, got {mem_limit!r}")
    fast = get("LABKIT_HUB_FAST", "0")
    if fast not in ("0", "1"):
        raise ValueError(f"LABKIT_HUB_FAST must be 0 or 1, got {fast!r}")
    cull_idle_s = int(_positive("LABKIT_HUB_CULL_IDLE", get("LABKIT_HUB_CULL_IDLE", "3600"), int))
    if cull_idle_s <= ACTIVITY_INTERVAL_S:
        raise ValueError(f"LABKIT_HUB_CULL_IDLE must be more than {ACTIVITY_INTERVAL_S} s, got {cull_idle_s}: a "
                         f"learner's server reports its activity every {ACTIVITY_INTERVAL_S} s, so a shorter "
                         "timeout stops servers that are in use")
    cull_kernels = get("LABKIT_HUB_CULL_KERNELS", "1200")
    if not cull_kernels.isdigit():
        raise ValueError(f"LABKIT_HUB_CULL_KERNELS must be a whole number of seconds (0: never), got {cull_kernels!r}")
    return HubSettings(
        state_dir=state_dir,
        shared_cache=Path(get("LABKIT_HUB_SHARED", str(state_dir / "shared"))).absolute(),
        course=Path(get("LABKIT_HUB_COURSE", str(REPO / "labs"))).absolute(),
        instructor=get("LABKIT_HUB_INSTRUCTOR", "instructor"),
        ip=get("LABKIT_HUB_IP"),
        port=int(_positive("LABKIT_HUB_PORT", get("LABKIT_HUB_PORT", "8000"), int)),
        auth=auth,
        mem_limit=mem_limit,
        cpu_limit=float(_positive("LABKIT_HUB_CPUS", get("LABKIT_HUB_CPUS", "1"), float)),
        threads=int(_positive("LABKIT_HUB_THREADS", get("LABKIT_HUB_THREADS", "1"), int)),
        cull_idle_s=cull_idle_s,
        cull_kernels_s=int(cull_kernels),
        fast=fast == "1",
        admin_token=get("LABKIT_HUB_ADMIN_TOKEN"),
        proxy=Path(get("LABKIT_HUB_PROXY", str(PROXY))).absolute(),
    )
