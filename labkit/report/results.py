"""A lab's results summary: the learner's lab report, one JSON file per lab in their workspace.

Every verdict a lab prints (``labkit.labs.common.measure``), every prediction the learner made beside
the value then measured, first-attempt quiz answers and exercise results are recorded here, so a
later lab can read an earlier lab's numbers instead of measuring them again, and
``labkit.assess.progress()`` can show what a learner has done. Nothing is sent anywhere.

Where: ``results/labNN.json`` under the current folder (a notebook's folder in ``work/``), or under
``LABKIT_RESULTS`` when set. The schema (also in ``labs/README.md``)::

    {
      "schema": "labkit-results/1",
      "lab": "04",
      "updated": "2026-12-01T20:00:00+00:00",
      "machine": {"cpu": "...", "cores": 2, "torch": "2.13.0+cpu"},
      "verdicts":    {id: {claim, direction, confidence, ratio, ratio_min, ratio_max, clock, load, cpu, ...}},
      "predictions": {id: {question, kind, guess, measured, unit, judgement, ...}},
      "quiz":        {question id: {first_attempt_correct, attempts}},
      "exercises":   {name: {passed, attempts}}
    }

Each section maps an id to a small JSON object; recording an id again replaces its entry (the
latest run of a cell is the one the report shows). Writes are atomic (a temporary file renamed
over the old one), so a kernel interrupted mid-write never leaves a half-written report.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = "labkit-results/1"
SECTIONS = ("verdicts", "predictions", "quiz", "exercises")
_LAB_ID = re.compile(r"^[0-9]{2}$")


def results_dir() -> Path:
    """``LABKIT_RESULTS`` if set, else ``./results`` (the learner's workspace)."""
    configured = os.environ.get("LABKIT_RESULTS", "").strip()
    return Path(configured) if configured else Path.cwd() / "results"


def summary_path(lab: str) -> Path:
    return results_dir() / f"lab{_check_lab(lab)}.json"


def _check_lab(lab: str) -> str:
    lab = str(lab)
    if not _LAB_ID.match(lab):
        raise ValueError(f"lab must be a two-digit lab number such as '04', got {lab!r}")
    return lab


def _machine() -> dict[str, Any]:
    import torch

    from labkit.kernels.cpu_features import describe_cpu

    return {"cpu": describe_cpu(), "cores": os.cpu_count() or 1, "torch": torch.__version__}


def _empty(lab: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "lab": lab, "updated": None, "machine": None, **{s: {} for s in SECTIONS}}


def read_summary(lab: str, path: Path | None = None) -> dict[str, Any] | None:
    """The summary of ``lab`` as saved, or None when there is none (or it is not a labkit summary:
    a damaged file is reported as missing rather than trusted)."""
    path = path or summary_path(lab)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    for section in SECTIONS:
        if not isinstance(data.get(section), dict):
            data[section] = {}
    return data


def record(lab: str, section: str, key: str, entry: dict[str, Any]) -> Path | None:
    """Store ``entry`` (JSON-serialisable) under ``section[key]`` of lab ``lab``'s summary.

    Returns the file written, or None when the workspace cannot be written (a read-only folder must
    not stop a lab: the lab still prints its results, they are just not saved)."""
    lab = _check_lab(lab)
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    if not isinstance(key, str) or not key:
        raise ValueError(f"key must be a non-empty string, got {key!r}")
    path = summary_path(lab)
    data = read_summary(lab, path) or _empty(lab)
    data[section][key] = finite(json.loads(json.dumps(entry, default=_jsonable)))   # a plain JSON copy
    data["updated"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    data["machine"] = _machine()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1, allow_nan=False)
        os.replace(tmp, path)
    except (OSError, ValueError):
        return None
    return path


def finite(value: Any) -> Any:
    """NaN and infinities become None: they are not JSON, and an undefined ratio is "none"."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    """Dataclasses, tuples of numbers, numpy scalars and the like, as plain JSON values."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "item"):          # numpy / torch scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)
