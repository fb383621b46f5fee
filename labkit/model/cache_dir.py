"""Where labkit keeps what it builds once per machine: converted models, GGUF block files, the timed
fp32 product forms. A module of its own so that every part below the loader can reach it."""

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
