"""Per-request sampling parameters (vLLM names)."""

from __future__ import annotations

from dataclasses import dataclass

GREEDY_TEMPERATURE = 1e-5   # temperatures below this sample greedily


def _check_number(name: str, value, lo: float, hi: float, *, integer: bool = False,
                  lo_open: bool = False, allowed: str = "") -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{name} must be {'an int' if integer else 'a number'}, got {value!r}")
    if value != value or (value <= lo if lo_open else value < lo) or value > hi:
        raise ValueError(f"{name} must be in {allowed}, got {value!r}")


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token.

    temperature == 0 means greedy (argmax); so does any temperature below ``GREEDY_TEMPERATURE``
    (1e-5, vLLM's floor too): dividing logits by a smaller number overflows float32. top_k == 0 or -1 disables top-k; top_p == 1 disables
    nucleus sampling. ``seed`` makes a request's random draws reproducible whatever it is batched with.
    Without one, the k-th sequence an engine registers (counting from 0, children included) is seeded
    ``engine seed * 1_000_003 + k``: pass that seed to replay one request of a run on its own.
    ``n`` > 1 samples n continuations of one prompt that share the prompt's KV blocks.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int = 64
    seed: int | None = None
    ignore_eos: bool = False
    n: int = 1
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_number("temperature", self.temperature, 0.0, 100.0, allowed="[0, 100] (0 = greedy)")
        _check_number("top_k", self.top_k, -1, 1 << 31, integer=True, allowed="{-1, 0} (off) or >= 1")
        _check_number("top_p", self.top_p, 0.0, 1.0, lo_open=True, allowed="(0, 1]")
        _check_number("max_tokens", self.max_tokens, 1, 1 << 31, integer=True, allowed=">= 1")
        _check_number("n", self.n, 1, 64, integer=True, allowed="[1, 64]")
        if self.seed is not None:
            _check_number("seed", self.seed, 0, (1 << 63) - 1, integer=True, allowed="[0, 2**63)")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(self.stop_token_ids, "__iter__"):
            raise ValueError(f"stop_token_ids must be a list or tuple of ints, got {self.stop_token_ids!r}")
        stops = tuple(self.stop_token_ids)
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in stops):
            raise ValueError(f"stop_token_ids must be non-negative ints, got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop_token_ids", stops)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE
