"""A request's prompt as token ids: chat template, bounds, tokenising. Runs in the prepare pool (app.py).

What a prompt costs grows with its size, and a refused prompt must cost as little as an accepted one.
So what cannot fit the context is refused *before* it is tokenised, by two bounds derived from the
tokenizer at start (``PromptEncoder``):

- **characters**: a token stands for at most ``max_token_bytes`` bytes of text (the longest vocabulary
  entry, measured), and a character is at least one byte, so a text of more than
  ``(max_model_len - 1) * max_token_bytes`` characters has more than ``max_model_len - 1`` tokens
  however it is tokenised. Only claimed for a tokenizer that keeps every character (no normalizer, a
  probe text comes back unchanged from encode and decode); else there is no such bound.
- **messages**: every message adds at least one token to the chat template's text (its turn marker;
  checked at start by rendering one and two empty messages), so more than ``max_model_len - 1``
  messages cannot fit. Checked before the messages are walked or templated.

Tokenising itself runs without holding the GIL: ``tokenizers``' ``encode_batch`` releases it (its
``encode`` does not), so a long prompt being tokenised in the pool stops neither the event loop
(every stream's chunks) nor the engine thread (every request's next token). A tokenizer without it
(the simulated model's bytes) goes through the engine's own ``inputs.encode``.
"""

from __future__ import annotations

from labkit.serve.errors import APIError

# Spaces, tabs, newlines, CJK, an emoji, combining marks, a byte-order mark: none may be lost.
_PROBE = "Hi  there,\tworld!\n\n  中文 字符 😀 e\u0301 \ufeffx\r\nend  "


def fast_tokenizer(tokenizer):
    """The ``tokenizers.Tokenizer`` under labkit's wrapper (model/tokenizer.py), or None."""
    fast = getattr(tokenizer, "_tok", None)
    return fast if fast is not None and hasattr(fast, "encode_batch") else None


def longest_token_bytes(tokenizer) -> int | None:
    """The most UTF-8 bytes of text one token stands for; None where that bounds nothing (the tokenizer
    may drop or merge characters: a normalizer, or a probe text that does not come back whole)."""
    fast = fast_tokenizer(tokenizer)
    if fast is not None:
        if fast.normalizer is not None or _decoded(fast, fast.encode(_PROBE, add_special_tokens=False).ids) != _PROBE:
            return None
        # A vocabulary entry's own spelling ("ĠĠthe", "▁the", "<0xE4>") has at least as many UTF-8 bytes as
        # the text it decodes to: decode only the entries that could beat the longest decoded so far.
        longest = 0
        for piece, token_id in sorted(fast.get_vocab(with_added_tokens=True).items(),
                                      key=lambda item: -len(item[0].encode("utf-8"))):
            if len(piece.encode("utf-8")) <= longest:
                break
            # "▁the" decodes alone without the space it stands for: count it back in.
            longest = max(longest, _utf8_len(_decoded(fast, [token_id])) + piece.startswith("\u2581"))
        return longest
    if tokenizer.decode(tokenizer.encode(_PROBE), skip_special_tokens=False) != _PROBE:
        return None
    return max(_utf8_len(tokenizer.decode([i], skip_special_tokens=False)) for i in range(tokenizer.vocab_size))


def _decoded(fast, ids: list[int]) -> str:
    return fast.decode(ids, skip_special_tokens=False)


def _utf8_len(text: str) -> int:
    """A byte that is part of a character decodes to U+FFFD: 3 bytes, never fewer than it stands for."""
    return len(text.encode("utf-8", "replace"))


class PromptEncoder:
    def __init__(self, engine):
        self.engine = engine
        self.max_model_len: int = engine.max_model_len
        self.tokenizer = engine.tokenizer
        self._fast = fast_tokenizer(self.tokenizer)
        self.max_token_bytes = longest_token_bytes(self.tokenizer)
        self.max_chars = None if self.max_token_bytes is None else (self.max_model_len - 1) * self.max_token_bytes
        self.max_messages = self.max_model_len - 1 if self._each_message_adds_a_token() else None

    # -- bounds (before any work that grows with the prompt) ----------------------------------------
    def check_messages(self, num_messages: int) -> None:
        if self.max_messages is not None and num_messages > self.max_messages:
            raise APIError(400, f"messages has {num_messages} messages; each takes at least one token of the chat "
                                f"template, so at most {self.max_messages} fit this model's max_model_len "
                                f"({self.max_model_len} tokens)", "messages")

    def check_chars(self, text: str, field: str) -> None:
        if self.max_chars is not None and len(text) > self.max_chars:
            raise APIError(400, f"{field} has {len(text)} characters ({'with the chat template' if field == 'messages' else 'text'}); "
                                f"no text of more than {self.max_chars} characters fits this model's max_model_len "
                                f"({self.max_model_len} tokens): a token of this tokenizer stands for at most "
                                f"{self.max_token_bytes} bytes", field)

    # -- work --------------------------------------------------------------------------------------
    def render_chat(self, messages: list[dict]) -> str:
        if getattr(self.tokenizer, "has_chat_template", False):
            try:
                return self.tokenizer.apply_chat_template(messages)
            except ValueError as exc:
                raise APIError(400, str(exc), "messages") from None
        # A model without a template (the simulated one): the turns, one per line.
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"

    def encode(self, prompt, field: str) -> list[int]:
        """Token ids of a text (checked against ``max_chars`` first) or of a list of ids (checked by the
        engine); a ValueError of the engine's names the field."""
        if isinstance(prompt, str):
            if not prompt:
                raise APIError(400, f"{field} must not be empty", field)
            self.check_chars(prompt, field)
            if self._fast is not None:
                return self._fast.encode_batch([prompt], add_special_tokens=False)[0].ids   # GIL released
        try:
            return self.engine.inputs.encode(prompt, chat=False)
        except ValueError as exc:
            raise APIError(400, str(exc), field) from None

    def _each_message_adds_a_token(self) -> bool:
        try:
            one, two = ([{"role": "user", "content": ""}] * k for k in (1, 2))
            return len(self._tokens(self.render_chat(two))) > len(self._tokens(self.render_chat(one)))
        except Exception:          # a template that refuses empty turns says nothing either way
            return False

    def _tokens(self, text: str) -> list[int]:
        return self.engine.inputs.encode(text, chat=False)
