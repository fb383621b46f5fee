"""Read a GGUF file's quantised weights as codes and scales, without dequantising them.

``loader.convert_gguf`` turns the shipped Q4_1 file into fp32 once (the reference the parity tests
check). This module reads the same bytes the other way round, for ``EngineConfig(weights="q4_1")``:
each weight keeps the GGUF's own 4-bit codes and fp16 scales, nothing is re-quantised.

Block layouts (ggml, 32 weights along a row per block)::

    Q4_1: fp16 d | fp16 m | 16 bytes: byte j = code[j] (low nibble) | code[j + 16] (high nibble)
          w = d * code + m,   code in 0..15                                         (20 bytes)
    Q8_0: fp16 d | 32 x int8 code,   w = d * code                                   (34 bytes)

SmolLM2's file stores every layer matrix as Q4_1 and the tied embedding / LM head as Q8_0. Rows of
``attn_q`` / ``attn_k`` are in llama.cpp's RoPE order; the same row permutation the loader undoes on
the fp32 weights is undone here on codes and scales alike (it only moves whole rows).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from labkit.cache_dir import cache_root
from labkit.model.loader import _hf_name, _unpermute

BLOCK = 32


@dataclass(frozen=True)
class QuantizedWeight:
    """One [out, in] matrix as GGUF codes: ``w = scale * codes + minimum`` per block of 32 along ``in``.

    codes: uint8 0..15 (Q4_1) or int8 (Q8_0), [out, in]; scale, minimum: fp16 [out, in / 32]
    (``minimum`` is None for Q8_0, which has no offset)."""

    kind: str
    codes: torch.Tensor
    scale: torch.Tensor
    minimum: torch.Tensor | None

    def dequantize(self) -> torch.Tensor:
        """fp32 weights, computed as gguf-py does (``d * code + m`` in fp32): the loader's values."""
        out, inp = self.codes.shape
        w = self.codes.reshape(out, inp // BLOCK, BLOCK).float() * self.scale.float()[..., None]
        if self.minimum is not None:
            w = w + self.minimum.float()[..., None]
        return w.reshape(out, inp)


def q4_1_blocks(raw: np.ndarray, in_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8 [rows, in], d fp16 [rows, in/32], m fp16 [rows, in/32]) from Q4_1 bytes [rows, in/32*20]."""
    blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], in_features // BLOCK, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0]
    packed = blocks[..., 4:]
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=-1)     # [rows, blocks, 32]
    return codes.reshape(raw.shape[0], in_features), d, m


def q8_0_blocks(raw: np.ndarray, in_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes int8 [rows, in], d fp16 [rows, in/32]) from Q8_0 bytes [rows, in/32*34]."""
    blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], in_features // BLOCK, 34)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    codes = blocks[..., 2:].copy().view(np.int8)
    return codes.reshape(raw.shape[0], in_features), d


def _read_blocks(name: str, kind: str, in_features: int, raw: np.ndarray) -> QuantizedWeight:
    if kind == "Q4_1":
        codes, d, m = q4_1_blocks(raw, in_features)
        return QuantizedWeight(kind, torch.from_numpy(codes), torch.from_numpy(d), torch.from_numpy(m))
    if kind == "Q8_0":
        codes, d = q8_0_blocks(raw, in_features)
        return QuantizedWeight(kind, torch.from_numpy(codes), torch.from_numpy(d), None)
    raise ValueError(f"GGUF tensor {name} is {kind}; weights='q4_1' reads Q4_1 and Q8_0 tensors only")


def _cache_file(gguf_path: Path) -> Path:

    return cache_root() / "gguf" / f"{gguf_path.name}.{gguf_path.stat().st_size}.blocks.safetensors"


def quantized_blocks(gguf_path: Path) -> dict[str, tuple[str, int, np.ndarray]]:
    """{tensor name: (kind, in_features, raw block bytes [rows, bytes])} of every quantised tensor.

    GGUFReader parses the whole tokenizer metadata first (~3 s for SmolLM2's 49k tokens and merges),
    so the raw blocks are kept once in the labkit cache (``<cache>/gguf``, the tensor bytes only,
    ~100 MB) and later loads read them from there in a fraction of a second."""
    from safetensors.numpy import load_file, save_file

    cached = _cache_file(gguf_path)
    if cached.is_file():
        from safetensors import safe_open

        with safe_open(str(cached), framework="np") as f:
            layout = json.loads(f.metadata()["layout"])
        arrays = load_file(str(cached))
        return {name: (kind, n_in, arrays[name]) for name, (kind, n_in) in layout.items()}
    from gguf import GGUFReader

    out = {t.name: (t.tensor_type.name, int(t.shape[0]), np.ascontiguousarray(t.data))    # dims innermost first
           for t in GGUFReader(str(gguf_path)).tensors if t.tensor_type.name not in ("F32", "F16", "BF16")}
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        save_file({n: a for n, (_, _, a) in out.items()}, str(tmp),
                  metadata={"layout": json.dumps({n: [k, i] for n, (k, i, _) in out.items()})})
        os.replace(tmp, cached)
    except OSError:            # a read-only cache costs the 3 s again next time, nothing more
        pass
    return out


def _unpermuted(w: QuantizedWeight, n_head: int) -> QuantizedWeight:
    def rows(x):
        return None if x is None else torch.from_numpy(np.ascontiguousarray(_unpermute(x.numpy(), n_head)))

    return QuantizedWeight(w.kind, rows(w.codes), rows(w.scale), rows(w.minimum))


class QuantizedTensors(Mapping):
    """{Hugging Face name: QuantizedWeight}, each decoded from the raw blocks when asked for (rows in
    HF order), so unpacked codes exist for one matrix at a time while a model is built."""

    def __init__(self, blocks: dict[str, tuple[str, int, np.ndarray]], num_heads: int, num_kv_heads: int):
        self._blocks = {_hf_name(name): (name, *value) for name, value in blocks.items()}
        self._heads = num_heads, num_kv_heads

    def __getitem__(self, hf_name: str) -> QuantizedWeight:
        name, kind, in_features, raw = self._blocks[hf_name]
        w = _read_blocks(name, kind, in_features, raw)
        if name.endswith("attn_q.weight"):
            return _unpermuted(w, self._heads[0])
        if name.endswith("attn_k.weight"):
            return _unpermuted(w, self._heads[1])
        return w

    def __iter__(self):
        return iter(self._blocks)

    def __len__(self) -> int:
        return len(self._blocks)


def read_quantized(gguf_path: str | Path, num_heads: int, num_kv_heads: int) -> QuantizedTensors:
    """Every quantised tensor of a Llama GGUF file, by Hugging Face name, rows in HF order."""
    return QuantizedTensors(quantized_blocks(Path(gguf_path)), num_heads, num_kv_heads)


def gguf_source(model_dir: str | Path) -> Path:
    """The GGUF file a converted model directory came from (``labkit.json``'s ``source``)."""
    marker = Path(model_dir) / "labkit.json"
    source = json.loads(marker.read_text()).get("source") if marker.is_file() else None
    if not source or not Path(source).is_file():
        raise ValueError(f"weights='q4_1' runs the 4-bit codes of a GGUF file, and the model in {model_dir} "
                         "was not converted from one (use the default model, or weights='dense')")
    return Path(source)
