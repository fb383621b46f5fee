"""Run a learner's code on hidden cases in a child process, with a time and a memory limit.

Why a forked child: a notebook kernel must survive whatever the learner wrote. An endless loop is
stopped by killing the child after ``time_limit_s``; an exception, ``exit()``, a crash or a memory
blow-up ends only the child. Fork (not spawn) because the learner's function usually lives in a
notebook cell: the child inherits it, its globals and the cell's source in ``linecache`` without
any pickling, and starting takes milliseconds.

What the child holds and sends: it runs ONLY the learner's code on the case inputs. No expected
value exists yet when it is forked (the exercise computes them after the child is gone), and the
reference solution is disabled in it (``reference.disable``), so walking the stack or importing
the solution finds nothing to copy. Each case's result is converted to plain data *in the child*
(``plain.to_plain``) and sent as one length-prefixed frame; the kernel reads frames with a
deadline (a half-written frame cannot block it) and unpickles them with a loader that builds only
plain types. So no learner object — its ``__eq__``, ``__reduce__`` or ``__repr__`` — runs in the
kernel, and comparing happens on plain data.

    kernel ──fork──► child: for each case: to_plain(case(target)) ──frame──► kernel
      └── reads frames until time_limit_s (in total), then kills the child's process group

Where fork is unavailable (Windows) the cases run in the kernel itself, with no time or memory
limit, and ``RunReport.isolated`` is False. The child never touches CUDA; torch is set to one
thread there because a forked OpenMP pool can deadlock.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import signal
import sys
import sysconfig
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from labkit.assess import plain, reference, wire
from labkit.assess.wire import ErrorInfo, NotPlain, Outcome

_LABKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (p := sysconfig.get_paths().get(key))}))
DEFAULT_MEMORY_LIMIT_MB = 1024           # address space the child may add to what it inherits
GROWING_SHARE = 0.5                      # stopped on time while past this share of it: "memory"


@dataclass(frozen=True)
class RunReport:
    """Outcomes of the cases that finished, in order, and why the rest did not."""

    outcomes: tuple[Outcome, ...]
    num_cases: int
    timed_out: bool = False            # the case at index len(outcomes) was running when stopped
    exit_code: int | None = None       # set when the child died without reporting every case
    elapsed_s: float = 0.0
    isolated: bool = True
    grown_mb: float | None = None      # when stopped on time: address space the child had added


def _is_library(filename: str) -> bool:
    path = os.path.abspath(filename)
    return any(path.startswith(d + os.sep) for d in (_LABKIT_DIR, *_LIBRARY_DIRS))


def describe_error(exc: BaseException) -> ErrorInfo:
    """The exception with the deepest frame of the learner's code (not labkit's, not a library's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not _is_library(f.filename)]
    frame = own[-1] if own else None
    return ErrorInfo(type_name=type(exc).__name__, message=_message(exc),
                     lineno=frame.lineno if frame else None,
                     line=(frame.line or None) if frame else None,
                     function=frame.name if frame else None,
                     during=getattr(exc, "labkit_during", None))


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:300]
    except Exception:                             # a learner's __str__ may raise too
        return "(its message could not be shown)"


# ----------------------------------------------------------------------------- the child's side

def _run_one(case: Callable[[Any], Any], target: Any) -> dict:
    """One case as a plain dict (the wire format); never raises."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            value = plain.to_plain(case(target))
        return {"value": value, "stdout": printed.getvalue()[-wire.MAX_TEXT:]}
    except plain.NotPlainError as exc:
        refused = NotPlain(exc.type_name, exc.text, exc.path, getattr(exc, "labkit_during", None))
        return {"not_plain": asdict(refused), "stdout": printed.getvalue()[-wire.MAX_TEXT:]}
    except BaseException as exc:  # SystemExit too: exit() in learner code is reported, not obeyed
        steps = getattr(exc, "labkit_steps", None)
        return {"error": asdict(describe_error(exc)), "partial": plain.to_plain(steps) if steps else None,
                "stdout": printed.getvalue()[-wire.MAX_TEXT:]}


def address_space(pid: int | str = "self") -> int | None:
    """Bytes of address space of a process (Linux ``/proc``), None where unknown."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _limit_memory(megabytes: float | None) -> None:
    """Cap the address space at what the child inherited plus ``megabytes`` (Linux only)."""
    inherited = address_space()
    if not megabytes or inherited is None:
        return
    try:
        import resource
        limit = inherited + int(megabytes * 2 ** 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))   # hard too: the learner cannot raise it
    except (ImportError, OSError, ValueError):
        pass


