"""What the checked process may not do: use the answer's sources, start processes, signal others.

``reference.disable`` makes the reference solution raise in the checked process. That alone leaves
routes around it, each closed here before the learner's code runs (only in that disposable process):

  route                                          closed by
  -------------------------------------------    -----------------------------------------------
  the engine's own function for the answer       ``disable`` on every object in ``forbidden``
    (``labkit.replay.static_decode_occupancy``)    (a module name disables everything it defines)
  ``importlib.reload`` / ``exec`` of the file,   an audit hook refusing to open the protected
    ``inspect.getsource`` + ``exec``               modules' ``.py`` and ``.pyc`` files (reload and
                                                   import read them), and their lines dropped from
                                                   ``linecache``; hard or symbolic links to them
  a subprocess that imports the solution         the audit hook refuses subprocess, fork, exec,
                                                   spawn and ``os.system``
  ``os.kill(os.getppid(), ...)``                 the hook refuses signals to any other process;
                                                   besides, the checked process is a grandchild of
                                                   the kernel in its own session (``sandbox.py``)
  ``ctypes`` calls into libc (``kill``, ...)     the hook refuses ``ctypes.dlopen``/``dlsym``

An audit hook (PEP 578) cannot be removed once added, so learner code cannot switch it off. What
stays out of reach of any guard here: code the learner runs in the kernel itself (copying the
source that ``show_solution()`` shows, keeping a reference's ``__code__`` before checking), and
re-implementing the answer with other engine parts that are not the answer's own function.
This is self-assessment, not an exam (docs/assessment.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import linecache
import os
import sys
import types
from typing import Any, Iterable, Sequence

from labkit.assess import reference
from labkit.i18n import t


class NotAllowedWhileChecked(PermissionError):
    """Raised in the checked process when learner code takes a route the guard closes."""


_PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "pty.spawn", "os.startfile"}
_LINK_EVENTS = {"os.link", "os.symlink", "os.rename", "shutil.copyfile", "shutil.copytree"}


def resolve(spec: str) -> list[Any]:
    """The objects a spec names: ``"pkg.mod:Name.attr"`` one object, ``"pkg.mod"`` every function and
    class the module defines. Resolved in the kernel, before the fork."""
    module_name, _, qualname = spec.partition(":")
    module = importlib.import_module(module_name)
    if not qualname:
        return [obj for obj in vars(module).values()
                if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == module_name]
    obj: Any = module
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part)
    return [obj]


def module_of(spec: str) -> str:
    return spec.partition(":")[0]


def protected_files(module_names: Iterable[str]) -> frozenset[str]:
    """The real paths of each module's source and cached bytecode."""
    paths = set()
    for name in module_names:
        module = sys.modules.get(name) or importlib.import_module(name)
        source = getattr(module, "__file__", None)
        if not source:
            continue
        paths.add(os.path.realpath(source))
        if source.endswith(".py"):
            paths.add(os.path.realpath(importlib.util.cache_from_source(source)))
    return frozenset(paths)


def _disable(obj: Any) -> None:
    if isinstance(obj, property):
        for accessor in (obj.fget, obj.fset, obj.fdel):
            if accessor is not None:
                reference.disable(accessor)
    elif isinstance(obj, (staticmethod, classmethod)):
        reference.disable(obj.__func__)
    elif isinstance(obj, (types.FunctionType, type)):
        reference.disable(obj)


def _path_of(argument: Any) -> str | None:
    if isinstance(argument, int):
        return None                                  # an open file descriptor: already past the check
    try:
        return os.path.realpath(os.fsdecode(argument))
    except (TypeError, ValueError):
        return None


def _refuse(what: str) -> None:
    raise NotAllowedWhileChecked(what)


def make_hook(files: frozenset[str], own_pid: int):
    """The audit hook: refuse reading ``files``, starting processes, signalling others, ctypes."""

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path = _path_of(args[0]) if args else None
            if path is not None and path in files:
                _refuse(t("检查时不能读取参考答案和引擎中算出答案的源文件（reload、exec、getsource 都要读它们）。",
                          "the reference's and the engine's answer sources cannot be read while your code is checked "
                          "(reload, exec and getsource all read them)."))
        elif event in _LINK_EVENTS:
            path = _path_of(args[0]) if args else None
            if path is not None and path in files:
                _refuse(t("检查时不能链接或复制答案的源文件。", "the answer's source files cannot be linked or copied while "
                          "your code is checked."))
        elif event in _PROCESS_EVENTS:
            _refuse(t("检查时不能启动新进程（subprocess、os.system、fork）。",
                      "new processes (subprocess, os.system, fork) are not available while your code is checked."))
        elif event in ("os.kill", "os.killpg"):
            target = args[0] if args else None
            if target not in (own_pid, 0) and not (event == "os.killpg" and target == os.getpgid(0)):
                _refuse(t("检查时你的代码不能给其他进程发信号。", "your code may not signal other processes while it is checked."))
        elif event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"):
            _refuse(t("检查时不能使用 ctypes 调用 C 函数。", "ctypes calls into C are not available while your code is checked."))

    return hook


def lock_down(forbidden: Sequence[Any], files: frozenset[str]) -> None:
    """In the checked process only: disable ``forbidden`` objects, forget the protected files' lines,
    and add the audit hook. Irreversible; call it just before the learner's code runs."""
    for obj in forbidden:
        _disable(obj)
    for filename in list(linecache.cache):
        if _path_of(filename) in files:
            linecache.cache.pop(filename, None)
    sys.addaudithook(make_hook(files, os.getpid()))
