"""The learner's machine: how much memory it could give a KV cache (GPU memory, else RAM), how
busy it is, and timing on one thread.

No extra package: ``torch.cuda.mem_get_info`` for a GPU, ``/proc/meminfo`` on Linux, else
``os.sysconf`` (Linux, macOS). If none answers, ``memory_budget()`` returns None and the lab says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemoryBudget:
    device: str            # "GPU" or "RAM"
    name: str              # e.g. "NVIDIA H100 80GB HBM3" or "this machine's RAM"
    total_bytes: int
    available_bytes: int | None
    source: str            # where the numbers were read


def gpu_budget() -> MemoryBudget | None:
    try:
        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return MemoryBudget("GPU", torch.cuda.get_device_name(), int(total), int(free), "torch.cuda.mem_get_info")
    except Exception:      # a broken driver must not stop the lab
        return None


def meminfo_budget(path: str = "/proc/meminfo") -> MemoryBudget | None:
    """RAM from /proc/meminfo (kB lines: MemTotal, MemAvailable)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.strip()}
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in fields:
        return None
    return MemoryBudget("RAM", "RAM", fields["MemTotal"], fields.get("MemAvailable"), path)


def sysconf_budget() -> MemoryBudget | None:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return MemoryBudget("RAM", "RAM", int(total), None, "os.sysconf") if total > 0 else None


def memory_budget() -> MemoryBudget | None:
    """The first that answers: the GPU, /proc/meminfo, os.sysconf; None if nothing does."""
    return gpu_budget() or meminfo_budget() or sysconf_budget()


def cpu_load() -> tuple[float, int] | None:
    """(1-minute load average, CPU count): a load above the CPU count means other programs compete
    with the lab for the CPU, and measured times come out larger and noisier. None where unknown."""
    try:
        return os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None


FAST_SWITCH = "%env LABKIT_FAST=1"   # the one line that switches a lab to fast mode (then restart and run all)


def load_note(load: tuple[float, int] | None = None, fast: bool | None = None) -> str:
    """One line for the top of a lab: the machine's load, and when it is above the cores a warning
    that recommends fast mode (unless already on) with the one line that switches to it."""
    from labkit.i18n import t
    from labkit.labs.common.display import FAST

    load = cpu_load() if load is None else load
    if load is None:
        return ""
    avg, cores = load
    note = t(f"这台机器现在的负载：{avg:.1f}（{cores} 个 CPU 核）", f"Load on this machine: {avg:.1f} ({cores} CPUs)")
    if avg > cores:
        note += t("。负载高于核数：别的程序在抢 CPU，测出的时间会偏大、偏乱，结论会标成“机器正忙”。",
                  ". Above the CPU count: other programs compete for the CPU; measured times come out "
                  "larger and noisier, and conclusions are marked \"machine busy\".")
        if not (FAST if fast is None else fast):
            note += t(f"建议关掉别的程序，或改用快速模式：在第一个单元格最上面加一行 {FAST_SWITCH}，然后“重启内核并运行全部”。",
                      f" Close other programs, or switch to fast mode: add the line {FAST_SWITCH} at the top of the "
                      "first cell, then restart the kernel and run all.")
    return note


def convert_model_once() -> float | None:
    """Convert the default model now if this machine never has, saying so before it starts (the
    conversion shows a progress bar). Returns the seconds it took, or None when there was nothing to do
    (converted before, a class's shared copy, or not installed: ``LLM()`` then says how to install it)."""
    import time

    from labkit.i18n import t
    from labkit.labs.welcome import LabTimings, minutes
    from labkit.model.loader import converted_default_model, ensure_default_converted

    try:
        if converted_default_model() is not None:
            return None
    except FileNotFoundError:
        return None
    timings = LabTimings.load_file()
    took = (t(f"，实测{minutes(timings.convert_s)}", f"; measured: {minutes(timings.convert_s)}")
            if timings and timings.convert_s else "")
    print(t(f"首次运行：正在把模型（SmolLM2-135M-Instruct）转换一次（只做这一次{took}），之后各实验直接使用……",
            f"First run: converting the model (SmolLM2-135M-Instruct) once (only this once{took}); every lab "
            "reuses it…"), flush=True)
    start = time.perf_counter()
    ensure_default_converted(progress=True)
    return time.perf_counter() - start


def lab_start(lab: str | None = None) -> str:
    """The first cell of every lab: the model converted if this is the first run (saying so while it
    converts), this lab's measured Run All time, torch on ``LABKIT_THREADS`` threads (default 1) for the
    whole kernel (on a shared or busy machine torch's own threads fight other programs for the
    cores: we measured engine steps 10–25× slower), and the load note. ``lab`` is the lab's number."""
    from labkit.i18n import t
    from labkit.labs.common.measure import measure_threads
    from labkit.labs.welcome import first_cell_note

    first = first_cell_note(lab, convert_model_once())
    threads = measure_threads()
    torch.set_num_threads(threads)
    note = t(f"torch 和 labkit 的 C 内核都用 {threads} 个线程计算（LABKIT_THREADS 可改）；对比计时用 CPU 时间"
             "（GPU 上用同步后的墙钟时间）。你自己的脚本默认用全部核心，labkit 的 C 内核也随之用上全部核心；"
             "换几个线程，C 内核算出的每一位都一样。",
             f"torch and labkit's C kernels compute on {threads} thread(s) (LABKIT_THREADS changes it); comparisons "
             "are timed in CPU time (on a GPU: wall time after synchronize). Your own script uses every core by "
             "default, and labkit's C kernels then use every core too; they give the same bits at any thread count.")
    return "\n".join(part for part in (first, note, load_note()) if part)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (restored afterwards, also after an error): the
    machine is shared, and torch's threads would fight other programs for its cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
