"""The GGUF files the llama.cpp peer benchmark loads: the shipped Q4_1 file, and F32 / BF16 copies of it.

The F32 and BF16 files are written from the shipped file itself: same metadata (tokenizer, chat
template, hyper-parameters), same tensor names and order, every quantised tensor dequantised with
gguf-py (exactly the fp32 weights labkit's loader makes, in llama.cpp's own row order, so no q/k
permutation is involved) and, for BF16, rounded to nearest even (as ``torch.Tensor.bfloat16`` does
for labkit's bf16 mode). llama.cpp's ``convert_hf_to_gguf.py`` would need ``sentencepiece`` to
convert labkit's cached HF directory, for the same numbers; writing the copy here needs only
gguf-py, which labkit already uses. Files are cached under ``<labkit cache>/gguf``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from labkit.model.loader import cache_root, find_default_gguf

FILE_TYPES = {"F32": 0, "BF16": 32}          # general.file_type: LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_BF16
SKIP_FIELDS = ("GGUF.", "general.architecture", "general.file_type")


def gguf_path(kind: str) -> Path:
    """The GGUF file for ``kind`` (Q4_1: the shipped one; F32 / BF16: written once, then cached)."""
    if kind == "Q4_1":
        return find_default_gguf()
    if kind not in FILE_TYPES:
        raise ValueError(f"kind must be one of Q4_1, {', '.join(FILE_TYPES)}; got {kind!r}")
    source = find_default_gguf()
    out = cache_root() / "gguf" / f"{source.stem.replace('.Q4_1', '')}.{kind}-{source.stat().st_size}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        write_retyped(source, tmp, kind)
        os.replace(tmp, out)
    return out


def _copy_fields(reader, writer, kind: str) -> None:
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if key.startswith(SKIP_FIELDS):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(FILE_TYPES[kind])


def retyped_tensor(data: np.ndarray, tensor_type, kind: str):
    """(array, raw ggml type) of one tensor in ``kind``: dequantised to fp32, then BF16 if asked."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    w = dequantize(data, tensor_type).astype(np.float32)
    if kind == "F32" or w.ndim == 1:                  # norms stay F32, as llama.cpp's converter keeps them
        return w, GGMLQuantizationType.F32
    return quantize(w, GGMLQuantizationType.BF16), GGMLQuantizationType.BF16


def write_retyped(source: Path, out: Path, kind: str) -> None:
    """Write ``source`` (a GGUF file) to ``out`` with every tensor in ``kind`` (F32 or BF16)."""
    from gguf import GGUFReader, GGUFWriter

    reader = GGUFReader(str(source))
    writer = GGUFWriter(str(out), reader.fields["general.architecture"].contents())
    _copy_fields(reader, writer, kind)
    for t in reader.tensors:
        array, raw = retyped_tensor(t.data, t.tensor_type, kind)
        shape = tuple(reversed(t.shape.tolist()))          # GGUF lists dims innermost first
        writer.add_tensor(t.name, array.reshape(shape[:-1] + (array.shape[-1],)), raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
