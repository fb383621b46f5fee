"""Published numbers with their sources (data/reference/published-numbers.csv).

A lab never types a paper's number into a cell: it looks the row up and prints value and source
together, so "every number is measured in this run or cited" holds by construction.

    cite("OPT-13B FP16")   # Citation(claim='KV cache per token OPT-13B FP16', value='800 KB = ...', source='Kwon ...')
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from labkit.traces import DATA_DIR

REFERENCE_CSV = DATA_DIR / "reference" / "published-numbers.csv"


@dataclass(frozen=True)
class Citation:
    claim: str
    value: str
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


@functools.lru_cache(maxsize=1)
def all_citations() -> tuple[Citation, ...]:
    with open(REFERENCE_CSV, newline="", encoding="utf-8") as f:
        return tuple(Citation(row["claim"], row["value"], row["source"]) for row in csv.DictReader(f))


def cite(claim_contains: str) -> Citation:
    """The one row whose claim contains ``claim_contains`` (case-insensitive)."""
    needle = claim_contains.lower()
    found = [c for c in all_citations() if needle in c.claim.lower()]
    if len(found) != 1:
        claims = [c.claim for c in found]
        raise KeyError(f"expected one reference row matching {claim_contains!r}, found {len(found)}: {claims}")
    return found[0]


def percentages(citation: Citation) -> list[float]:
    """'20.4/13.3/57.3/8.9 %' → [20.4, 13.3, 57.3, 8.9] (the paper's Fig. 2 breakdowns)."""
    numbers = citation.value.replace("%", "").strip()
    return [float(x) for x in numbers.split("/")]


def cite_line(claim_contains: str, zh: str) -> str:
    """A cited row as a learner reads it, in the current language (``labkit.set_language``): Chinese
    (the default) first with the row's English claim in parentheses,
    ``cite_line("Default block size", "默认块大小")`` → '默认块大小（Default block size and rationale）：16 tokens; … —— Kwon …';
    in English the row's claim alone: 'Default block size and rationale: 16 tokens; … —— Kwon …'."""
    from labkit.i18n import t

    c = cite(claim_contains)
    return t(f"{zh}（{c.claim}）：{c.value} —— {c.source}", f"{c.claim}: {c.value} —— {c.source}")
