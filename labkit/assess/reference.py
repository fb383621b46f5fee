"""Keep the reference solution out of the learner's hands while their code is checked.

Two guards. In the kernel, ``is_reference`` spots a submission that *is* the reference (the same
object, the same code, or a subclass of the reference class), which is refused kindly. In the
child, ``disable`` makes the reference unusable before the learner's code runs: its functions'
code is swapped for one that raises ``ReferenceSolutionUsed``, so calling it — imported, found by
walking the stack, or reached through the exercise object — fails there and is reported as such.
The swap happens only in the forked child; the kernel's reference is untouched.

What this cannot stop: copying the reference's source (``show_solution()`` shows it on purpose).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Mapping


class ReferenceSolutionUsed(RuntimeError):
    """Raised in the child when learner code calls the reference solution."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("the reference solution is not available while your code is checked")


def _refuse(*args, **kwargs):
    # Runs with the reference module's globals, so it names nothing but builtins.
    raise __import__("labkit.assess.reference", fromlist=["_"]).ReferenceSolutionUsed()


def kind_of(obj: Any) -> str:
    """"function", "class" or "other", from ``type(obj)`` alone.

    ``isinstance``/``getattr`` on a learner's object may run its code in the kernel (a
    ``__class__`` property, a metaclass ``__getattr__``); ``type()``, ``issubclass`` between real
    classes and the C-level slots used here do not.
    """
    if type(obj) is types.FunctionType:
        return "function"
    return "class" if issubclass(type(obj), type) else "other"


def class_dict(cls: type) -> Mapping[str, Any]:
    """``vars(cls)`` without asking the class (or its metaclass) for it."""
    return type.__dict__["__dict__"].__get__(cls)


def _unwrap(obj: Any) -> Any:
    for _ in range(100):                                  # partials, bound methods, functools.wraps
        if type(obj) is functools.partial:
            obj = obj.func
        elif type(obj) is types.MethodType:
            obj = obj.__func__
        elif type(obj) is types.FunctionType and "__wrapped__" in obj.__dict__:
            obj = obj.__dict__["__wrapped__"]
        else:
            break
    return obj


def _same_code(a: Any, b: Any) -> bool:
    if kind_of(a) != "function" or kind_of(b) != "function":
        return False
    code_a, code_b = a.__code__, b.__code__
    return code_a is code_b or (code_a.co_filename, code_a.co_firstlineno, code_a.co_name) == \
        (code_b.co_filename, code_b.co_firstlineno, code_b.co_name)


def is_reference(target: Any, reference: Any) -> bool:
    """True when ``target`` is the reference solution itself, its code, or a subclass of it.

    Runs none of ``target``'s code (see ``kind_of``).
    """
    target, reference = _unwrap(target), _unwrap(reference)
    if target is reference:
        return True
    if kind_of(target) == "class" and kind_of(reference) == "class":
        return reference in type.__dict__["__mro__"].__get__(target)
    return _same_code(target, reference)


def _disable_function(fn: Any) -> bool:
    """Swap the code in place (so copies already taken are disabled too); False if impossible."""
    fn = getattr(fn, "__func__", fn)                      # staticmethod / classmethod
    if inspect.isfunction(fn) and not fn.__code__.co_freevars:
        fn.__code__ = _refuse.__code__
        return True
    return False


def disable(reference: Any) -> None:
    """Make ``reference`` (a function or class) raise ``ReferenceSolutionUsed`` in this process.

    Call it only in the forked child: it changes the objects in place.
    """
    reference = _unwrap(reference)
    if inspect.isclass(reference):
        for name, member in list(class_dict(reference).items()):
            method = isinstance(member, (staticmethod, classmethod)) or inspect.isfunction(member)
            if method and not _disable_function(member):  # a closure (super() adds one): replace it
                setattr(reference, name, _refuse)
        if "__init__" not in vars(reference):
            reference.__init__ = _refuse
    else:
        _disable_function(reference)