def _prepare_child(memory_limit_mb: float | None, forbidden: Sequence[Any]) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)                         # its own group: killing it ends its children too
    with contextlib.suppress(ValueError):         # only the main thread may set handlers
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout = sys.stderr = io.StringIO()      # never write to the kernel's streams from a fork
    builtins.input = _no_input                   # ipykernel's input() would talk to the kernel's sockets
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    for obj in forbidden:
        reference.disable(obj)
    _limit_memory(memory_limit_mb)


def _no_input(*_args):
    raise EOFError("input() is not available while your code is checked")


def _child(fd: int, target: Any, cases: Sequence[Callable[[Any], Any]],
           memory_limit_mb: float | None, forbidden: Sequence[Any]) -> None:
    out_of_memory = plain.dumps({"error": asdict(ErrorInfo("MemoryError", ""))})   # built before any limit
    _prepare_child(memory_limit_mb, forbidden)
    for case in cases:
        try:
            data = wire.encode(_run_one(case, target))
        except MemoryError:
            data = out_of_memory
        wire.write_frame(fd, data)


# ----------------------------------------------------------------------------- the kernel's side

def _exit_code(pid: int) -> int | None:
    """The child's exit code (negative: the signal) if it has exited, else None; never reaps it,
    so its pid (and group id) cannot be reused before ``_stop`` has signalled the group."""
    if not hasattr(os, "waitid"):                          # macOS: reap now, as a fallback
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _stop(pid: int) -> int | None:
    """Kill the child's group, then reap the child; its exit code if it had exited, else None."""
    try:
        code = _exit_code(pid)
    except ChildProcessError:                              # already reaped (the macOS fallback)
        return None
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        with contextlib.suppress(OSError):
            kill()                                         # also ends anything the learner's code started
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return code


def _wait_for_exit(pid: int, deadline: float) -> int | None:
    """After EOF: the child's exit code once it exits (it closed its pipe: it is on its way)."""
    while time.monotonic() < deadline:
        try:
            code = _exit_code(pid)
        except ChildProcessError:                          # reaped elsewhere (SIGCHLD ignored)
            return None
        if code is not None:
            return code
        time.sleep(0.002)
    return None


def _run_in_process(target, cases, start: float) -> RunReport:
    outcomes = tuple(wire.decode_outcome(plain.dumps(_run_one(case, target))) for case in cases)
    return RunReport(outcomes, len(cases), elapsed_s=time.monotonic() - start, isolated=False)


def run_cases(target: Any, cases: Sequence[Callable[[Any], Any]], time_limit_s: float = 5.0,
              memory_limit_mb: float | None = DEFAULT_MEMORY_LIMIT_MB, forbidden: Sequence[Any] = ()) -> RunReport:
    """Call ``case(target)`` for every case in a forked child; stop everything after ``time_limit_s``.

    ``forbidden``: objects (the reference solution) that raise ``ReferenceSolutionUsed`` in the child.
    """
    start = time.monotonic()
    if not hasattr(os, "fork"):
        return _run_in_process(target, cases, start)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the child: never return into the kernel's code
        code = 70
        try:
            os.close(read_fd)
            _child(write_fd, target, cases, memory_limit_mb, forbidden)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)                              # also here: whichever runs first wins the race
    exit_code, grown_mb, inherited = None, None, address_space()
    try:
        frames, timed_out = wire.read_frames(read_fd, len(cases), start + time_limit_s)
        if timed_out:                                     # was it looping, or still allocating?
            now = address_space(pid)
            grown_mb = (now - inherited) / 2 ** 20 if now is not None and inherited is not None else None
        if not timed_out and len(frames) < len(cases):
            exit_code = _wait_for_exit(pid, start + time_limit_s + 1.0)
    finally:                                              # also on KeyboardInterrupt: never leave the child
        stopped = _stop(pid)
        exit_code = exit_code if exit_code is not None else stopped
        os.close(read_fd)
    outcomes = tuple(wire.decode_outcome(frame) for frame in frames)
    died = not timed_out and len(outcomes) < len(cases)
    return RunReport(outcomes, len(cases), timed_out, exit_code if died else None, time.monotonic() - start,
                     grown_mb=grown_mb)
