"""Check and encode what a caller hands ``add_request``, before the engine queues anything.

Every argument is checked with an error that names it: the prompt (text gets the chat
template, token ids must be in the vocabulary), the sampling parameters, the request id, the arrival
time, and whether the request can ever fit this engine (max_model_len, the token budget, the KV pool).
"""

from __future__ import annotations

import math

from labkit.config import EngineConfig
from labkit.kv.snapshot import KVLayout
from labkit.sampling_params import SamplingParams


class InputProcessor:
    def __init__(self, tokenizer, config: EngineConfig, kv_manager, max_model_len: int, vocab_size: int):
        self.tokenizer, self.config, self.kv = tokenizer, config, kv_manager
        self.max_model_len, self.vocab_size = max_model_len, vocab_size

    def process(self, prompt, params: SamplingParams, request_id, arrival_time, chat) -> list[int]:
        """The prompt's token ids, once every argument has passed its check."""
        check_request_args(request_id, arrival_time, chat)
        token_ids = self.encode(prompt, chat)
        self.check_fits(len(token_ids), params)
        return token_ids

    def encode(self, prompt, chat: bool) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt must not be empty")
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"prompt must be valid Unicode text ({exc.reason} at index {exc.start})") from None
            return self.tokenizer.encode_prompt(prompt, chat=chat)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool)
                                                     for t in prompt):
            if not prompt:
                raise ValueError("prompt must not be empty")
            bad = [t for t in prompt if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"prompt token ids must be in [0, {self.vocab_size}), got {bad[:5]}")
            return list(prompt)
        raise ValueError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")

    def check_fits(self, prompt_len: int, params: SamplingParams) -> None:
        if params.n > 1 and self.kv.layout is not KVLayout.PAGED:
            raise ValueError("n > 1 (parallel sampling shares prompt blocks) needs kv_cache='paged'")
        if params.n > self.config.max_num_seqs:
            raise ValueError(f"n ({params.n}) must be <= max_num_seqs ({self.config.max_num_seqs}): "
                             "each of the n sequences takes a batch slot")
        if prompt_len >= self.max_model_len:
            raise ValueError(f"prompt has {prompt_len} tokens but max_model_len is {self.max_model_len}; "
                             f"prompts must be shorter than max_model_len")
        total = min(prompt_len + params.max_tokens, self.max_model_len)
        if not self.config.enable_chunked_prefill and total > self.config.max_num_batched_tokens:
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) = {total} tokens, more than "
                f"max_num_batched_tokens ({self.config.max_num_batched_tokens}); without chunked prefill a "
                "(re)computed sequence must fit one step: raise max_num_batched_tokens or enable chunked prefill")
        if not self.kv.can_ever_fit(total):
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) needs {total} KV slots, "
                f"more than the whole KV pool holds ({self.kv.capacity_tokens()} slots); lower max_tokens "
                "or raise num_blocks / kv_cache_bytes")


def check_request_args(request_id, arrival_time, chat) -> None:
    """The plain arguments of ``add_request``, each named when wrong."""
    if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))
                                   or str(request_id) == ""):
        raise ValueError(f"request_id must be a non-empty str (or an int), got {request_id!r}")
    if arrival_time is not None and (isinstance(arrival_time, bool) or not isinstance(arrival_time, (int, float))
                                     or not math.isfinite(arrival_time)):
        raise ValueError(f"arrival_time must be a finite number of seconds (or None: now), got {arrival_time!r}")
    if not isinstance(chat, bool):
        raise ValueError(f"chat must be a bool, got {chat!r}")
