"""Reference outputs that cannot change unless their inputs do, cached in a committed JSON file.

``transformers``' greedy ``generate`` on the default model is the slowest set-up in the suite (load
a second copy of the weights, then 8 × 48 sequential decode steps), yet its answer is a pure
function of: the weights, the transformers and torch versions, the prompts and the number of new
tokens. That tuple, hashed, is the key: a cache can only ever answer the exact question it was asked.

Tests only read the committed file (``find_reference``); it is written by hand, by
``scripts/regenerate_parity_reference.py`` (``cached_reference``), never by a test run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

VERSION_FIELDS = ("transformers", "torch")     # the environment that answered, not the question
WEIGHT_SUFFIXES = (".safetensors", ".json")   # the weights and the config that shapes them
CHUNK = 1 << 22


def model_digest(model_dir: Path) -> str:
    """sha256 over the weight and config files of ``model_dir`` (names and contents)."""
    digest = hashlib.sha256()
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.name != "labkit.json")
    if not any(p.suffix == ".safetensors" for p in files):
        raise FileNotFoundError(f"no .safetensors weights in {model_dir}")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def reference_key(model_dir: Path, prompts: list[list[int]], max_new_tokens: int, **settings) -> dict:
    """Everything the reference output depends on (``settings``: e.g. the dtype and attention)."""
    import torch
    import transformers

    prompts_digest = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
    return {"model_sha256": model_digest(model_dir), "transformers": transformers.__version__,
            "torch": torch.__version__, "prompts_sha256": prompts_digest, "max_new_tokens": max_new_tokens,
            **settings}


def key_id(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cached_reference(path: Path, key: dict, compute: Callable[[], list[list[int]]]) -> tuple[list[list[int]], bool]:
    """``(outputs, hit)``: the stored outputs for ``key``, or ``compute()``'s, stored for next time.

    The file holds one entry per key (CI and a laptop may differ in versions); entries of other
    keys are kept.
    """
    entries = json.loads(path.read_text()) if path.exists() else {}
    entry = entries.get(key_id(key))
    if entry is not None and entry["key"] == key:
        return entry["outputs"], True
    outputs = compute()
    entries[key_id(key)] = {"key": key, "outputs": outputs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    return outputs, False


def find_reference(path: Path, key: dict) -> dict | None:
    """The stored entry (``{"key": ..., "outputs": ...}``) that answers ``key``'s question, read only: the
    exact key if stored, else an entry that differs only in ``VERSION_FIELDS`` (the caller decides
    whether such versions matter); None if no entry asks the same question."""
    entries = json.loads(path.read_text()) if path.exists() else {}
    exact = entries.get(key_id(key))
    if exact is not None and exact["key"] == key:
        return exact
    question = {k: v for k, v in key.items() if k not in VERSION_FIELDS}
    same = [e for e in entries.values() if {k: v for k, v in e["key"].items() if k not in VERSION_FIELDS} == question]
    same.sort(key=lambda e: e["key"].get("torch") == key.get("torch"))     # the same torch first, if stored
    return same[-1] if same else None
