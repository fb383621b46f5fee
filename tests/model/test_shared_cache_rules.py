"""``labkit.model.shared_cache.prepare`` leaves the class cache readable by every learner and writable by
nobody but its owner: for the cache directory and every path under it, read bits for user, group and
others; search bits on every directory; no write bit for group or others. Asserted as mode bits on a
cache whose files were made with modes both too tight and too open (the model's conversion is stood in
for: the rule is about the modes, not the weights)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import torch

from labkit.model import shared_cache, weight_pack


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def prepared(tmp_path, monkeypatch):
    root = tmp_path / "class"
    model_dir = root / "models" / "SmolLM2-test"

    def converted(progress=True, root=None):
        model_dir.mkdir(parents=True)
        model_dir.chmod(0o700)
        for name, bits in (("config.json", 0o600), ("model.safetensors", 0o666), ("convert.sh", 0o777),
                           ("labkit.json", 0o400)):
            (model_dir / name).write_text("{}")
            (model_dir / name).chmod(bits)
        inner = model_dir / "blocks"
        inner.mkdir()
        inner.chmod(0o777)
        (inner / "b0").write_text("x")
        (inner / "b0").chmod(0o620)
        return model_dir

    monkeypatch.setattr(shared_cache, "ensure_default_converted", converted)
    monkeypatch.setattr(shared_cache, "read_model_config", lambda path: None)
    # On disk: nothing may try to mount (as root it would really mount a tmpfs).
    monkeypatch.setattr(shared_cache, "_huge_tmpfs", lambda where: pytest.fail("in_memory=False mounted"))
    # The fp32 pack is already there (written before, by an owner with a loose umask): it is kept, not rewritten.
    pack = weight_pack.write_pack({"w": torch.zeros(4)}, root / "packs" / weight_pack.pack_name(model_dir, torch.float32))
    pack.chmod(0o666)
    (root / "packs").chmod(0o777)
    root.chmod(0o700)
    packs = shared_cache.prepare(root, progress=False, in_memory=False, dtypes=(torch.float32,), tune=False)
    return root, packs, model_dir, pack


def test_every_path_in_the_class_cache_is_readable_by_all_and_writable_only_by_its_owner(prepared):
    root, packs, _, _ = prepared
    paths = [root, *root.rglob("*")]
    assert len(paths) == 14
    for path in paths:
        bits = mode(path)
        assert bits & 0o444 == 0o444, (path, oct(bits))
        assert bits & 0o022 == 0, (path, oct(bits))
        if path.is_dir():
            assert bits & 0o111 == 0o111, (path, oct(bits))


def test_the_modes_are_exactly_the_owners_plus_read_for_all(prepared):
    root, packs, model_dir, pack = prepared
    assert packs == root / "packs"
    assert {p.relative_to(root).as_posix(): oct(mode(p)) for p in [root, *sorted(root.rglob("*"))]} == {
        ".": "0o755",
        "kernels": "0o755",
        "kernels/compilers.json": "0o644",
        "models": "0o755",
        "models/SmolLM2-test": "0o755",
        "models/SmolLM2-test/blocks": "0o755",
        "models/SmolLM2-test/blocks/b0": "0o644",
        "models/SmolLM2-test/config.json": "0o644",
        "models/SmolLM2-test/convert.sh": "0o755",
        "models/SmolLM2-test/labkit.json": "0o444",
        "models/SmolLM2-test/model.safetensors": "0o644",
        "packs": "0o755",
        "packs/README": "0o644",
        f"packs/{pack.name}": "0o644",
    }
    assert weight_pack.read_header(pack)["tensors"]["w"]["shape"] == [4]      # kept as it was
    assert (packs / "README").read_text() == "labkit weight packs (labkit.model.shared_cache); on disk.\n"


def test_a_huge_page_cache_says_it_must_be_rebuilt_after_a_reboot(tmp_path, monkeypatch):
    root = tmp_path / "class"
    monkeypatch.setattr(shared_cache, "ensure_default_converted",
                        lambda progress=True, root=None: (root / "models" / "m").mkdir(parents=True) or root / "models" / "m")
    monkeypatch.setattr(shared_cache, "read_model_config", lambda path: None)
    monkeypatch.setattr(shared_cache, "_huge_tmpfs", lambda where: True)
    packs = shared_cache.prepare(root, progress=False, in_memory=True, dtypes=(), tune=False)
    assert (packs / "README").read_text() == ("labkit weight packs (labkit.model.shared_cache); "
                                              "a huge-page tmpfs: rebuilt by the hub's set-up after a reboot.\n")
    for path in [root, *root.rglob("*")]:
        assert mode(path) & 0o022 == 0 and mode(path) & 0o444 == 0o444


def test_the_learners_thread_count_is_labkit_threads_at_least_one(monkeypatch):
    for value, expected in (("3", 3), ("0", 1), ("-2", 1), ("many", 1)):
        monkeypatch.setenv("LABKIT_THREADS", value)
        assert shared_cache._learner_threads() == expected
    monkeypatch.delenv("LABKIT_THREADS")
    assert shared_cache._learner_threads() == 1


def test_describe_names_where_the_weights_come_from(tmp_path, monkeypatch):
    monkeypatch.delenv(shared_cache.ENV, raising=False)
    assert shared_cache.describe() == f"{shared_cache.ENV} is not set: each process keeps its own copy of the weights"
    monkeypatch.setenv(shared_cache.ENV, str(tmp_path))
    assert shared_cache.describe() == (f"shared weights from {tmp_path / 'packs'} in the file's page cache "
                                       "(4 KiB pages)")


# ------------------------------------------------------------------------------ the huge-page tmpfs

MOUNTS = ("/dev/sda1 / ext4 rw,relatime 0 0\n"
          "tmpfs /srv/class/packs tmpfs rw,nosuid,huge=always,mode=755 0 0\n"
          "odd /srv/four tmpfs rw,four\n"            # four fields: still a mount with options
          "cut /srv/three tmpfs\n")                  # three fields: no options to read


class FakeMountsPath(type(Path())):
    def read_text(self, *args, **kwargs):
        return MOUNTS if str(self) == "/proc/mounts" else super().read_text(*args, **kwargs)


def test_mount_options_are_the_fourth_field_of_the_line_whose_mount_point_is_the_path(monkeypatch):
    monkeypatch.setattr(shared_cache, "Path", FakeMountsPath)
    assert shared_cache._mount_options(Path("/srv/class/packs")) == "rw,nosuid,huge=always,mode=755"
    assert shared_cache._mount_options(Path("/srv/four")) == "rw,four"
    assert shared_cache._mount_options(Path("/srv/three")) == ""
    assert shared_cache._mount_options(Path("/srv/class")) == ""           # not a mount point
    assert shared_cache._mount_options(Path("/")) == "rw,relatime"


def test_describe_says_a_huge_page_tmpfs_when_the_packs_mount_has_huge_pages(tmp_path, monkeypatch):
    monkeypatch.setenv(shared_cache.ENV, str(tmp_path))
    seen = []
    monkeypatch.setattr(shared_cache, "_mount_options", lambda where: seen.append(where) or "rw,huge=within_size")
    assert shared_cache.describe() == f"shared weights from {tmp_path / 'packs'} in a huge-page tmpfs"
    assert seen == [tmp_path / "packs"]
    monkeypatch.setattr(shared_cache, "_mount_options", lambda where: "rw,size=1g")
    assert shared_cache.describe().endswith("in the file's page cache (4 KiB pages)")


class MountCalls:
    def __init__(self, returncode: int = 0):
        self.calls, self.returncode = [], returncode

    def __call__(self, args, **kwargs):
        self.calls.append((args, kwargs))
        return type("Done", (), {"returncode": self.returncode})()


def huge_env(monkeypatch, where, euid=0, mount="/bin/mount", is_mount=False, options="", returncode=0) -> MountCalls:
    """Stand-ins for the system (as root the real calls would mount): only ``where`` is a mount point."""
    calls = MountCalls(returncode)
    monkeypatch.setattr(shared_cache.os, "geteuid", lambda: euid)
    monkeypatch.setattr(shared_cache.shutil, "which", lambda name: mount if name == "mount" else None)
    monkeypatch.setattr(shared_cache.os.path, "ismount", lambda path: is_mount and path == where)
    monkeypatch.setattr(shared_cache, "_mount_options", lambda path: options if path == where else "")
    monkeypatch.setattr(shared_cache.subprocess, "run", calls)
    return calls


def test_only_root_with_a_mount_command_mounts_the_huge_page_tmpfs(tmp_path, monkeypatch):
    where = tmp_path / "a" / "packs"
    calls = huge_env(monkeypatch, where, euid=1000)
    assert shared_cache._huge_tmpfs(where) is False and calls.calls == [] and not where.exists()
    calls = huge_env(monkeypatch, where, mount=None)
    assert shared_cache._huge_tmpfs(where) is False and calls.calls == [] and not where.exists()
    calls = huge_env(monkeypatch, where)
    assert shared_cache._huge_tmpfs(where) is True and where.is_dir()
    assert calls.calls == [(["mount", "-t", "tmpfs", "-o", "huge=always,mode=0755", "tmpfs", str(where)],
                            {"capture_output": True, "text": True})]
    calls = huge_env(monkeypatch, where, returncode=32)
    assert shared_cache._huge_tmpfs(where) is False


def test_an_existing_mount_is_used_as_it_is_and_counts_only_with_huge_pages(tmp_path, monkeypatch):
    calls = huge_env(monkeypatch, tmp_path, is_mount=True, options="rw,huge=always")
    assert shared_cache._huge_tmpfs(tmp_path) is True and calls.calls == []
    calls = huge_env(monkeypatch, tmp_path, is_mount=True, options="rw,size=4g")
    assert shared_cache._huge_tmpfs(tmp_path) is False and calls.calls == []


# ------------------------------------------------------------------------------ prepare's defaults and tuning

def test_prepare_by_default_converts_with_progress_in_memory_both_dtypes_and_tunes(tmp_path, monkeypatch):
    root = tmp_path / "not" / "yet" / "class"          # parents made too
    seen = {}

    def converted(progress=True, root=None):
        seen["progress"], seen["root"] = progress, root
        (root / "models" / "m").mkdir(parents=True)
        return root / "models" / "m"

    cfg = object()
    monkeypatch.setattr(shared_cache, "ensure_default_converted", converted)
    monkeypatch.setattr(shared_cache, "read_model_config",
                        lambda path: cfg if path == root / "models" / "m" / "config.json" else None)
    monkeypatch.setattr(shared_cache, "_huge_tmpfs", lambda where: seen.setdefault("huge", where) and False)
    monkeypatch.setattr(shared_cache, "_tune_into", lambda *args: seen.setdefault("tuned", args))
    for dtype in (torch.float32, torch.bfloat16):      # already written: not rebuilt
        weight_pack.write_pack({"w": torch.zeros(1)}, root / "packs" / weight_pack.pack_name(root / "models" / "m", dtype))
    assert shared_cache.prepare(root) == root / "packs"
    assert seen["progress"] is True and seen["root"] == root and seen["huge"] == root / "packs"
    assert seen["tuned"] == (root, root / "models" / "m", cfg, (torch.float32, torch.bfloat16))


def test_prepare_makes_the_cache_and_its_parents_and_passes_progress_on(tmp_path, monkeypatch):
    """Nothing else makes the directories here: the conversion is stood in for by a model outside the cache."""
    model_dir = tmp_path / "elsewhere" / "m"
    model_dir.mkdir(parents=True)
    asked = []
    monkeypatch.setattr(shared_cache, "ensure_default_converted",
                        lambda progress=True, root=None: asked.append(progress) or model_dir)
    monkeypatch.setattr(shared_cache, "read_model_config", lambda path: None)
    root = tmp_path / "not" / "yet" / "class"
    packs = shared_cache.prepare(root, progress=False, in_memory=False, dtypes=(), tune=False)
    assert packs == root / "packs" and packs.is_dir() and asked == [False]


def test_prepare_builds_on_the_cpu_each_pack_not_yet_written_after_one_that_is(tmp_path, monkeypatch):
    """The fp32 pack is there, the bf16 one is not: only bf16 is built, on the CPU (the packs are host memory
    every learner's process maps)."""
    root = tmp_path / "class"
    model_dir = root / "models" / "m"
    model_dir.mkdir(parents=True)
    built = []

    class Net:
        def __init__(self, config, dtype, device):
            built.append((dtype, device))
            self.dtype = dtype

        def load_hf_state_dict(self, tensors):
            pass

    monkeypatch.setattr(shared_cache, "ensure_default_converted", lambda progress=True, root=None: model_dir)
    monkeypatch.setattr(shared_cache, "read_model_config", lambda path: None)
    monkeypatch.setattr(shared_cache, "LlamaModel", Net)
    monkeypatch.setattr(shared_cache, "model_tensors", lambda net: {"w": torch.ones(2, dtype=net.dtype)})
    fp32 = weight_pack.write_pack({"w": torch.zeros(1)}, root / "packs" / weight_pack.pack_name(model_dir, torch.float32))
    packs = shared_cache.prepare(root, progress=False, in_memory=False, dtypes=(torch.float32, torch.bfloat16),
                                 tune=False)
    assert built == [(torch.bfloat16, "cpu")]
    assert torch.equal(weight_pack.map_pack(fp32)["w"], torch.zeros(1))
    bf16 = weight_pack.map_pack(packs / weight_pack.pack_name(model_dir, torch.bfloat16))["w"]
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, torch.ones(2, dtype=torch.bfloat16))


