"""The weight pack: a model's parameters in one file, in the layout the forward reads (q/k/v and gate/up
fused), each tensor on a 64-byte line, the data from a 2 MiB boundary of the file. Mapped, it gives a
process the weights without copying them: a class's shared cache (`shared_cache`) holds one pack that
every learner's kernel maps.

The mapping is private copy-on-write over the file's page cache: every process reading it shares the
same physical pages, and a write (nothing in labkit writes weights) copies one page for that process
instead of faulting. A pack is data, never code: a fixed magic, a JSON header (names, dtypes, shapes,
offsets) checked against the file's size and against the model it is loaded into, then raw
little-endian tensors. Held by tests/model/test_shared_cache.py.
"""

from __future__ import annotations

import json
import mmap
import os
import warnings
from pathlib import Path

import torch

from labkit.cache_dir import shared_root

MAGIC = b"LKWPACK1"
VERSION = 1
DATA_ALIGN = 2 << 20        # the tensors start on a 2 MiB boundary of the file (a huge page of a tmpfs)
TENSOR_ALIGN = 64           # each tensor starts on a cache line
PACKS = "packs"             # <shared cache>/packs: the weight packs
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pack_name(model_dir: Path, dtype: torch.dtype) -> str:
    return f"{Path(model_dir).name}-{str(dtype).removeprefix('torch.')}.lkw"


def pack_for(model_dir: Path, dtype: torch.dtype, device: torch.device) -> Path | None:
    """The shared pack for this model directory and dtype, when there is one to map (CPU only)."""
    root = shared_root()
    if root is None or device.type != "cpu":
        return None
    path = root / PACKS / pack_name(model_dir, dtype)
    return path if path.is_file() else None


# ------------------------------------------------------------------------------------- writing

def _aligned(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def write_pack(tensors: dict[str, torch.Tensor], path: Path) -> Path:
    """Write ``tensors`` (CPU, contiguous or not) as a weight pack at ``path`` (atomically)."""
    entries, offset = {}, 0
    for name, t in tensors.items():
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise ValueError(f"{name}: a weight pack holds {sorted(_DTYPES)}, not {dtype}")
        nbytes = t.numel() * t.element_size()
        entries[name] = {"dtype": dtype, "shape": list(t.shape), "offset": offset, "nbytes": nbytes}
        offset = _aligned(offset + nbytes, TENSOR_ALIGN)
    header = json.dumps({"version": VERSION, "tensors": entries}).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header)
        for name, t in tensors.items():
            f.seek(DATA_ALIGN + entries[name]["offset"])
            f.write(t.detach().contiguous().view(torch.uint8).reshape(-1).numpy().tobytes())
        f.truncate(DATA_ALIGN + offset)
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------- mapping

def read_header(path: Path) -> dict:
    """The pack's header, checked: a file that is not a pack, or whose ranges leave the file, names itself."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        magic, length = f.read(8), int.from_bytes(f.read(8), "little")
        if magic != MAGIC or not 2 <= length <= DATA_ALIGN - 16:
            raise ValueError(f"{path}: not a labkit weight pack")
        try:
            header = json.loads(f.read(length))
            tensors = header["tensors"]
            for name, e in tensors.items():
                count = 1
                for d in e["shape"]:
                    count *= int(d)
                if (e["dtype"] not in _DTYPES or e["offset"] % TENSOR_ALIGN
                        or e["nbytes"] != count * _DTYPES[e["dtype"]].itemsize
                        or e["offset"] < 0 or DATA_ALIGN + e["offset"] + e["nbytes"] > size):
                    raise ValueError(f"tensor {name} has a bad entry {e}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: not a readable labkit weight pack ({exc})") from None
    if header.get("version") != VERSION:
        raise ValueError(f"{path}: weight pack version {header.get('version')}, labkit reads {VERSION}")
    return header


def map_pack(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the pack, as views of one copy-on-write mapping of the file (shared pages)."""
    header = read_header(path)
    with open(path, "rb") as f:
        region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            region.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = torch.frombuffer(region, dtype=torch.uint8)       # keeps the mapping alive while in use
    out = {}
    for name, e in header["tensors"].items():
        start = DATA_ALIGN + e["offset"]
        out[name] = raw[start:start + e["nbytes"]].view(_DTYPES[e["dtype"]]).view(e["shape"])
    return out


def model_tensors(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters a pack holds: each once (a tied LM head is the embedding)."""
    return dict(net.named_parameters())


def use_pack(net: torch.nn.Module, path: Path) -> None:
    """Point every parameter of ``net`` at its tensor in the pack; the pack must hold exactly these."""
    tensors = map_pack(path)
    params = model_tensors(net)
    if set(tensors) != set(params):
        missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
        raise ValueError(f"{path}: the pack does not fit this model (missing {missing[:3]}, extra {extra[:3]})")
    with torch.no_grad():
        for name, p in params.items():
            t = tensors[name]
            if t.shape != p.shape or t.dtype != p.dtype:
                raise ValueError(f"{path}: {name} is {t.dtype} {tuple(t.shape)} in the pack, "
                                 f"{p.dtype} {tuple(p.shape)} in the model")
            p.data = t


def mapped_from(t: torch.Tensor) -> str | None:
    """The file a tensor's memory is mapped from (``/proc/self/maps``), or None for anonymous memory."""
    address = t.data_ptr()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5].strip() if len(parts) == 6 and parts[5].startswith("/") else None
    return None
