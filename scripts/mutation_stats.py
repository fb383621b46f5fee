"""Forget mutmut's test map, and the verdicts it gave, when the set of mutated modules or test files changed.

    .venv/bin/python scripts/mutation_stats.py        (``make mutation`` runs it before ``mutmut run``)

mutmut (3.8.1) maps each mutated function to the tests that call it (``mutants/mutmut-stats.json``) and runs
only those tests against the function's mutants. It re-traces only tests it has not seen: a module newly
added to ``only_mutate`` keeps a map from runs that did not trace it, so its mutants get too few tests (or
none) and "survive" falsely. Seen here: ``scheduler_output.py``, added to the list, had 42 mutants with no
tests and 31 survivors on the old map; on a map traced again, the existing tests killed most of them. So
when the ``[tool.mutmut]`` settings (``only_mutate``, the test selection) differ from the last run's, this
deletes the map (mutmut traces every test again) and clears every verdict but "killed" (a mutant a test
killed stays killed with more tests; one that survived or had no tests must be checked again).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

KILLED = {1, 3, 36, 24, -24, 152, 255}      # as scripts/mutation_report.py counts them


def settings(root: Path) -> str:
    """The ``[tool.mutmut]`` section of pyproject.toml, as text (Python 3.10 has no TOML reader)."""
    text = (root / "pyproject.toml").read_text()
    found = re.search(r"^\[tool\.mutmut\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    return found.group(1).strip() if found else ""


def forget_if_changed(root: Path = Path(".")) -> list[str]:
    """What it did, one line each (nothing when the settings are those of the last run)."""
    mutants, now = root / "mutants", settings(root)
    mark = mutants / "labkit-mutated-set.json"
    if not mutants.is_dir():
        return []                           # a first run traces everything anyway
    if mark.exists() and mark.read_text() == now:
        return []
    done = []
    stats = mutants / "mutmut-stats.json"
    if stats.exists():
        stats.unlink()
        done.append(f"deleted {stats} (the mutated modules or the test selection changed)")
    cleared = 0
    for meta in mutants.rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        for name, code in codes.items():
            if code is not None and code not in KILLED:
                codes[name] = None
                cleared += 1
        meta.write_text(json.dumps(data, indent=4))
    if cleared:
        done.append(f"cleared {cleared} verdicts other than killed: they will be checked again")
    mark.write_text(now)
    return done


if __name__ == "__main__":
    for line in forget_if_changed():
        print(line)
