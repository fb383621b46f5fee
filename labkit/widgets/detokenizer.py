"""Turn a growing list of token ids into text deltas without breaking characters.

Decoding each new token alone goes wrong twice over: a Chinese character usually spans several
byte-level BPE tokens (alone, each decodes to "�"), and some tokenizers drop or add a leading
space depending on what precedes a token. vLLM's incremental detokenizer
(``vllm/transformers_utils/detokenizer_utils.py``, ``detokenize_incrementally``) decodes a short
window instead::

    token_ids:  ... │ prefix_offset ······ read_offset │ new tokens │
    delta = decode(ids[prefix_offset:]) minus its first len(decode(ids[prefix_offset:read_offset]))

and holds the delta back while it ends in "�" (an unfinished UTF-8 sequence).
"""

from __future__ import annotations

from typing import Callable, Iterable

REPLACEMENT_CHAR = "\ufffd"

Detokenize = Callable[[list[int]], str]


def show_token_ids(token_ids: list[int]) -> str:
    """Fallback when no tokenizer is at hand: the ids themselves, ``[id]`` per token."""
    return "".join(f"[{token_id}]" for token_id in token_ids)


class IncrementalDetokenizer:
    """Text deltas for one request's output tokens (see the module docstring)."""

    def __init__(self, detokenize: Detokenize) -> None:
        self._detokenize = detokenize
        self.token_ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def append(self, token_ids: Iterable[int]) -> str:
        """Add tokens; return the text they complete ("" while a character is unfinished)."""
        self.token_ids.extend(token_ids)
        prefix = self._detokenize(self.token_ids[self._prefix_offset:self._read_offset])
        text = self._detokenize(self.token_ids[self._prefix_offset:])
        if len(text) <= len(prefix) or text.endswith(REPLACEMENT_CHAR):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        return text[len(prefix):]

    def finish(self) -> str:
        """Whatever is still held back (the request ended mid-character): release it as is."""
        prefix = self._detokenize(self.token_ids[self._prefix_offset:self._read_offset])
        text = self._detokenize(self.token_ids[self._prefix_offset:])
        self._prefix_offset = self._read_offset = len(self.token_ids)
        return text[len(prefix):]