def test_tuning_runs_under_the_class_cache_and_the_learners_threads_and_restores_both(tmp_path, monkeypatch):
    from labkit.kernels import linear_forms

    during = []

    cfg = object()

    class Net:
        def __init__(self, config, dtype, device):
            assert config is cfg and device == "cpu"
            self.dtype = dtype

        def tune(self):
            during.append((self.dtype, shared_cache.os.environ.get("LABKIT_CACHE"), torch.get_num_threads()))

    packs_used = []
    monkeypatch.setattr(shared_cache, "LlamaModel", Net)
    monkeypatch.setattr(shared_cache, "use_pack", lambda net, path: packs_used.append((type(net), path)))
    monkeypatch.setattr(linear_forms, "forget", lambda: during.append("forgot"))
    monkeypatch.setenv("LABKIT_THREADS", "3")
    threads = torch.get_num_threads()
    model_dir = tmp_path / "models" / "m"
    for saved in (None, "/home/learner/.cache/labkit"):
        during.clear()
        packs_used.clear()
        if saved is None:
            monkeypatch.delenv("LABKIT_CACHE", raising=False)
        else:
            monkeypatch.setenv("LABKIT_CACHE", saved)
        shared_cache._tune_into(tmp_path, model_dir, cfg, (torch.float32, torch.bfloat16))
        assert during == [(torch.float32, str(tmp_path), 3), (torch.bfloat16, str(tmp_path), 3), "forgot"]
        assert packs_used == [(Net, tmp_path / "packs" / "m-float32.lkw"), (Net, tmp_path / "packs" / "m-bfloat16.lkw")]
        assert shared_cache.os.environ.get("LABKIT_CACHE") == saved and torch.get_num_threads() == threads


