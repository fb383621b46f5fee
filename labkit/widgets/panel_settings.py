"""What the control panel's knobs mean to the engine: ``PanelSettings`` → ``EngineConfig`` + workload.

A workload is a list of ``Arrival``: who arrives when, with which prompt and how many tokens to make.

- Prompt sets (``"chat"``, ``"code"``, ``"copy"``, ``labkit.traces.load_prompts``): real prompts with
  the chat template, greedy decoding up to ``max_tokens`` (a request may stop earlier at <|im_end|>).
  Prompts too long to finish within ``room`` (see below) are left out of the rotation.
- ``"synthetic"`` (``labkit.traces.synthetic_trace``): heavy-tailed (log-normal) prompt and output
  lengths, scaled with ``scale_trace`` so the longest fit the pool and ``max_model_len``; prompts are
  stretches of real text of exactly that many tokens, and each request makes exactly its output
  length (``ignore_eos``), because the long tail is the point of this workload.

``room`` = min(``max_model_len``, pool slots): the most tokens one request may hold, so every
request can finish even alone in the pool (``max_model_len`` is capped to the pool for the same
reason: a contiguous layout reserves that much per request).

Arrival times are a Poisson process at ``request_rate`` requests/s (0: everyone at t = 0), the same
generator ``synthetic_trace`` uses, seeded by ``seed``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from labkit.config import EngineConfig, SpecConfig
from labkit.sampling_params import SamplingParams
from labkit.traces import PROMPT_SETS, LogNormalLengths, load_prompts, scale_trace, synthetic_trace
from labkit.widgets.engine_driver import Arrival

WORKLOADS = (*PROMPT_SETS, "synthetic")
SPEC_METHODS = ("none", "ngram", "draft")
MODELS = ("real", "sim")
SYNTHETIC_PROMPT_LEN = LogNormalLengths(48, 1.0, 4, 512)   # tokens, before scaling to the pool
SYNTHETIC_OUTPUT_LEN = LogNormalLengths(24, 1.0, 2, 256)


def fast_mode() -> bool:
    """``LABKIT_FAST=1``: the switch every lab and dashboard honours (smaller, quicker defaults)."""
    return os.environ.get("LABKIT_FAST", "") not in ("", "0")


@dataclass(frozen=True)
class PanelSettings:
    """Every knob of the control panel. ``engine_config()`` validates (``ValueError`` on a bad mix)."""

    model: str = "real"                  # "real" (SmolLM2-135M-Instruct) | "sim" (cost model)
    kv_cache: str = "paged"              # "paged" | "contiguous"
    scheduler: str = "continuous"        # "continuous" | "static"
    block_size: int = 16
    num_blocks: int = 128
    max_num_seqs: int = 8
    enable_prefix_caching: bool = False
    spec_method: str = "none"            # "none" | "ngram" | "draft"
    num_speculative_tokens: int = 4
    workload: str = "chat"               # a prompt set or "synthetic"
    num_requests: int = 12
    request_rate: float = 2.0            # requests / s; 0 = all at t = 0
    max_tokens: int = 32
    max_model_len: int = 512
    seed: int = 0

    @classmethod
    def defaults(cls, fast: bool | None = None) -> PanelSettings:
        """The dashboard's defaults; smaller under ``LABKIT_FAST=1``."""
        if fast if fast is not None else fast_mode():
            return cls(block_size=8, num_blocks=48, max_num_seqs=4, num_requests=4, request_rate=0.0,
                       max_tokens=8, max_model_len=256)
        return cls()

    @property
    def model_name(self) -> str | None:
        """What ``LLM(model=...)`` takes: None for the default real model, ``"sim"``."""
        return None if self.model == "real" else self.model

    @property
    def room(self) -> int:
        """Token slots one request may use: min(max_model_len, num_blocks · block_size)."""
        return min(self.max_model_len, self.num_blocks * self.block_size)

    def engine_config(self) -> EngineConfig:
        spec = None
        if self.spec_method != "none":
            spec = SpecConfig(method=self.spec_method, num_speculative_tokens=self.num_speculative_tokens)
        return EngineConfig(
            block_size=self.block_size, num_blocks=self.num_blocks, max_num_seqs=self.max_num_seqs,
            max_model_len=self.room, scheduler=self.scheduler, kv_cache=self.kv_cache,
            enable_prefix_caching=self.enable_prefix_caching and self.kv_cache == "paged",
            speculative=spec, seed=self.seed)


def build_engine(settings: PanelSettings):
    """A fresh engine for ``settings`` (the real model's weights load once per process)."""
    from labkit.llm import LLM

    return LLM(model=settings.model_name, config=settings.engine_config(), progress=False).engine


def build_arrivals(settings: PanelSettings, engine) -> list[Arrival]:
    """The workload ``settings`` describes, for ``engine`` (its tokenizer and pool size)."""
    trace = synthetic_trace(settings.num_requests, seed=settings.seed, rate=settings.request_rate or None,
                            prompt_len=SYNTHETIC_PROMPT_LEN, output_len=SYNTHETIC_OUTPUT_LEN)
    if settings.workload == "synthetic":
        return _synthetic_arrivals(settings, engine, trace)
    prompts = fitting_prompts(settings, engine)
    order = np.random.default_rng(settings.seed).permutation(len(prompts))
    params = SamplingParams(temperature=0.0, max_tokens=settings.max_tokens)
    return [Arrival(str(i), r.arrival_s, prompts[order[i % len(prompts)]], params)
            for i, r in enumerate(trace)]


def fitting_prompts(settings: PanelSettings, engine) -> list[str]:
    """The prompt set's prompts that leave room for ``max_tokens`` (ValueError if none does)."""
    encode = engine.tokenizer.encode_prompt
    prompts = [p for p in load_prompts(settings.workload)
               if len(encode(p, chat=True)) + settings.max_tokens <= settings.room]
    if not prompts:
        raise ValueError(f"no '{settings.workload}' prompt fits {settings.room} token slots with "
                         f"max_tokens={settings.max_tokens}: enlarge the KV pool or lower max_tokens")
    return prompts


def _synthetic_arrivals(settings: PanelSettings, engine, trace) -> list[Arrival]:
    room = settings.room
    trace = scale_trace(trace, max_prompt_len=max(1, room // 2),
                        max_output_len=max(1, min(settings.max_tokens, room // 2)))
    text = filler_token_ids(engine)
    arrivals = []
    for i, r in enumerate(trace):
        params = SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True)
        arrivals.append(Arrival(str(i), r.arrival_s, _cut(text, start=97 * i, length=r.prompt_len),
                                params, chat=False))
    return arrivals


def filler_token_ids(engine) -> list[int]:
    """Token ids of real text (every chat prompt, joined) to cut synthetic prompts from."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:   # a model without a tokenizer: any valid ids will do
        return [1 + (7 * j) % (engine.vocab_size - 1) for j in range(4096)]
    return tokenizer.encode("\n\n".join(load_prompts("chat")))


def _cut(ids: list[int], start: int, length: int) -> list[int]:
    """``length`` ids from ``ids`` starting at ``start``, wrapping around (distinct per request)."""
    return [ids[(start + j) % len(ids)] for j in range(length)]
