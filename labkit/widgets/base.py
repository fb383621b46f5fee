"""``LiveView``: what every labkit live widget shares.

A view is an anywidget whose picture is a pure function of its synced traits, so a page reload
or Voila redraws the current state. Its life::

    View(engine) ──subscribe──► engine.hooks
    event ──► ingest(event)          (every event: cheap bookkeeping in Python)
          ──► Throttle.mark_dirty()  (≤ 10 pushes / s)
                 └─► sync()          (accumulated state → traits → browser, in one message)
    flush()   push the current state now
    detach()  flush, then stop listening (the last picture stays)
    close()   stop listening and remove the widget

Views observe events only (``labkit.events``), never engine internals. A subclass lists the event
types it wants in ``EVENT_TYPES`` and implements ``ingest``, ``sync`` and ``make_labels``.
"""

from __future__ import annotations

import pathlib
import threading
import time
import weakref
from typing import Callable, ClassVar

import anywidget
import traitlets

from labkit import i18n
from labkit.events import EventBus, hooks_of
from labkit.widgets.palette import STATE_COLORS
from labkit.widgets.throttle import Throttle

_HERE = pathlib.Path(__file__).parent


def bundle_esm(filename: str) -> str:
    """The widget's ES module: ``_common.js`` (shared canvas helpers) followed by ``filename``.

    The front end loads one self-contained module per widget (no imports, no CDN: labs run
    offline), so the helpers are prepended rather than imported.
    """
    return (_HERE / "_common.js").read_text() + "\n" + (_HERE / filename).read_text()


class LiveView(anywidget.AnyWidget):
    """Base class of the live views; see the module docstring."""

    _css = _HERE / "views.css"

    labels = traitlets.Dict().tag(sync=True)     # every user-facing string the front end draws
    palette = traitlets.Dict().tag(sync=True)    # STATE_COLORS

    EVENT_TYPES: ClassVar[tuple[type, ...]] = ()

    def __init__(self, engine: object | None = None, *, hooks: EventBus | None = None,
                 interval_s: float = 0.1, clock: Callable[[], float] = time.monotonic,
                 **kwargs) -> None:
        bus = hooks_of(engine, hooks)   # fail before a comm opens
        super().__init__(**kwargs)
        self._lock = threading.RLock()
        self._throttle = Throttle(self._push, interval_s, clock, lock=self._lock)
        self._hooks = bus
        self._handler = self._on_event       # keep one bound method: unsubscribe() compares by `is`
        self._attached = True
        self._hooks.subscribe(self._handler, *self.EVENT_TYPES)
        self._language_listener = _follow_language(self)
        self.palette = dict(STATE_COLORS)
        self.labels = self.make_labels()

    # ------------------------------------------------------------------ subclass contract

    def ingest(self, event: object) -> None:
        """Fold one event into the accumulated state (no trait writes here)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Write the accumulated state into the synced traits."""
        raise NotImplementedError

    def make_labels(self) -> dict[str, str]:
        """Every user-facing string, in the current language (``labkit.i18n.t``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ public

    @property
    def attached(self) -> bool:
        """True while the view listens to the bus (False after detach/close or if it raised)."""
        return self._attached

    @property
    def num_pushes(self) -> int:
        """How many times the state went to the front end (throttled)."""
        return self._throttle.num_pushes

    def flush(self) -> None:
        """Push the current state now, whatever the throttle says."""
        with self._lock:
            self._throttle.push_now()

    def detach(self) -> None:
        """Push the final state and stop listening; the widget keeps showing it."""
        if getattr(self, "_attached", False):
            self.flush()
        self._unsubscribe()

    def close(self) -> None:
        """Stop listening and remove the widget from every page showing it."""
        self._unsubscribe()
        listener = getattr(self, "_language_listener", None)
        if listener is not None:
            _unfollow_language(listener)
            self._language_listener = None
        super().close()

    # ------------------------------------------------------------------ internals

    def _on_event(self, event: object) -> None:
        with self._lock:
            try:
                self.ingest(event)
                self._throttle.mark_dirty()
            except Exception:
                self._attached = False   # the bus unsubscribes a raiser; keep `attached` honest
                raise

    def _push(self) -> None:
        with self._lock, self.hold_sync():
            self.sync()

    def _unsubscribe(self) -> None:
        hooks = getattr(self, "_hooks", None)
        if hooks is not None:
            hooks.unsubscribe(self._handler)
            self._throttle.stop()
        self._attached = False

    def _relabel(self) -> None:
        self.labels = self.make_labels()


def _follow_language(view: LiveView) -> Callable[[str], None]:
    """Relabel ``view`` on ``labkit.set_language``; holds it weakly so a dropped view can go."""
    ref = weakref.ref(view)

    def relabel(_language: str) -> None:
        alive = ref()
        if alive is not None and getattr(alive, "_language_listener", None) is relabel:
            alive._relabel()

    i18n.on_language_change(relabel)
    return relabel


def _unfollow_language(listener: Callable[[str], None]) -> None:
    # i18n has no public way to unregister yet; a closed view's listener then becomes a no-op.
    off = getattr(i18n, "off_language_change", None)
    if off is not None:
        off(listener)
