"""JupyterHub's configuration for a class, from `HubSettings` (deploy/jupyterhub_config.py calls `configure`).

=================  ============================================================================
part               choice, and why
=================  ============================================================================
proxy              configurable-http-proxy from npm, installed into build/hub/ (make hub-proxy)
authenticator      ``firstuse``: the class list's names; each learner sets a password at first
                   login, the instructor's was set before the hub started (`instructor`).
                   ``pam``: the machine's own passwords. The instructor is the admin.
spawner            `LabkitSpawner` (local processes, cgroup limits); on a systemd host with
                   jupyterhub-systemdspawner installed, SystemdSpawner with the same course set-up
idle culler        jupyterhub-idle-culler as a hub service: a server idle for
                   ``LABKIT_HUB_CULL_IDLE`` seconds stops (its kernels with it), freeing memory
class view         `class_view` as a hub service: every learner's progress, for admins only
=================  ============================================================================

Ports other than the public one (the hub's own, the proxy's API, the class view's) are free ports
picked at start, so two hubs (or a hub and the tests) never collide.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from firstuseauthenticator import FirstUseAuthenticator
from jupyterhub.utils import maybe_future, random_port
from traitlets import Unicode

from labkit.hub.instructor import password_matches, set_password
from labkit.hub.interpreter import learner_python
from labkit.hub.learners import read_learners
from labkit.hub.settings import HubSettings, from_env
from labkit.hub.spawner import LabkitSpawner, systemd_init, systemd_spawner_class

CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
# the class view lists the users and reads each learner's results: from their home when it is on this
# machine, else through their running server (on Kubernetes)
CLASS_VIEW_SCOPES = ["list:users", "read:users", "read:servers", "access:servers"]
ADMIN_SCOPES = ["admin:users", "admin:servers", "tokens"]


class ClassAuthenticator(FirstUseAuthenticator):
    """First-use passwords for the learners; the instructor's checked against their password file."""

    instructor = Unicode("instructor", config=True, help="The instructor's name (the hub's admin).")
    password_file = Unicode("", config=True, help="The instructor's password file (`set_password`).")

    async def authenticate(self, handler, data):
        name = self.normalize_username(data.get("username", ""))
        if name == self.instructor:
            if password_matches(Path(self.password_file), data.get("password", "")):
                return name
            self.log.warning(f"instructor {name}: wrong password from {handler.request.remote_ip}")
            return None
        return await maybe_future(super().authenticate(handler, data))

    def reset_password(self, username: str, new_password: str) -> str:
        """The change-password page: for the instructor, their password file (the first-use store is not read
        for them)."""
        if username != self.instructor:
            return super().reset_password(username, new_password)
        try:
            set_password(Path(self.password_file), new_password)
        except (OSError, ValueError) as exc:
            return str(exc)
        return "Your password has been changed successfully!"


def configure(c, settings: HubSettings | None = None) -> None:
    """Fill JupyterHub's config object ``c`` for the class ``settings`` describes (default: from the environment)."""
    s = settings or from_env()
    s.hub_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(s.hub_dir, 0o700)                      # the cookie secret and the password hashes live here
    c.JupyterHub.ip = s.ip
    c.JupyterHub.port = s.port
    c.JupyterHub.hub_ip = "127.0.0.1"
    c.JupyterHub.hub_port = random_port()
    c.JupyterHub.db_url = f"sqlite:///{s.hub_dir / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(s.hub_dir / "jupyterhub_cookie_secret")
    c.ConfigurableHTTPProxy.command = [str(s.proxy)]
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{random_port()}"
    c.ConfigurableHTTPProxy.pid_file = str(s.hub_dir / "proxy.pid")
    configure_authenticator(c, s)
    configure_spawner(c, s)
    configure_services(c, s)


def configure_authenticator(c, s: HubSettings) -> None:
    c.Authenticator.allowed_users = set(read_learners(s.learners_file))
    c.Authenticator.admin_users = {s.instructor}
    if s.auth == "firstuse":
        c.JupyterHub.authenticator_class = ClassAuthenticator
        c.ClassAuthenticator.instructor = s.instructor
        c.ClassAuthenticator.password_file = str(s.password_file)
        c.FirstUseAuthenticator.dbm_path = str(s.hub_dir / "passwords.dbm")
        c.FirstUseAuthenticator.create_users = False       # only the class list (and the instructor) log in
        c.FirstUseAuthenticator.min_password_length = 8
    else:
        c.JupyterHub.authenticator_class = "pam"


def spawner_class() -> type:
    if systemd_init() and importlib.util.find_spec("systemdspawner") is not None:
        return systemd_spawner_class()
    return LabkitSpawner


def configure_spawner(c, s: HubSettings) -> None:
    c.JupyterHub.spawner_class = spawner_class()
    c.Spawner.default_url = "/lab"
    c.Spawner.mem_limit = s.mem_limit
    c.Spawner.cpu_limit = s.cpu_limit
    # JupyterLab's start on a busy 2-core machine: with 8 learners opening lab 01 at once (load 20-60) a server
    # took more than 90 s to answer, and the hub gave up on a spawn that would have succeeded
    c.Spawner.start_timeout = 300
    c.Spawner.http_timeout = 240
    c.LearnerCourse.python = str(learner_python())
    c.LearnerCourse.course = str(s.course)
    c.LearnerCourse.shared_cache = str(s.shared_cache)
    c.LearnerCourse.threads = s.threads
    c.LearnerCourse.fast = s.fast
    c.LearnerCourse.cull_kernels_s = s.cull_kernels_s


def configure_services(c, s: HubSettings) -> None:
    python = sys.executable
    services = [
        {"name": "idle-culler", "display": False,
         "command": [python, "-m", "jupyterhub_idle_culler", f"--timeout={s.cull_idle_s}"]},
        {"name": "class-view", "url": f"http://127.0.0.1:{random_port()}", "oauth_no_confirm": True,
         "command": [python, "-m", "labkit.hub.class_view"],
         "environment": {"LABKIT_HUB_PUBLIC_URL": f"http://127.0.0.1:{s.port}", "LABKIT_HUB_COURSE": str(s.course)}},
    ]
    roles = [{"name": "idle-culler", "scopes": CULLER_SCOPES, "services": ["idle-culler"]},
             {"name": "class-view", "scopes": CLASS_VIEW_SCOPES, "services": ["class-view"]}]
    if s.admin_token:
        services.append({"name": "labkit-admin", "api_token": s.admin_token, "display": False})
        roles.append({"name": "labkit-admin", "scopes": ADMIN_SCOPES, "services": ["labkit-admin"]})
    c.JupyterHub.services = services
    c.JupyterHub.load_roles = roles
