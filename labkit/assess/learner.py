"""A stable, anonymous id for this learner, so a quiz shuffles the same way after every reload.

``LABKIT_LEARNER_ID`` wins (a classroom can set it per student); otherwise a random id is kept in
``~/.cache/labkit/learner_id`` (created on first use). Where that file cannot be written (a
read-only home), the id is derived from the user and host names: still stable, just not random.
Nothing leaves the machine; the id only seeds ``random.Random``.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import platform
import uuid
from pathlib import Path

_CACHED: dict[str, str] = {}


def _id_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "labkit" / "learner_id"


def _from_file(path: Path) -> str | None:
    try:
        text = path.read_text().strip() if path.exists() else ""
        if not text:
            path.parent.mkdir(parents=True, exist_ok=True)
            text = uuid.uuid4().hex
            path.write_text(text + "\n")
        return text
    except OSError:
        return None


def _fallback() -> str:
    try:
        user = getpass.getuser()
    except Exception:                      # no user name in some containers
        user = "learner"
    return hashlib.sha256(f"{user}@{platform.node()}".encode()).hexdigest()[:32]


def learner_id() -> str:
    """``LABKIT_LEARNER_ID``, else the id kept in the cache folder, else one from user@host."""
    configured = os.environ.get("LABKIT_LEARNER_ID", "").strip()
    if configured:
        return configured
    path = _id_file()
    key = str(path)
    if key not in _CACHED:
        _CACHED[key] = _from_file(path) or _fallback()
    return _CACHED[key]
