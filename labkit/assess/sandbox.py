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

    kernel ──fork──► child (new session) ──fork──► grandchild: for each case:
                                                      to_plain(case(target)) ──frame──► kernel
      └── reads frames until time_limit_s (in total), then kills the session's process group

The learner's code runs in the grandchild, locked down by ``guard.lock_down`` (no reading the
answer's sources, no new processes, no signals to other processes), so ``os.getppid()`` there is
the session leader, never the kernel.

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
import stat
import sys
import sysconfig
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from labkit.assess import guard, plain, wire
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


def _prepare_child(memory_limit_mb: float | None, forbidden: Sequence[Any], protected: frozenset[str]) -> None:
    with contextlib.suppress(ValueError):         # only the main thread may set handlers
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout = sys.stderr = io.StringIO()      # never write to the kernel's streams from a fork
    builtins.input = _no_input                   # ipykernel's input() would talk to the kernel's sockets
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    guard.lock_down(forbidden, protected)        # last: from here on the audit hook refuses
    _limit_memory(memory_limit_mb)


def _no_input(*_args):
    raise EOFError("input() is not available while your code is checked")


def _close_inherited_channels(keep: int) -> None:
    """Close every pipe and socket above stderr that the fork inherited, except ``keep`` (the result
    pipe): the learner's code must not be able to write into the kernel's own channels (its ZMQ
    sockets, a test runner's pipes). Only this process's copies close; the kernel keeps its own."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:                               # no /proc (macOS): the usual range
        fds = list(range(3, 1024))
    for fd in fds:
        if fd < 3 or fd == keep:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:                           # already closed (e.g. listdir's own descriptor)
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(fd: int, target: Any, cases: Sequence[Callable[[Any], Any]],
           memory_limit_mb: float | None, forbidden: Sequence[Any], protected: frozenset[str]) -> None:
    out_of_memory = plain.dumps({"error": asdict(ErrorInfo("MemoryError", ""))})   # built before any limit
    _close_inherited_channels(keep=fd)
    _prepare_child(memory_limit_mb, forbidden, protected)
    for case in cases:
        try:
            data = wire.encode(_run_one(case, target))
        except MemoryError:
            data = out_of_memory
        wire.write_frame(fd, data)


def _session_leader(fd: int, pid_fd: int, run_checked) -> int:
    """The kernel's child: a new session, then the checked grandchild; its exit status, mirrored.

    The learner's code runs in the grandchild, so ``os.getppid()`` there is this process, never the
    kernel; the session (and process group) lets the kernel end both and whatever they started.
    """
    os.setsid()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(pid_fd)
            run_checked()
            code = 0
        finally:
            os._exit(code)
    os.close(fd)
    os.write(pid_fd, pid.to_bytes(4, "big"))
    os.close(pid_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):                    # die of the same signal, so the kernel reports it
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


def _read_pid(fd: int) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = os.read(fd, 4 - len(data))
        if not chunk:
            return None
        data += chunk
    return int.from_bytes(data, "big")


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


def _stop(pid: int, grandchild: int | None = None) -> int | None:
    """Kill the child's session group and the grandchild, then reap the child; its exit code if it
    had exited, else None."""
    try:
        code = _exit_code(pid)
    except ChildProcessError:                              # already reaped (the macOS fallback)
        return None
    kills = [lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)]
    if grandchild is not None:                            # in case it left the group
        kills.append(lambda: os.kill(grandchild, signal.SIGKILL))
    for kill in kills:
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
              memory_limit_mb: float | None = DEFAULT_MEMORY_LIMIT_MB, forbidden: Sequence[Any] = (),
              protected: frozenset[str] = frozenset()) -> RunReport:
    """Call ``case(target)`` for every case in a forked grandchild; stop everything after ``time_limit_s``.

    ``forbidden``: objects (the reference solution, the engine's functions for the answer) that raise
    ``ReferenceSolutionUsed`` there; ``protected``: files it may not read (``guard.py``).
    """
    start = time.monotonic()
    if not hasattr(os, "fork"):
        return _run_in_process(target, cases, start)
    read_fd, write_fd = os.pipe()
    pid_read, pid_write = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the child: never return into the kernel's code
        code = 70
        try:
            os.close(read_fd)
            os.close(pid_read)
            code = _session_leader(write_fd, pid_write, lambda: _child(write_fd, target, cases, memory_limit_mb,
                                                                      forbidden, protected))
        finally:
            os._exit(code)
    os.close(write_fd)
    os.close(pid_write)
    exit_code, grown_mb, inherited, grandchild = None, None, address_space(), None
    try:
        grandchild = _read_pid(pid_read)
        frames, timed_out = wire.read_frames(read_fd, len(cases), start + time_limit_s)
        if timed_out:                                     # was it looping, or still allocating?
            now = address_space(grandchild) if grandchild else None
            grown_mb = (now - inherited) / 2 ** 20 if now is not None and inherited is not None else None
        if not timed_out and len(frames) < len(cases):
            exit_code = _wait_for_exit(pid, start + time_limit_s + 1.0)
    finally:                                              # also on KeyboardInterrupt: never leave the child
        stopped = _stop(pid, grandchild)
        exit_code = exit_code if exit_code is not None else stopped
        os.close(read_fd)
        os.close(pid_read)
    outcomes = tuple(wire.decode_outcome(frame) for frame in frames)
    died = not timed_out and len(outcomes) < len(cases)
    return RunReport(outcomes, len(cases), timed_out, exit_code if died else None, time.monotonic() - start,
                     grown_mb=grown_mb)
