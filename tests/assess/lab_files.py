"""What the assessment tests share about the labs' data files (``quiz.toml``, ``exercises.toml``): the lab
packages, the TOML reader, and every leaf value of a parsed file."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:         # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
LABS = ("lab01_kv_cache", "lab02_paged_attention", "lab03_batching", "lab04_speculative", "lab05_engine_choice")

__all__ = ["LABS", "REPO", "leaf_values", "tomllib"]


def leaf_values(node) -> list:
    """Every value under a parsed TOML document's tables and arrays."""
    if isinstance(node, dict):
        return [v for x in node.values() for v in leaf_values(x)]
    if isinstance(node, list):
        return [v for x in node for v in leaf_values(x)]
    return [node]
