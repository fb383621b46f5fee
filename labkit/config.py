"""Engine and speculative-decoding configuration, validated on construction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

DEFAULT_NUM_BLOCKS = 512
DEFAULT_MAX_MODEL_LEN = 4096


def _choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _int_range(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be in {rng}, got {value!r}")


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding: ``method="ngram"`` (prompt lookup) or ``"draft"`` (a small model).

    ``num_speculative_tokens`` is k, the number of tokens proposed per step. For n-gram lookup the
    proposer searches the request's own tokens for the longest suffix match of length in
    [prompt_lookup_min, prompt_lookup_max]. ``draft_model`` is a path; None means the shipped default;
    ``"target-int4"`` drafts with a 4-bit copy of the target itself (``labkit.model.quant``).
    """

    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    draft_model: str | None = None
    draft_num_blocks: int | None = None

    def __post_init__(self) -> None:
        _choice("method", self.method, ("ngram", "draft"))
        _int_range("num_speculative_tokens", self.num_speculative_tokens, 1, 16)
        _int_range("prompt_lookup_min", self.prompt_lookup_min, 1, 64)
        _int_range("prompt_lookup_max", self.prompt_lookup_max, 1, 64)
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ValueError("prompt_lookup_max must be >= prompt_lookup_min, got "
                             f"{self.prompt_lookup_max} < {self.prompt_lookup_min}")
        if self.draft_num_blocks is not None:
            _int_range("draft_num_blocks", self.draft_num_blocks, 1)
        if self.draft_model is not None:
            if not isinstance(self.draft_model, (str, os.PathLike)) or not str(self.draft_model):
                raise ValueError(f"draft_model must be None, 'target-int4' or a path, got {self.draft_model!r}")
            if self.method != "draft":
                raise ValueError(f"draft_model applies to method='draft' only (method is {self.method!r})")


@dataclass(frozen=True)
class EngineConfig:
    """Switches the labs turn. Pool size: give ``num_blocks`` or ``kv_cache_bytes`` (not both);
    with neither the pool has 512 blocks. ``max_model_len`` None means min(model limit, 4096)."""

    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_bytes: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 1024
    max_model_len: int | None = None
    scheduler: str = "continuous"
    kv_cache: str = "paged"
    contiguous_reserve: str = "max_model_len"
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = True
    speculative: SpecConfig | None = None
    device: str = "auto"
    dtype: str = "auto"
    attention_backend: str = "auto"
    seed: int = 0
    # The host path's one switch (lab 03 measures it): sample and verify the whole batch in one
    # tensor call per kind of row (True), or request by request (False). Same tokens either way.
    batched_sampling: bool = True
    # "dense": the dequantised fp32 weights (the reference). "q4_1": the GGUF's own 4-bit codes
    # through an int4 kernel, an approximation of the reference (labkit/model/q4_model.py).
    weights: str = "dense"
    # torch.compile each layer's dense halves (labkit.model.compiled): slow first steps, then
    # whatever Inductor's fusion buys on this machine (lab 05 measures it). Not bit-exact.
    compile: bool = False
    # Overlap scheduling (vLLM's --async-scheduling, SGLang's overlap scheduler): while step N's forward
    # runs, the host decides step N+1 with placeholders for the tokens N is producing; N's tokens are
    # applied one step late. Same tokens as the synchronous engine (labkit/engine.py, LLMEngine.step).
    async_scheduling: bool = False
    # Build the runner's inputs from preallocated per-request columns updated only where a request
    # changed (vLLM's InputBatch, labkit/model/input_batch.py) instead of from lists every step.
    persistent_batch: bool = False
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _int_range("block_size", self.block_size, 1, 1024)
        if self.num_blocks is not None and self.kv_cache_bytes is not None:
            raise ValueError("give num_blocks or kv_cache_bytes, not both")
        if self.num_blocks is not None:
            _int_range("num_blocks", self.num_blocks, 1, 1 << 24)
        if self.kv_cache_bytes is not None:
            _int_range("kv_cache_bytes", self.kv_cache_bytes, 1)
        _int_range("max_num_seqs", self.max_num_seqs, 1, 4096)
        _int_range("max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 20)
        if self.max_model_len is not None:
            _int_range("max_model_len", self.max_model_len, 2, 1 << 20)
        _choice("scheduler", self.scheduler, ("continuous", "static"))
        _choice("kv_cache", self.kv_cache, ("paged", "contiguous"))
        _choice("contiguous_reserve", self.contiguous_reserve, ("max_model_len", "max_tokens"))
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be a bool, got {self.enable_prefix_caching!r}")
        if not isinstance(self.enable_chunked_prefill, bool):
            raise ValueError(f"enable_chunked_prefill must be a bool, got {self.enable_chunked_prefill!r}")
        if self.speculative is not None and not isinstance(self.speculative, SpecConfig):
            raise ValueError(f"speculative must be a SpecConfig or None, got {self.speculative!r}")
        _choice("device", self.device, ("auto", "cpu", "cuda"))
        _choice("dtype", self.dtype, ("auto", "float32", "float16", "bfloat16"))
        _choice("attention_backend", self.attention_backend, ("auto", "reference", "cpu_batched", "triton"))
        _int_range("seed", self.seed, 0)
        if not isinstance(self.batched_sampling, bool):
            raise ValueError(f"batched_sampling must be a bool, got {self.batched_sampling!r}")
        _choice("weights", self.weights, ("dense", "q4_1"))
        if self.weights == "q4_1" and self.speculative is not None and self.speculative.draft_model == "target-int4":
            raise ValueError("weights='q4_1' already runs the target on 4-bit codes; a 'target-int4' draft "
                             "would be the same model (use the default draft or n-gram)")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be a bool, got {self.compile!r}")
        if not isinstance(self.async_scheduling, bool):
            raise ValueError(f"async_scheduling must be a bool, got {self.async_scheduling!r}")
        if not isinstance(self.persistent_batch, bool):
            raise ValueError(f"persistent_batch must be a bool, got {self.persistent_batch!r}")
        if self.async_scheduling and self.speculative is not None:
            # A verify row's input is the drafts after a token the previous step has not sampled yet,
            # and how many of them survive decides the next row's start: it cannot be planned ahead.
            raise ValueError("async_scheduling=True does not support speculative decoding (speculative must be "
                             "None): the next step's rows depend on how many drafts the running step accepts")
        if self.async_scheduling and self.scheduler != "continuous":
            raise ValueError("async_scheduling=True needs scheduler='continuous' (static batches wait for "
                             "their longest request, there is nothing to overlap)")
        if self.kv_cache == "contiguous" and self.enable_prefix_caching:
            raise ValueError("enable_prefix_caching needs kv_cache='paged' (contiguous regions "
                             "cannot share blocks)")
        if self.speculative is not None and self.scheduler == "static":
            raise ValueError("speculative decoding needs scheduler='continuous'")

    def resolve_max_model_len(self, model_limit: int) -> int:
        """``max_model_len``, or the model's limit capped at ``DEFAULT_MAX_MODEL_LEN``."""
        if self.max_model_len is None:
            return min(model_limit, DEFAULT_MAX_MODEL_LEN)
        if self.max_model_len > model_limit:
            raise ValueError(f"max_model_len must be <= the model's limit {model_limit}, got {self.max_model_len}")
        return self.max_model_len
