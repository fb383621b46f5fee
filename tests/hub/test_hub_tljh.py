"""docs/hub.md's TLJH page, against The Littlest JupyterHub's own code, as far as a machine without systemd goes.

TLJH is not on PyPI (its installer pip-installs it from GitHub) and needs systemd, so ``make test`` skips
this file: `tljh` and `systemdspawner` are not labkit's dependencies. To run it, in an environment that sees
labkit's packages plus TLJH's (a sketch; the throwaway environment keeps them out of ``.venv``)::

    .venv/bin/python -m venv --without-pip /tmp/tljh-env
    echo "import site; site.addsitedir('$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")')" \\
        > /tmp/tljh-env/lib/python3.11/site-packages/zz-labkit.pth
    .venv/bin/python -m pip install --no-deps --target /tmp/tljh-env/lib/python3.11/site-packages \\
        git+https://github.com/jupyterhub/the-littlest-jupyterhub "jupyterhub-systemdspawner==1.0.2" \\
        "jupyterhub-traefik-proxy==2.*" "ruamel.yaml==0.18.*" ruamel.yaml.clib backoff escapism passlib
    /tmp/tljh-env/bin/python -m pytest tests/hub/test_hub_tljh.py -p no:cacheprovider

(On the development machine GitHub is out of reach: TLJH was installed from a snapshot of its repository,
commit 84ed38f of 2026-04-01, and both tests passed.)

What runs: TLJH's own ``jupyterhub_config.py`` (its ``config.yaml`` with limits and the culler's timeout, its
plugins, then ``jupyterhub_config.d/labkit.py``: the page's snippet), and the spawner that config picks
(TLJH's UserCreatingSpawner, a SystemdSpawner) starting a learner's server up to the ``systemd-run`` line it
would run, with the machine's user creation and systemd replaced by records. What does not run: systemd
itself, TLJH's installer, its users' conda environment, and the learner's server in that unit.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pwd
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

tljh = pytest.importorskip("tljh", reason="TLJH is not installed here (not on PyPI; see this file's docstring)")
systemdspawner = pytest.importorskip("systemdspawner")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tljh_config(tmp_path, monkeypatch):
    """TLJH's JupyterHub config, loaded as its hub loads it, from an install prefix in ``tmp_path`` whose
    ``config.yaml`` sets the limits and culler docs/hub.md names, and whose jupyterhub_config.d holds the
    page's snippet."""
    from traitlets.config.loader import PyFileConfigLoader

    prefix = tmp_path / "tljh"
    (prefix / "config" / "jupyterhub_config.d").mkdir(parents=True)
    (prefix / "config" / "config.yaml").write_text("limits:\n  memory: 2G\n  cpu: 1\nservices:\n  cull:\n"
                                                   "    timeout: 3600\n")
    page = (REPO / "docs" / "hub.md").read_text(encoding="utf-8").split("## On an existing TLJH", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", page, re.DOTALL).group(1)
    (prefix / "config" / "jupyterhub_config.d" / "labkit.py").write_text(textwrap.dedent(snippet))
    monkeypatch.setenv("TLJH_INSTALL_PREFIX", str(prefix))
    import tljh.config
    import tljh.configurer

    importlib.reload(tljh.config)                 # its paths are read from the environment at import
    importlib.reload(tljh.configurer)
    where = Path(tljh.__file__).parent
    return PyFileConfigLoader("jupyterhub_config.py", str(where)).load_config()


def test_tljhs_config_keeps_the_labkit_snippets_server_command_environment_and_kernel_culling(tljh_config):
    c = tljh_config
    assert c.JupyterHub.spawner_class.__name__ == "UserCreatingSpawner"
    assert c.Spawner.cmd == ["/opt/tljh/user/bin/python", "-m", "labkit.hub.learner_server"]
    assert c.Spawner.default_url == "/lab/tree/work"               # the snippet is loaded after TLJH's own
    assert c.Spawner.environment["LABKIT_SHARED_CACHE"] == "/srv/labkit/shared"
    assert (c.Spawner.mem_limit, c.Spawner.cpu_limit) == ("2G", 1)
    assert any("--timeout=3600" in s.get("command", []) for s in c.JupyterHub.services)
    assert "--MappingKernelManager.cull_idle_timeout=1200" in c.Spawner.args


def test_a_learners_systemd_unit_gets_labkits_command_its_environment_and_the_limits(tljh_config, tmp_path,
                                                                                      monkeypatch):
    """The spawner TLJH configures, started for learner ann: the ``systemd-run`` line it would run, and the
    unit's environment file, hold labkit's server command and culling flags, LABKIT_* and the limits."""
    import tljh.user
    from systemdspawner import systemd

    ran, state = [], {"running": iter([False])}
    for name in ("ensure_user", "ensure_user_group", "remove_user_group"):
        monkeypatch.setattr(tljh.user, name, lambda *args: None)

    async def service_running(unit):
        return next(state["running"], True)

    async def service_failed(unit):
        return False

    async def run(*command):
        ran.append(list(command))
        return SimpleNamespace(wait=lambda: asyncio.sleep(0, 0))

    monkeypatch.setattr(systemd, "service_running", service_running)
    monkeypatch.setattr(systemd, "service_failed", service_failed)
    monkeypatch.setattr(systemd, "RUN_ROOT", str(tmp_path / "run"))
    monkeypatch.setattr(systemd.asyncio, "create_subprocess_exec", run)
    me = pwd.getpwuid(os.getuid())
    home = tmp_path / "home" / "jupyter-ann"
    home.mkdir(parents=True)
    account = pwd.struct_passwd(("jupyter-ann", "x", me.pw_uid, me.pw_gid, "", str(home), "/bin/bash"))
    monkeypatch.setattr(systemdspawner.systemdspawner.pwd, "getpwnam", lambda name: account)
    user = SimpleNamespace(name="ann", escaped_name="ann", admin=False, url="/user/ann/", id=1, spawners={},
                           settings={}, base_url="/")
    hub = SimpleNamespace(api_url="http://127.0.0.1:15001/hub/api", base_url="/hub/", url="http://127.0.0.1:15001/hub/",
                          public_host="")
    spawner = tljh_config.JupyterHub.spawner_class(config=tljh_config, user=user, hub=hub, api_token="t0ken",
                                                   oauth_client_id="jupyterhub-user-ann")
    assert asyncio.run(spawner.start())[1] == spawner.port
    (command,) = ran
    cut = command.index("/opt/tljh/user/bin/python")
    assert command[cut:cut + 3] == ["/opt/tljh/user/bin/python", "-m", "labkit.hub.learner_server"]
    assert {"--MappingKernelManager.cull_idle_timeout=1200", "--MappingKernelManager.cull_connected=True"} <= set(
        command[cut:])
    assert {f"--property=MemoryMax={2 * 2**30}", "--property=CPUQuota=100%", f"--uid={me.pw_uid}"} <= set(command)
    env_file = next(c.split("=", 2)[2] for c in command if c.startswith("--property=EnvironmentFile="))
    env = dict(line.split("=", 1) for line in Path(env_file).read_text().splitlines() if line)
    assert {k: env[k] for k in ("LABKIT_COURSE", "LABKIT_SHARED_CACHE", "LABKIT_THREADS", "OMP_NUM_THREADS")} == {
        "LABKIT_COURSE": "/srv/labkit/repo/labs", "LABKIT_SHARED_CACHE": "/srv/labkit/shared",
        "LABKIT_THREADS": "1", "OMP_NUM_THREADS": "1"}
    assert env["PATH"].startswith(str(tmp_path / "tljh" / "user" / "bin"))     # TLJH's users' environment first
