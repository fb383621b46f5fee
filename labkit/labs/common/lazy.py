"""``once``: a measurement that runs the first time anyone asks for it, and only then.

A predict-then-reveal box (``labkit.labs.common.display.predict``) measures when the learner clicks *Reveal*;
the next cell needs the same measurement whether or not anyone clicked (CI never clicks)::

    run = once(kv.compare_cache_recompute, llm, prompt, 32)
    predict("你预计……？", lambda: run().total_tokens("recompute"))
    result = run()        # the revealed measurement, or a fresh one
"""

from __future__ import annotations

from typing import Callable, TypeVar

_T = TypeVar("_T")


def once(fn: Callable[..., _T], *args, **kwargs) -> Callable[[], _T]:
    """A zero-argument callable: ``fn(*args, **kwargs)`` on the first call, the same result after."""
    box: list[_T] = []

    def run() -> _T:
        if not box:
            box.append(fn(*args, **kwargs))
        return box[0]

    return run
