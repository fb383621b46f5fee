"""``scripts/mutation_stats.py``: mutmut's test map and its non-killed verdicts are forgotten exactly when the
``[tool.mutmut]`` settings change (a stale map lets mutants survive falsely)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutation_stats.py"


def load():
    spec = importlib.util.spec_from_file_location("mutation_stats", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project(root: Path, only_mutate: str) -> None:
    (root / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[tool.mutmut]\nonly_mutate = [{only_mutate}]\n\n'
                                         '[tool.other]\nkey = 1\n')


def test_a_changed_mutated_set_forgets_the_map_and_every_verdict_but_killed(tmp_path):
    stats = load()
    project(tmp_path, '"a.py"')
    assert stats.forget_if_changed(tmp_path) == []                 # no mutants/ yet: nothing to forget
    (tmp_path / "mutants" / "pkg").mkdir(parents=True)
    meta = tmp_path / "mutants" / "pkg" / "a.py.meta"
    codes = {"m1": 1, "m2": 0, "m3": 33, "m4": None, "m5": 36, "m6": -9}
    meta.write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": {}}))
    (tmp_path / "mutants" / "mutmut-stats.json").write_text("{}")
    first = stats.forget_if_changed(tmp_path)                      # no record of the last settings: forget
    assert len(first) == 2 and not (tmp_path / "mutants" / "mutmut-stats.json").exists()
    assert json.loads(meta.read_text())["exit_code_by_key"] == {"m1": 1, "m2": None, "m3": None, "m4": None,
                                                                "m5": 36, "m6": None}
    (tmp_path / "mutants" / "mutmut-stats.json").write_text("{}")
    meta.write_text(json.dumps({"exit_code_by_key": {"m1": 1, "m2": 0}}))
    assert stats.forget_if_changed(tmp_path) == []                 # the same settings: keep all
    assert (tmp_path / "mutants" / "mutmut-stats.json").exists()
    project(tmp_path, '"a.py", "b.py"')
    assert len(stats.forget_if_changed(tmp_path)) == 2              # a module added: forget again
    assert json.loads(meta.read_text())["exit_code_by_key"] == {"m1": 1, "m2": None}


def test_the_settings_are_the_mutmut_section_alone(tmp_path):
    stats = load()
    project(tmp_path, '"a.py"')
    before = stats.settings(tmp_path)
    assert before == 'only_mutate = ["a.py"]'
    text = (tmp_path / "pyproject.toml").read_text().replace("key = 1", "key = 2")
    (tmp_path / "pyproject.toml").write_text(text)
    assert stats.settings(tmp_path) == before                      # another tool's section changed: no matter
