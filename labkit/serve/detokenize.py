"""One output sequence's text as it streams: incremental detokenizing plus stop strings.

A stop string can arrive split over several tokens ("\\n\\n" as "\\n" then "\\n"), so the last
``len(longest stop) - 1`` characters are held back until we know they do not start a stop string::

    text so far:   "... the answer is 42.\\n"     stop = ["\\n\\n"]
    sent:          "... the answer is 42."        held back: "\\n"

When a stop string appears the text is cut just before it (OpenAI and vLLM leave the stop string
out) and the server aborts the request: the engine only knows stop *token* ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.model.tokenizer import IncrementalDetokenizer


@dataclass(frozen=True)
class TextUpdate:
    delta: str
    stopped: bool          # a stop string was found: the sequence ends here


class SequenceText:
    def __init__(self, tokenizer, stop: list[str]):
        self._detok = IncrementalDetokenizer(tokenizer)
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self.text = ""          # everything decoded so far (after a stop: cut before it)
        self._sent = 0          # characters of ``text`` already handed out

    def update(self, token_ids: list[int], final: bool) -> TextUpdate:
        self.text += self._detok.update(token_ids, final=final)
        cut = self._find_stop()
        if cut is not None:
            self.text = self.text[:cut]
            return TextUpdate(self._take(len(self.text)), True)
        end = len(self.text) if final else max(self._sent, len(self.text) - self._hold)
        return TextUpdate(self._take(end), False)

    def _find_stop(self) -> int | None:
        # Only the unsent tail (plus the held-back overlap) can contain a new stop string.
        start = max(0, self._sent - self._hold)
        hits = [i for i in (self.text.find(s, start) for s in self._stop) if i >= 0]
        return min(hits) if hits else None

    def _take(self, end: int) -> str:
        delta = self.text[self._sent:end]
        self._sent = max(self._sent, end)
        return delta
