"""``labkit.model.shared_cache.prepare`` leaves the class cache readable by every learner and writable by
nobody but its owner: for the cache directory and every path under it, read bits for user, group and
others; search bits on every directory; no write bit for group or others. Asserted as mode bits on a
cache whose files were made with modes both too tight and too open (the model's conversion is stood in
for: the rule is about the modes, not the weights)."""

from __future__ import annotations

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
    assert len(paths) == 12
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
