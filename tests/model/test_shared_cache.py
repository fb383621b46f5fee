"""One copy of the model for a class (`labkit.model.shared_cache`, `weight_pack`): a weight pack maps back to the same
values, a file that is not a pack (or not this model's) is refused by name, a learner's engine maps the
class's pack and computes the same bits as one with its own copy, and two processes share the pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from labkit.cache_dir import SHARED_ENV
from labkit.kernels.tuning import cache
from labkit.model import shared_cache, weight_pack

REPO = Path(__file__).resolve().parents[2]


def small_tensors():
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(7, 5, generator=g), "b": torch.randn(3, generator=g).bfloat16(),
            "c": torch.randn(4, 9, generator=g)[:, ::2]}          # not contiguous


def test_a_pack_maps_back_to_the_same_values_on_cache_lines(tmp_path):
    tensors = small_tensors()
    path = weight_pack.write_pack(tensors, tmp_path / "p.lkw")
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert path.stat().st_mode & 0o222 == 0                       # read-only for everyone
    mapped = weight_pack.map_pack(path)
    assert list(mapped) == list(tensors)
    for name, t in tensors.items():
        assert mapped[name].dtype == t.dtype and torch.equal(mapped[name], t)
        assert mapped[name].data_ptr() % weight_pack.TENSOR_ALIGN == 0
        assert weight_pack.mapped_from(mapped[name]) == str(path)
    assert weight_pack.mapped_from(torch.zeros(1000)) is None     # anonymous memory


def test_a_write_to_a_mapped_tensor_stays_in_this_process(tmp_path):
    path = weight_pack.write_pack({"a": torch.zeros(1024)}, tmp_path / "p.lkw")
    mapped = weight_pack.map_pack(path)
    mapped["a"][0] = 5.0                                          # copy-on-write: no fault, file unchanged
    assert torch.equal(weight_pack.map_pack(path)["a"], torch.zeros(1024))


@pytest.mark.parametrize("damage, message", [
    (lambda raw: b"NOTAPACK" + raw[8:], "not a labkit weight pack"),
    (lambda raw: raw[:weight_pack.DATA_ALIGN + 8], "bad entry"),                       # cut short
    (lambda raw: raw[:16] + raw[16:].replace(b'"float32"', b'"int64!!"', 1), "bad entry"),
])
def test_a_damaged_pack_is_refused_by_name(tmp_path, damage, message):
    path = weight_pack.write_pack({"a": torch.ones(64, 64)}, tmp_path / "p.lkw")
    bad = tmp_path / "bad.lkw"
    bad.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as err:
        weight_pack.map_pack(bad)
    assert str(bad) in str(err.value)


def test_a_pack_of_another_model_is_refused(tmp_path):
    from labkit.model.llama import LlamaModel
    from labkit.model.model_config import ModelConfig

    cfg = ModelConfig.from_hf({"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
                               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})
    net = LlamaModel(cfg)
    tensors = weight_pack.model_tensors(net)
    path = weight_pack.write_pack({**tensors, "layers.0.o_proj": torch.zeros(16, 8)}, tmp_path / "p.lkw")
    with pytest.raises(ValueError, match="layers.0.o_proj is torch.float32 .16, 8."):
        weight_pack.use_pack(net, path)
    path = weight_pack.write_pack({k: v for k, v in tensors.items() if k != "norm"}, tmp_path / "q.lkw")
    with pytest.raises(ValueError, match="does not fit this model .missing \\['norm'\\]"):
        weight_pack.use_pack(net, path)


def test_the_shared_timings_are_read_under_the_learners_own(tmp_path, monkeypatch):
    shared, own = tmp_path / "shared", tmp_path / "own"
    shared.mkdir()
    own.mkdir()
    (shared / "linear_forms.json").write_text(json.dumps({"k1": "shared", "k2": "shared"}))
    (own / "linear_forms.json").write_text(json.dumps({"k2": "own"}))
    monkeypatch.setenv("LABKIT_CACHE", str(own))
    monkeypatch.setenv(SHARED_ENV, str(shared))
    assert cache.read() == {"k1": "shared", "k2": "own"}
    monkeypatch.delenv(SHARED_ENV)
    assert cache.read() == {"k2": "own"}


@pytest.fixture(scope="module")
def class_cache(tmp_path_factory):
    """The default model's shared cache, prepared as the hub's set-up does (on disk: no mount here)."""
    root = tmp_path_factory.mktemp("class") / "shared"
    shared_cache.prepare(root, progress=False, in_memory=False, tune=False)
    return root


def _greedy(llm, prompts):
    from labkit import SamplingParams
    return [o.outputs[0].token_ids for o in llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0))]


def test_a_learner_maps_the_class_pack_and_computes_the_same_bits(class_cache, monkeypatch, llm):
    from labkit import LLM

    prompts = ["The capital of France is", "1, 2, 3,"]
    own = llm                                   # the session's engine: the weights in its own memory
    expected = _greedy(own, prompts)
    own_head = own.engine.runner.model.lm_head.detach().clone()
    monkeypatch.setenv(SHARED_ENV, str(class_cache))
    shared = LLM(progress=False)
    net = shared.engine.runner.model
    assert shared.engine.model_dir.is_relative_to(class_cache)
    packs = list((class_cache / weight_pack.PACKS).glob("*-float32.lkw"))
    assert all(weight_pack.mapped_from(p) == str(packs[0]) for p in net.parameters())
    assert torch.equal(net.lm_head, own_head)
    assert _greedy(shared, prompts) == expected


def test_a_bf16_engine_maps_the_bf16_pack_and_computes_the_same_bits(class_cache, monkeypatch):
    from labkit import LLM, EngineConfig

    prompts = ["The capital of France is"]
    config = EngineConfig(device="cpu", dtype="bfloat16")
    expected = _greedy(LLM(config=config, progress=False), prompts)
    monkeypatch.setenv(SHARED_ENV, str(class_cache))
    shared = LLM(config=config, progress=False)
    mapped = weight_pack.mapped_from(shared.engine.runner.model.layers[0].qkv_proj)
    assert mapped is not None and mapped.endswith("-bfloat16.lkw")
    assert _greedy(shared, prompts) == expected


def test_two_learners_share_the_pages_of_the_pack(class_cache):
    """Each of two processes that read every weight holds the pack resident, at most half of it in PSS."""
    script = textwrap.dedent("""
        import sys, torch
        from labkit.model.loader import load_model
        net = load_model(None, torch.device("cpu"), torch.float32, progress=False)[0]
        print(sum(float(p.double().sum()) for p in net.parameters()), flush=True)
        sys.stdin.read()
    """)
    env = dict(os.environ, **{SHARED_ENV: str(class_cache)}, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    try:
        sums = [p.stdout.readline() for p in procs]
        assert sums[0] == sums[1] and sums[0].strip()
        from scripts.class_memory import mapping_kb
        pack = [mapping_kb(p.pid, "-float32.lkw") for p in procs]
        size_kb = next((class_cache / weight_pack.PACKS).glob("*-float32.lkw")).stat().st_size // 1024
        for m in pack:
            assert m["Rss"] >= 0.95 * (size_kb - weight_pack.DATA_ALIGN // 1024)
            assert m["Pss"] <= 0.51 * m["Rss"]       # shared by both (and by this process, if it maps it too)
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the huge-page tmpfs needs root")
def test_in_memory_the_packs_live_on_a_huge_page_tmpfs(tmp_path, class_cache):
    root = tmp_path / "shared"
    (root / "models").mkdir(parents=True)
    os.symlink(next((class_cache / "models").iterdir()), root / "models" / next((class_cache / "models").iterdir()).name)
    try:
        packs = shared_cache.prepare(root, progress=False, in_memory=True, tune=False)
        if not os.path.ismount(packs):
            pytest.skip("this system refused to mount a tmpfs")
        assert "huge=" in shared_cache._mount_options(packs)
        os.environ[SHARED_ENV] = str(root)
        try:
            assert "huge-page tmpfs" in shared_cache.describe()
        finally:
            os.environ.pop(SHARED_ENV)
        pack = next(packs.glob("*.lkw"))
        assert weight_pack.read_header(pack)["tensors"]
    finally:
        if os.path.ismount(root / weight_pack.PACKS):
            subprocess.run(["umount", "--lazy", str(root / weight_pack.PACKS)], check=True)
