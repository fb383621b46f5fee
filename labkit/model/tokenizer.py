"""A thin tokenizer over ``tokenizers`` (fast to import) with the model's chat template."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
from tokenizers import Tokenizer as _FastTokenizer


class Tokenizer:
    def __init__(self, model_dir: Path, eos_token_id: int | list[int] | None = None):
        self._tok = _FastTokenizer.from_file(str(model_dir / "tokenizer.json"))
        cfg_path = model_dir / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        template = cfg.get("chat_template")
        if (model_dir / "chat_template.jinja").is_file():
            template = (model_dir / "chat_template.jinja").read_text()
        self._template = (jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
                          .from_string(template) if template else None)
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
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt)

    def encode_prompt(self, prompt: str, chat: bool = True) -> list[int]:
        """String prompts get the chat template (as a single user turn) unless chat=False."""
        if chat and self.has_chat_template:
            prompt = self.apply_chat_template([{"role": "user", "content": prompt}])
        return self.encode(prompt)


class IncrementalDetokenizer:
    """Turn a growing list of token ids into text deltas without splitting a UTF-8 character.

    Byte-level BPE tokens can end in the middle of a multi-byte character (common for Chinese);
    such a tail decodes to U+FFFD, so we hold it back until the next token completes it.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.text = ""

    def update(self, token_ids: list[int], final: bool = False) -> str:
        full = self.tokenizer.decode(token_ids)
        if full.endswith("\ufffd") and not final:
            return ""
        delta = full[len(self.text):] if full.startswith(self.text) else full
        self.text = full
        return delta
