"""The Python a learner's server runs on: this environment's packages, through an interpreter every user may run.

The hub runs as root from this checkout's environment; a learner's server runs as the learner, so the
interpreter and its standard library must be readable by everyone. A virtual environment made from a
Python inside a private directory (pyenv under ``/root``, mode 0700) is not. Then `learner_python`
builds, once, a thin environment beside it from a Python every user can run, of the same version
(CPython keeps its binary interface within a minor version, so compiled packages load)::

    build/hub/learner-python/
        bin/python -> /usr/bin/python3.11
        lib/python3.11/site-packages/labkit-hub.pth     adds this environment's site-packages
        share -> <this environment>/share                JupyterLab's assets, kernels, lab extensions
        etc   -> <this environment>/etc                  the server extensions it enables
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from labkit.hub.settings import REPO

LEARNER_ENV = REPO / "build" / "hub" / "learner-python"


def readable_by_all(path: Path) -> bool:
    """Every directory above ``path`` lets others through, and others may read ``path`` (enter it, for a
    directory; run it, for a program)."""
    path = path.resolve()
    if not path.exists() or any(not d.stat().st_mode & stat.S_IXOTH for d in path.parents):
        return False
    mode = path.stat().st_mode
    runs = path.is_dir() or mode & (stat.S_IXUSR | stat.S_IXGRP)
    need = stat.S_IROTH | (stat.S_IXOTH if runs else 0)
    return mode & need == need


def usable(python: Path) -> bool:
    """``python`` and the standard library it loads are open to every user."""
    stdlib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
                            capture_output=True, text=True)
    return (stdlib.returncode == 0 and readable_by_all(python)
            and readable_by_all(Path(stdlib.stdout.strip())))


def same_version_pythons() -> list[Path]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [Path(d) / version for d in ("/usr/bin", "/usr/local/bin", "/opt/conda/bin")]
    if (on_path := shutil.which(version)) is not None:
        found.append(Path(on_path))
    return [p for p in found if p.is_file()]


def _pth(python: Path) -> Path:
    """The .pth file in ``python``'s environment that adds this environment's packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return python.parent.parent / "lib" / version / "site-packages" / "labkit-hub.pth"


def learner_python(where: Path = LEARNER_ENV) -> Path:
    """The interpreter learners' servers run: ``sys.executable`` when every user may run it, else a thin
    environment at ``where`` (built now if needed). RuntimeError, saying what to do, when there is none."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    if not readable_by_all(site_packages):
        raise RuntimeError(f"learners cannot read this environment's packages ({site_packages}): put the "
                           "checkout and its .venv where every user can read them")
    if usable(Path(sys.executable)):
        return Path(sys.executable)
    python, pth = where / "bin" / "python", f"import site; site.addsitedir({str(site_packages)!r})\n"
    if python.exists() and usable(python) and _pth(python).is_file() and _pth(python).read_text() == pth:
        return python
    base = next((p for p in same_version_pythons() if usable(p)), None)
    if base is None:
        raise RuntimeError(f"learners cannot run {Path(sys.executable).resolve()} (a directory above it is private) "
                           f"and there is no python{sys.version_info.major}.{sys.version_info.minor} every user "
                           "can run: make the hub's environment from one (make hub PYTHON=/usr/bin/python3 VENV=...)")
    if where.exists():
        shutil.rmtree(where)
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(where)], check=True)
    _pth(python).write_text(pth)
    for shared in ("share", "etc"):
        target = Path(sys.prefix) / shared
        if target.is_dir():
            shutil.rmtree(where / shared, ignore_errors=True)      # venv may have made an empty one
            (where / shared).symlink_to(target)
    return python