def tiny_hf_dir(where: Path) -> Path:
    """A two-layer Llama in Hugging Face's layout, split over two safetensors files (random weights)."""
    from safetensors.torch import save_file

    cfg = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": True}
    where.mkdir(parents=True)
    (where / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(3)
    shapes = {"model.embed_tokens.weight": (32, 16), "model.norm.weight": (16,)}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (16,), p + "post_attention_layernorm.weight": (16,),
                       p + "self_attn.q_proj.weight": (16, 16), p + "self_attn.k_proj.weight": (8, 16),
                       p + "self_attn.v_proj.weight": (8, 16), p + "self_attn.o_proj.weight": (16, 16),
                       p + "mlp.gate_proj.weight": (32, 16), p + "mlp.up_proj.weight": (32, 16),
                       p + "mlp.down_proj.weight": (16, 32)})
    tensors = {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[:9]}, str(where / "model-00001.safetensors"))
    save_file({n: tensors[n] for n in names[9:]}, str(where / "model-00002.safetensors"))
    return where


def test_prepare_writes_one_pack_per_dtype_holding_the_models_converted_weights(tmp_path, monkeypatch):
    from labkit.model.llama import LlamaModel
    from labkit.model.loader import LazyTensors
    from labkit.model.model_config import ModelConfig

    root = tmp_path / "class"
    model_dir = tiny_hf_dir(root / "models" / "tiny")
    monkeypatch.setattr(shared_cache, "ensure_default_converted", lambda progress=True, root=None: model_dir)
    packs = shared_cache.prepare(root, progress=False, in_memory=False, dtypes=(torch.float32, torch.bfloat16),
                                 tune=False)
    assert sorted(p.name for p in packs.iterdir()) == ["README", "tiny-bfloat16.lkw", "tiny-float32.lkw"]
    cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
    for dtype in (torch.float32, torch.bfloat16):
        expected = LlamaModel(cfg, dtype=dtype, device="cpu")
        expected.load_hf_state_dict(LazyTensors(sorted(model_dir.glob("*.safetensors"))))
        mapped = weight_pack.map_pack(packs / weight_pack.pack_name(model_dir, dtype))
        assert list(mapped) == list(weight_pack.model_tensors(expected))
        for name, p in expected.named_parameters():
            assert mapped[name].dtype == dtype and torch.equal(mapped[name], p.detach()), name
        assert mode(packs / weight_pack.pack_name(model_dir, dtype)) == 0o444
