"""The wire between the child and the kernel: what a case's report holds, and how it travels.

The child sends one frame per case: a 4-byte big-endian length, then a pickle of a plain dict
(``{"value": …}``, ``{"error": {…}}`` or ``{"not_plain": {…}}``, plus ``"stdout"``). The kernel
reads frames against the deadline (``read_frames``: a half-written frame just runs out the clock)
and turns each into an ``Outcome`` with ``decode_outcome``, which unpickles with ``plain.loads``
and checks every field's type: whatever bytes arrive, the kernel builds only plain data and these
dataclasses.
"""

from __future__ import annotations

import os
import selectors
import time
from dataclasses import asdict, dataclass
from typing import Any

from labkit.assess import plain

MAX_TEXT = 2000
MAX_FRAME_BYTES = 16 * 2 ** 20           # one case's result; larger is reported, not sent


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
class NotPlain:
    """A result that was not plain data: its type, a short repr, where it sat, during which call."""

    type_name: str
    text: str
    path: str = ""
    during: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one case produced (plain data only): a value, an error or a refused value, and prints.

    ``partial`` holds the steps an operation sequence completed before its error.
    """

    value: Any = None
    error: ErrorInfo | None = None
    stdout: str = ""
    not_plain: NotPlain | None = None
    partial: Any = None


def encode(wire: dict) -> bytes:
    data = plain.dumps(wire)
    if len(data) <= MAX_FRAME_BYTES:
        return data
    refused = NotPlain("too large", f"{len(data) / 2 ** 20:.0f} MiB")
    return plain.dumps({"not_plain": asdict(refused), "stdout": wire.get("stdout", "")})


def write_frame(fd: int, data: bytes) -> None:
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def _text(value: Any, limit: int = 300) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _number(value: Any) -> int | None:
    return value if type(value) is int else None


def _error_from(wire: Any) -> ErrorInfo:
    if not isinstance(wire, dict):
        return ErrorInfo("ProtocolError", "unreadable error report")
    return ErrorInfo(type_name=_text(wire.get("type_name"), 80) or "Exception", message=_text(wire.get("message")) or "",
                     lineno=_number(wire.get("lineno")), line=_text(wire.get("line")),
                     function=_text(wire.get("function"), 80), during=_text(wire.get("during")))


def decode_outcome(data: bytes) -> Outcome:
    """One frame as an ``Outcome``; bytes that are not a well-formed plain report become an error."""
    try:
        wire = plain.loads(data)
    except Exception as exc:                     # anything the child wrote
        return Outcome(error=ErrorInfo("ProtocolError", f"the result could not be read back ({type(exc).__name__})"))
    if not isinstance(wire, dict):
        return Outcome(error=ErrorInfo("ProtocolError", "the result could not be read back"))
    stdout = _text(wire.get("stdout"), MAX_TEXT) or ""
    if wire.get("error") is not None:
        return Outcome(error=_error_from(wire["error"]), stdout=stdout, partial=wire.get("partial"))
    refused = wire.get("not_plain")
    if isinstance(refused, dict):
        return Outcome(stdout=stdout, not_plain=NotPlain(_text(refused.get("type_name"), 80) or "?",
                                                         _text(refused.get("text")) or "", _text(refused.get("path")) or "",
                                                         _text(refused.get("during"))))
    return Outcome(value=wire.get("value"), stdout=stdout)


def read_frames(fd: int, num_cases: int, deadline: float) -> tuple[list[bytes], bool]:
    """Frames until every case reported, EOF, or the deadline (then ``timed_out`` is True)."""
    frames, buffer = [], bytearray()
    with selectors.DefaultSelector() as selector:        # not select(): a kernel may hold fds > 1024
        selector.register(fd, selectors.EVENT_READ)
        while len(frames) < num_cases:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return frames, True
            if not _read_some(fd, buffer):
                return frames, False
            if not _split_frames(buffer, frames, num_cases):
                return frames, False
    return frames, False


def _read_some(fd: int, buffer: bytearray) -> bool:
    chunk = os.read(fd, 1 << 16)
    buffer += chunk
    return bool(chunk)


def _split_frames(buffer: bytearray, frames: list[bytes], num_cases: int) -> bool:
    """Move complete frames from ``buffer`` to ``frames``; False when the stream is not ours."""
    while len(buffer) >= 4 and len(frames) < num_cases:
        size = int.from_bytes(buffer[:4], "big")
        if size > MAX_FRAME_BYTES + 4096:                 # not our child's framing: stop reading
            frames.append(b"")
            return False
        if len(buffer) < 4 + size:
            break
        frames.append(bytes(buffer[4:4 + size]))
        del buffer[:4 + size]
    return True
