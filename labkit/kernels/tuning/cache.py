"""The disk cache of every tuning choice: one JSON file, ``$LABKIT_CACHE/linear_forms.json``, read over a
class's shared copy, and one helper, `cached_or_probe`, that every probe goes through::

    read ── a valid value that stands? ── yes ──> use it
                     │ no
                     probe() ── read again ── merge with what stands there ── store ──> use it
                                (another process may have written meanwhile)     (provisional if busy)

A choice timed while other work loaded the machine may be the load's, not the CPU's: it is used, marked
provisional, and timed again by the first process that finds the machine quiet (a bf16 choice timed beside
a CI run once picked PyTorch's form and kept it; on the quiet machine the C kernel was 1.4x faster).
Held by tests/kernels/test_linear_forms.py::test_a_choice_timed_while_busy_is_timed_again_once_the_machine_is_quiet.

A key names what was chosen and everything the choice depends on (`machine_key`, `kernel_key`); a change
to a form, a gate or what is stored bumps `VERSION`, so old entries are simply probed again.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from labkit.cache_dir import cache_root, shared_root
from labkit.kernels import native
from labkit.kernels.cpu_features import describe_cpu

VERSION = 7                              # part of `machine_key`: bump when a form, a gate or an entry changes
PROVISIONAL = " | timed while busy"      # key + this -> True: the value under key was timed while busy
_lock = threading.RLock()                # one probe at a time in a process: probes time the same cores
T = TypeVar("T")


def cache_path() -> Path:
    return cache_root() / "linear_forms.json"


def machine_key(threads: int, subject: str) -> str:
    """The key of a choice about ``subject`` ("float32", "bfloat16", ...) on this CPU, torch version and
    thread count, with or without labkit's C kernel (and its instruction-set level: ``LABKIT_ISA``)."""
    kernel = f"C kernel {native.isa_level()}" if native.available() else "no C kernel"
    # oneDNN (PyTorch's bf16 matmuls) capped below the CPU's own level (a forced level's benchmark) times otherwise
    onednn = (f"oneDNN max {os.environ['ONEDNN_MAX_CPU_ISA']}",) if os.environ.get("ONEDNN_MAX_CPU_ISA") else ()
    return " | ".join((describe_cpu(), f"torch {torch.__version__}", f"{threads} thread(s)", subject, kernel,
                       *onednn, f"forms v{VERSION}"))


def kernel_key(subject: str) -> str:
    """The key of a choice about labkit's C kernel alone on this CPU: its build version counts, not torch's
    or the thread count."""
    return " | ".join((describe_cpu(), f"C kernel v{native.VERSION} {native.isa_level()}", subject))


def read() -> dict:
    """The choices on disk: a class's shared cache (timed once by the hub's set-up, read-only), with this
    user's own over it (tests/model/test_shared_cache.py::test_the_shared_timings_are_read_under_the_learners_own)."""
    shared = shared_root()
    data: dict = {}
    for path in ([shared / cache_path().name] if shared is not None else []) + [cache_path()]:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            data.update(found)
    return data


def write(data: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass    # a read-only cache only costs a probe next time


def is_busy() -> bool:
    """Whether other work loads the machine: the 1-minute load average at or above the number of cores,
    i.e. besides this timing at least cores - 1 busy."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return False


def timed_while_busy(subject: str, threads: int) -> bool:
    """Whether the choice about ``subject`` at ``threads`` was timed while the machine was busy (provisional)."""
    return bool(read().get(machine_key(threads, subject) + PROVISIONAL))


def _stands(data: dict, key: str) -> bool:
    """Whether the value under ``key`` stands: not timed while busy, or the machine is busy still."""
    return not data.get(key + PROVISIONAL) or is_busy()


def cached_or_probe(key: str, probe: Callable[[], T], valid: Callable[[Any], bool], *,
                    merge: Callable[[Any, T], T] | None = None, timed: bool = True) -> T:
    """The value stored under ``key`` where ``valid(value)`` and it stands; else ``probe()``'s, stored and
    returned. ``merge(standing value or None, probed)`` makes what is stored where one key collects the
    results of several probes; ``timed=False`` marks a check of bits rather than of speed, never provisional."""
    with _lock:
        data = read()
        if valid(data.get(key)) and _stands(data, key):
            return data[key]
        busy = timed and is_busy()
        value = probe()
        data = read()
        if merge is not None:
            value = merge(data.get(key) if _stands(data, key) else None, value)
        data[key] = value
        if busy:
            data[key + PROVISIONAL] = True
        else:
            data.pop(key + PROVISIONAL, None)
        write(data)
        return value
