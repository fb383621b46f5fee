"""What a comparison concludes: a :class:`Verdict` (direction and confidence), from per-round ratios.

How it concludes (:func:`verdict_from_ratios`): with margin m,

    ============================  ===============  =========================================
    per-round ratios              direction        confidence
    ============================  ===============  =========================================
    all above 1 + m               greater          clear
    all below 1 − m               less             clear
    all within [1 − m, 1 + m]     same             clear
    anything else, or one round   from the ratio   within noise
    load > cores, or an arm's     from the ratio   machine busy (overrides the above)
    rounds spread > max_spread
    ============================  ===============  =========================================

Counted or simulated quantities are deterministic: :meth:`Verdict.exact` makes a clear verdict. The
words a verdict is read out in live in ``sentences``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from labkit.labs.common.measure import sentences

DIRECTIONS = ("greater", "less", "same")
CONFIDENCES = ("clear", "within noise", "machine busy")
DEFAULT_MARGIN = 0.05
DEFAULT_MAX_SPREAD = 1.5     # an arm whose slowest round took 1.5× its fastest was disturbed


@dataclass(frozen=True)
class Verdict:
    """What a comparison shows and how sure it is. ``ratio`` is candidate over baseline of the
    compared quantity (for ``quantity="speed"``: a speed-up); ``ratio_min``/``ratio_max`` its range
    over rounds. ``reasons`` says why the confidence is not clear."""

    direction: str
    confidence: str
    ratio: float
    ratio_min: float
    ratio_max: float
    margin: float
    id: str = ""
    claim: tuple[str, str] = ("", "")
    quantity: str = "time"
    clock: str = ""
    rounds: int = 0
    load_before: float | None = None
    load_after: float | None = None
    cores: int = 1
    cpu: str = ""
    spread: float | None = None         # the largest slowest/fastest round of an arm
    reasons: tuple[str, ...] = ()
    deterministic: bool = False

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence must be one of {CONFIDENCES}, got {self.confidence!r}")

    @property
    def clear(self) -> bool:
        return self.confidence == "clear"

    @property
    def busy(self) -> bool:
        return self.confidence == "machine busy"

    @classmethod
    def exact_ratio(cls, value: float, reference: float, *, margin: float = 0.0, **info) -> "Verdict":
        return cls.exact(value / reference if reference else math.inf, margin=margin, **info)

    @classmethod
    def exact(cls, ratio: float, *, margin: float = 0.0, clock: str = "exact (counted or simulated)",
              **info) -> "Verdict":
        """A deterministic quantity (counted tokens, a simulation): the same on every run and
        every machine, so its verdict is clear; the direction compares ``ratio`` with 1 ± margin."""
        return cls(_direction(ratio, margin), "clear", ratio, ratio, ratio, margin, clock=clock,
                   rounds=1, deterministic=True, **info)

    # -- sentences

    def sentence(self, *, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str],
                 unit: str = "×", digits: int = 2, warn: bool = True) -> str:
        """The conclusion in the current language. Each template is a (zh, en) clause stating the
        finding as if it were certain; it may use ``{ratio}``, ``{lo}``, ``{hi}`` (formatted
        numbers). The confidence decides the hedge around it. ``warn=False``: a busy machine gets
        a short hedge only, the section printing ``busy_warning`` once for all its sentences."""
        return sentences.render(self, greater=greater, less=less, same=same, unit=unit, digits=digits, warn=warn)

    @property
    def confidence_label(self) -> str:
        """The confidence in the reader's language, Chinese with the English term (a table cell)."""
        return sentences.confidence_label(self.confidence)

    def mark(self, *, greater: tuple[str, str] = ("", ""), less: tuple[str, str] = ("", ""),
             same: tuple[str, str] = ("", "")) -> str:
        """A short table mark: the direction's (zh, en) word when clear, else the hedge."""
        return sentences.mark(self, greater=greater, less=less, same=same)

    def as_entry(self) -> dict[str, Any]:
        entry = asdict(self)
        entry["claim"] = {"zh": self.claim[0], "en": self.claim[1]}
        entry["load"] = {"before": self.load_before, "after": self.load_after, "cores": self.cores}
        return entry

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Verdict:
        """The verdict again from its saved JSON: ``as_entry``'s (a results summary, extra keys such as
        ``load`` ignored) or a plain ``asdict`` (a section record). JSON has no tuples (the claim may be a
        {zh, en} object) and no infinity (an undefined ratio was saved as null)."""
        names = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in entry.items() if k in names}
        for key in ("ratio", "ratio_min", "ratio_max"):
            if key in kw and kw[key] is None:
                kw[key] = math.inf
        claim = kw.get("claim")
        if isinstance(claim, Mapping):
            kw["claim"] = (claim.get("zh", ""), claim.get("en", ""))
        elif claim is not None:
            kw["claim"] = tuple(claim)
        if "reasons" in kw:
            kw["reasons"] = tuple(kw["reasons"] or ())
        return cls(**kw)


def _direction(ratio: float, margin: float) -> str:
    if ratio > 1 + margin:
        return "greater"
    if ratio < 1 - margin:
        return "less"
    return "same"


def verdict_from_ratios(ratios: list[float], *, margin: float = DEFAULT_MARGIN, ratio: float | None = None,
                        load: float | None = None, cores: int = 1, spread: float | None = None,
                        max_spread: float = DEFAULT_MAX_SPREAD, **info) -> Verdict:
    """The verdict from per-round ratios (the table in the module docstring). ``ratio`` is the
    headline ratio (default: the median round); ``load`` the highest load seen while measuring;
    ``spread`` the largest max/min of an arm's rounds."""
    ratios = [float(r) for r in ratios]
    if not ratios or any(not math.isfinite(r) or r < 0 for r in ratios):
        raise ValueError(f"ratios must be a non-empty list of finite non-negative numbers, got {ratios!r}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    central = statistics.median(ratios) if ratio is None else float(ratio)
    # The range a sentence prints holds the headline too: a headline built across rounds (each arm's
    # best round) can fall outside the paired rounds, and "1.6x, rounds 1.3-1.5x" reads as a contradiction.
    lo, hi = min(min(ratios), central), max(max(ratios), central)
    reasons: list[str] = []
    if lo > 1 + margin and central > 1 + margin:
        direction, confidence = "greater", "clear"
    elif hi < 1 - margin and central < 1 - margin:
        direction, confidence = "less", "clear"
    elif lo >= 1 - margin and hi <= 1 + margin:
        direction, confidence = "same", "clear"
    else:
        direction, confidence = _direction(central, margin), "within noise"
        reasons.append(f"round ratios {lo:.3g}–{hi:.3g} do not all lie on one side of 1 ± {margin:g}")
    if len(ratios) < 2 and confidence == "clear":
        confidence = "within noise"       # one round has no spread: nothing says how large the noise is
        reasons.append("one round only: no spread to judge the noise by")
    if load is not None and load > cores:
        confidence = "machine busy"
        reasons.append(f"load {load:.1f} above {cores} cores")
    if spread is not None and spread > max_spread:
        confidence = "machine busy"
        reasons.append(f"an arm's rounds spread {spread:.2f}× (more than {max_spread:g}×): disturbed")
    if load is not None and info.get("load_after") is None:
        info["load_after"] = load
    return Verdict(direction, confidence, central, lo, hi, margin, cores=cores, reasons=tuple(reasons),
                   rounds=len(ratios), spread=spread, **info)
