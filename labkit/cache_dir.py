"""Where labkit keeps what it builds once per machine: converted models, GGUF block files, the timed
fp32 product forms, the C kernels. A top-level module so that the kernels (``labkit.kernels``) and the
model (``labkit.model``) both reach it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$LABKIT_CACHE`` or the user cache directory (``$XDG_CACHE_HOME/labkit``)."""
    env = os.environ.get("LABKIT_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "labkit"


SHARED_ENV = "LABKIT_SHARED_CACHE"


def shared_root() -> Path | None:
    """``$LABKIT_SHARED_CACHE``: a class's read-only cache prepared once by the hub's set-up
    (``labkit.model.shared_cache``), or None when it is not set."""
    value = os.environ.get(SHARED_ENV, "").strip()
    return Path(value).expanduser() if value else None
