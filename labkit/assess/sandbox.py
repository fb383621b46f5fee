"""Run a learner's code on hidden cases in a child process, with a time limit.

Why a forked child: a notebook kernel must survive whatever the learner wrote. An endless loop is
stopped by killing the child after ``time_limit_s``; an exception, ``exit()`` or a crash ends only
the child. Fork (not spawn) because the learner's function usually lives in a notebook cell: the
child inherits it, its globals and the cell's source in ``linecache`` without any pickling, and
starting takes milliseconds. Only results travel back, pickled through a pipe, one per case, so
when time runs out the parent knows which case was running.

    parent ──fork──► child: for each case: value = case(target) ──pipe──► parent
      └── waits at most time_limit_s in total, then kills the child

Where fork is unavailable (Windows) the cases run in the kernel itself, with no time limit, and
``RunReport.isolated`` is False. The child never touches CUDA; torch is set to one thread there
because a forked OpenMP pool can deadlock.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import pickle
import sys
import sysconfig
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

_ASSESS_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (p := sysconfig.get_paths().get(key))}))
_MAX_TEXT = 2000


@dataclass(frozen=True)
class ErrorInfo:
    """An exception in the learner's code, located at the learner's own line."""

    type_name: str
    message: str
    lineno: int | None = None
    line: str | None = None
    function: str | None = None
    during: str | None = None          # the call the checker was making, e.g. "free(4)"

    def summary(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name


@dataclass(frozen=True)
class Unpicklable:
    """Stands in for a returned value that could not be sent back from the child."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Outcome:
    """What one case produced: a value or an error, plus anything the learner printed."""

    value: Any = None
    error: ErrorInfo | None = None
    stdout: str = ""


@dataclass(frozen=True)
class RunReport:
    """Outcomes of the cases that finished, in order, and why the rest did not."""

    outcomes: tuple[Outcome, ...]
    num_cases: int
    timed_out: bool = False            # the case at index len(outcomes) was running when stopped
    exit_code: int | None = None       # set when the child died without reporting every case
    elapsed_s: float = 0.0
    isolated: bool = True


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_ASSESS_DIR) or any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS)


def describe_error(exc: BaseException) -> ErrorInfo:
    """The exception with the deepest frame of the learner's code (not the checker's, not stdlib)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not _is_library(f.filename)]
    frame = own[-1] if own else None
    return ErrorInfo(type_name=type(exc).__name__, message=str(exc)[:300],
                     lineno=frame.lineno if frame else None,
                     line=(frame.line or None) if frame else None,
                     function=frame.name if frame else None,
                     during=getattr(exc, "labkit_during", None))


def _run_one(case: Callable[[Any], Any], target: Any) -> Outcome:
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            value = case(target)
        return Outcome(value=value, stdout=printed.getvalue()[-_MAX_TEXT:])
    except BaseException as exc:  # SystemExit too: exit() in learner code is reported, not obeyed
        return Outcome(error=describe_error(exc), stdout=printed.getvalue()[-_MAX_TEXT:])


def _sendable(outcome: Outcome) -> Outcome:
    try:
        pickle.dumps(outcome)
        return outcome
    except Exception:
        stand_in = Unpicklable(repr(outcome.value)[:300])
        return Outcome(value=stand_in, error=outcome.error, stdout=outcome.stdout)


def _child(conn, target: Any, cases: Sequence[Callable[[Any], Any]]) -> None:
    sys.stdout = sys.stderr = io.StringIO()    # never write to the kernel's streams from a fork
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    for case in cases:
        conn.send(_sendable(_run_one(case, target)))
    conn.close()


def _run_in_process(target, cases, start: float) -> RunReport:
    outcomes = tuple(_run_one(case, target) for case in cases)
    return RunReport(outcomes, len(cases), elapsed_s=time.monotonic() - start, isolated=False)


def _collect(conn, num_cases: int, deadline: float) -> tuple[list[Outcome], bool]:
    outcomes: list[Outcome] = []
    while len(outcomes) < num_cases:
        left = deadline - time.monotonic()
        if left <= 0 or not conn.poll(left):
            return outcomes, True
        try:
            outcomes.append(conn.recv())
        except EOFError:                        # the child died: exit code tells how
            break
    return outcomes, False


def run_cases(target: Any, cases: Sequence[Callable[[Any], Any]], time_limit_s: float = 5.0) -> RunReport:
    """Call ``case(target)`` for every case in a forked child; stop everything after ``time_limit_s``."""
    start = time.monotonic()
    if "fork" not in mp.get_all_start_methods():
        return _run_in_process(target, cases, start)
    ctx = mp.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender, target, cases), daemon=True)
    child.start()
    sender.close()
    try:
        outcomes, timed_out = _collect(receiver, len(cases), start + time_limit_s)
    finally:                                    # also on KeyboardInterrupt: never leave the child
        if child.is_alive():
            child.kill()
        child.join(2)
        receiver.close()
    died = not timed_out and len(outcomes) < len(cases)
    return RunReport(tuple(outcomes), len(cases), timed_out,
                     child.exitcode if died else None, time.monotonic() - start)
