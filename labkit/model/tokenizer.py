"""A thin tokenizer over ``tokenizers`` (fast to import) with the model's chat template."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as _FastTokenizer


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_chat_template(source: str, origin: str = "chat template") -> jinja2.Template:
    """A model directory's chat template is data, never code: render it in jinja2's immutable
    sandbox (attribute access to dunders, ``__globals__``, mutating methods and the like raise
    ``SecurityError``), with the helpers and whitespace rules ``transformers`` gives templates."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"{origin}: not a valid jinja2 template ({exc})") from None


class Tokenizer:
    def __init__(self, model_dir: Path, eos_token_id: int | list[int] | None = None):
        self._tok = _FastTokenizer.from_file(str(model_dir / "tokenizer.json"))
        cfg_path = model_dir / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        template, origin = cfg.get("chat_template"), str(cfg_path)
        if (model_dir / "chat_template.jinja").is_file():
            origin = str(model_dir / "chat_template.jinja")
            template = (model_dir / "chat_template.jinja").read_text()
        if template is not None and not isinstance(template, str):
            raise ValueError(f"{origin}: chat_template must be a string (named templates are not supported)")
        self._template_origin = origin
        self._template = compile_chat_template(template, origin) if template else None
        ids = eos_token_id if isinstance(eos_token_id, list) else [eos_token_id]
        eos_tok = cfg.get("eos_token")
        if isinstance(eos_tok, str) and self._tok.token_to_id(eos_tok) is not None:
            ids.append(self._tok.token_to_id(eos_tok))
        self.eos_token_ids = tuple(sorted({i for i in ids if i is not None}))
        self.vocab_size = self._tok.get_vocab_size()

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if self._template is None:
            raise ValueError("this model has no chat template; pass raw text with chat=False")
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt)
        except jinja2.exceptions.SecurityError as exc:
            raise ValueError(f"{self._template_origin}: the chat template tried something a template may "
                             f"not do ({exc}); templates are rendered in a sandbox") from None

    def encode_prompt(self, prompt: str, chat: bool = True) -> list[int]:
        """String prompts get the chat template (as a single user turn) unless chat=False."""
        if chat and self.has_chat_template:
            prompt = self.apply_chat_template([{"role": "user", "content": prompt}])
        return self.encode(prompt)


class IncrementalDetokenizer:
    """Turn a growing list of token ids into text deltas without splitting a UTF-8 character.

    Byte-level BPE tokens can end in the middle of a multi-byte character (common for Chinese);
    such a tail decodes to U+FFFD, so we hold it back until the next token completes it. A UTF-8
    character has at most 4 bytes, so a tail that is still unfinished after ``MAX_HELD_TOKENS`` (3)
    more tokens never will be: what precedes the last 3 tokens goes out as replacement characters
    and decoding starts afresh after it. Without that cap a run of stray byte tokens would hold
    back the rest of the output, and a stream would quietly turn into one final chunk::

        tokens:   "Hi" <0xE4> <0xB8> <0xAD>     -> "Hi", "", "", "中"     (completed at the 3rd byte)
        tokens:   "Hi" <0x80> <0x80> <0x80> <0x80> -> "Hi", "", "", "", "�"  (3 still held)
    """

    MAX_HELD_TOKENS = 3

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.text = ""             # everything returned so far
        self._start = 0            # tokens before this are settled; the rest is decoded afresh
        self._tail = ""            # what was returned of decode(token_ids[_start:])

    def update(self, token_ids: list[int], final: bool = False) -> str:
        n = len(token_ids)
        tail = self.tokenizer.decode(token_ids[self._start:])
        if tail.endswith("\ufffd") and not final:
            # Several tokens can arrive at once (speculative decoding): hold back only the last
            # few that leave a character unfinished, never more than MAX_HELD_TOKENS.
            for held in range(1, min(self.MAX_HELD_TOKENS, n - self._start) + 1):
                clean = self.tokenizer.decode(token_ids[self._start:n - held])
                if not clean.endswith("\ufffd"):
                    return self._emit(clean)
            # Given up on: what lies before the last MAX_HELD_TOKENS goes out as it decodes (with
            # U+FFFD) and is settled; the held tokens may still start a character.
            settle = n - self.MAX_HELD_TOKENS
            delta = self._emit(self.tokenizer.decode(token_ids[self._start:settle]))
            self._start, self._tail = settle, ""
            return delta
        return self._emit(tail)

    def _emit(self, tail: str) -> str:
        delta = tail[len(self._tail):] if tail.startswith(self._tail) else tail
        self._tail = tail
        self.text += delta
        return delta
