"""``labkit.model.weight_pack`` from its definition, at exact boundaries.

A pack is the magic ``LKWPACK1``, an 8-byte little-endian header length, a JSON header, then each
tensor's raw bytes at ``DATA_ALIGN + offset`` with every offset on a 64-byte line; the file is read-only
for everyone. A header is refused by name when any entry's dtype is not a pack dtype, its offset is off
a line or negative, its byte count is not its shape's, or its range passes the end of the file (by one
byte is enough); a pack of another model, another shape or another dtype is refused naming the tensor.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import warnings

import pytest
import torch

from labkit.cache_dir import SHARED_ENV
from labkit.model import weight_pack
from labkit.model.weight_pack import DATA_ALIGN, MAGIC


def tiny_model():
    from labkit.model.llama import LlamaModel
    from labkit.model.model_config import ModelConfig

    cfg = ModelConfig.from_hf({"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
                               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})
    return LlamaModel(cfg)


def raw_pack(path, entries: dict, size: int, version=1):
    header = json.dumps({"version": version, "tensors": entries}).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header)
        f.truncate(size)
    return path


def test_write_pack_lays_each_tensor_on_a_cache_line_after_the_data_boundary(tmp_path):
    tensors = {"a": torch.arange(5, dtype=torch.float32), "b": torch.ones(3, dtype=torch.float16),
               "c": torch.zeros(2, 2, dtype=torch.bfloat16)}
    path = weight_pack.write_pack(tensors, tmp_path / "sub" / "p.lkw")
    header = weight_pack.read_header(path)
    assert header == {"version": 1, "tensors": {
        "a": {"dtype": "float32", "shape": [5], "offset": 0, "nbytes": 20},
        "b": {"dtype": "float16", "shape": [3], "offset": 64, "nbytes": 6},
        "c": {"dtype": "bfloat16", "shape": [2, 2], "offset": 128, "nbytes": 8}}}
    assert path.stat().st_size == DATA_ALIGN + 192           # the last tensor's end, rounded up to a line
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    raw = path.read_bytes()
    assert raw[:8] == MAGIC and int.from_bytes(raw[8:16], "little") == len(json.dumps(header).encode())
    assert raw[DATA_ALIGN:DATA_ALIGN + 20] == tensors["a"].numpy().tobytes()
    assert raw[DATA_ALIGN + 64:DATA_ALIGN + 70] == tensors["b"].numpy().tobytes()
    assert [p.name for p in path.parent.iterdir()] == ["p.lkw"]      # no temporary file left behind


def test_a_tensor_of_a_dtype_a_pack_does_not_hold_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"^ids: a weight pack holds \['bfloat16', 'float16', 'float32'\], not int64$"):
        weight_pack.write_pack({"w": torch.zeros(2), "ids": torch.zeros(2, dtype=torch.int64)}, tmp_path / "p.lkw")
    assert not (tmp_path / "p.lkw").exists()


def test_a_range_ending_exactly_at_the_end_of_the_file_is_read_and_one_byte_past_is_refused(tmp_path):
    entries = {"w": {"dtype": "float32", "shape": [4, 2], "offset": 64, "nbytes": 32}}
    exact = raw_pack(tmp_path / "exact.lkw", entries, DATA_ALIGN + 96)
    assert weight_pack.read_header(exact)["tensors"] == entries
    short = raw_pack(tmp_path / "short.lkw", entries, DATA_ALIGN + 95)
    with pytest.raises(ValueError, match="short.lkw: not a readable labkit weight pack .tensor w has a bad entry"):
        weight_pack.read_header(short)


@pytest.mark.parametrize("entry", [
    {"dtype": "float32", "shape": [4, 2], "offset": 32, "nbytes": 32},       # off a cache line
    {"dtype": "float32", "shape": [4, 2], "offset": -64, "nbytes": 32},      # before the data
    {"dtype": "float32", "shape": [4, 2], "offset": 0, "nbytes": 31},        # not the shape's bytes
    {"dtype": "float32", "shape": [4, 2], "offset": 0, "nbytes": 64},
    {"dtype": "int8", "shape": [4, 2], "offset": 0, "nbytes": 8},            # not a pack dtype
    {"dtype": "float32", "shape": [4, "x"], "offset": 0, "nbytes": 32},
    {"dtype": "float32", "offset": 0, "nbytes": 32},                          # no shape
])
def test_a_bad_entry_is_refused_naming_the_file(tmp_path, entry):
    path = raw_pack(tmp_path / "bad.lkw", {"w": entry}, DATA_ALIGN + 4096)
    with pytest.raises(ValueError, match="bad.lkw: not a readable labkit weight pack"):
        weight_pack.read_header(path)


def test_every_pack_dtype_counts_its_own_item_size(tmp_path):
    for dtype, size in (("float32", 4), ("bfloat16", 2), ("float16", 2)):
        good = raw_pack(tmp_path / f"{dtype}.lkw", {"w": {"dtype": dtype, "shape": [3], "offset": 0,
                                                          "nbytes": 3 * size}}, DATA_ALIGN + 64)
        assert weight_pack.read_header(good)["tensors"]["w"]["nbytes"] == 3 * size


@pytest.mark.parametrize("length, readable", [(1, False), (2, True), (DATA_ALIGN - 16, True), (DATA_ALIGN - 15, False)])
def test_the_header_length_must_fit_before_the_data(tmp_path, length, readable):
    path = tmp_path / "p.lkw"
    body = b"{}".ljust(length, b" ") if length >= 2 else b"{"
    path.write_bytes(MAGIC + length.to_bytes(8, "little") + body + b"\0" * 64)
    with pytest.raises(ValueError) as err:
        weight_pack.read_header(path)
    # A header that fits is read (and "{}" has no tensors); one that does not is not a pack at all.
    assert ("not a labkit weight pack" in str(err.value)) is not readable
    assert str(path) in str(err.value)


def test_another_version_is_refused_naming_both(tmp_path):
    path = raw_pack(tmp_path / "v2.lkw", {}, DATA_ALIGN, version=2)
    with pytest.raises(ValueError, match="v2.lkw: weight pack version 2, labkit reads 1"):
        weight_pack.read_header(path)


def test_a_pack_of_another_dtype_is_refused_naming_the_tensor(tmp_path):
    net = tiny_model()
    tensors = weight_pack.model_tensors(net)
    half = {**tensors, "norm": tensors["norm"].detach().to(torch.bfloat16)}
    path = weight_pack.write_pack(half, tmp_path / "p.lkw")
    with pytest.raises(ValueError, match=r"p.lkw: norm is torch.bfloat16 \(16,\) in the pack, "
                                         r"torch.float32 \(16,\) in the model"):
        weight_pack.use_pack(net, path)


def test_a_pack_with_a_tensor_the_model_lacks_is_refused_naming_it(tmp_path):
    net = tiny_model()
    extra = {**weight_pack.model_tensors(net), "lm_head.extra": torch.zeros(2)}
    path = weight_pack.write_pack(extra, tmp_path / "p.lkw")
    with pytest.raises(ValueError, match=r"does not fit this model \(missing \[\], extra \['lm_head.extra'\]\)"):
        weight_pack.use_pack(net, path)


def test_a_fitting_pack_becomes_every_parameter_mapped_from_the_file(tmp_path):
    net = tiny_model()
    torch.manual_seed(1)
    source = {name: torch.randn(p.shape) for name, p in weight_pack.model_tensors(net).items()}
    path = weight_pack.write_pack(source, tmp_path / "p.lkw")
    weight_pack.use_pack(net, path)
    for name, p in net.named_parameters():
        assert torch.equal(p, source[name]) and weight_pack.mapped_from(p) == str(path)


def test_pack_for_finds_the_class_pack_only_for_a_cpu_engine_with_a_shared_cache(tmp_path, monkeypatch):
    model_dir = tmp_path / "SmolLM2-x"
    assert weight_pack.pack_name(model_dir, torch.bfloat16) == "SmolLM2-x-bfloat16.lkw"
    monkeypatch.delenv(SHARED_ENV, raising=False)
    assert weight_pack.pack_for(model_dir, torch.float32, torch.device("cpu")) is None
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "shared"))
    assert weight_pack.pack_for(model_dir, torch.float32, torch.device("cpu")) is None       # not there
    pack = weight_pack.write_pack({"a": torch.zeros(1)}, tmp_path / "shared" / "packs" / "SmolLM2-x-float32.lkw")
    assert weight_pack.pack_for(model_dir, torch.float32, torch.device("cpu")) == pack
    assert weight_pack.pack_for(model_dir, torch.bfloat16, torch.device("cpu")) is None
    assert weight_pack.pack_for(model_dir, torch.float32, torch.device("meta")) is None


# ------------------------------------------------------------------------------ which file a tensor maps

def test_mapped_from_names_the_file_whatever_its_path_holds(tmp_path):
    spaced = tmp_path / "a class" / "two  spaces"                 # /proc/self/maps separates fields by spaces
    path = weight_pack.write_pack({"a": torch.ones(64)}, spaced / "p.lkw")
    assert weight_pack.mapped_from(weight_pack.map_pack(path)["a"]) == str(path)
    odd = tmp_path / os.fsdecode(b"not-utf8-\xff")                 # a name that is not UTF-8 is still named
    path = weight_pack.write_pack({"a": torch.ones(64)}, odd / "p.lkw")
    assert weight_pack.mapped_from(weight_pack.map_pack(path)["a"]) == str(path).replace("\udcff", "\ufffd")


def test_mapped_from_counts_a_mappings_first_and_last_byte_as_its_own(tmp_path):
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(8192))
    with open(path, "rb") as f:
        region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = torch.frombuffer(region, dtype=torch.uint8)
    assert weight_pack.mapped_from(raw) == str(path)             # the mapping's first byte
    assert weight_pack.mapped_from(raw[8191:]) == str(path)      # its last


def test_anonymous_and_named_non_file_memory_is_mapped_from_no_file():
    assert weight_pack.mapped_from(torch.zeros(1000)) is None            # the heap ("[heap]": not a file)
    assert weight_pack.mapped_from(torch.zeros(4_000_000)) is None       # an anonymous mapping of its own


def test_a_misfit_names_at_most_three_missing_and_three_extra_tensors(tmp_path):
    net = tiny_model()
    tensors = weight_pack.model_tensors(net)
    keep = {k: v for k, v in tensors.items() if not k.startswith("layers.0.")}     # drops 6 of the model's
    extra = {f"z.{i}": torch.zeros(1) for i in range(5)}
    path = weight_pack.write_pack({**keep, **extra}, tmp_path / "p.lkw")
    missing = sorted(set(tensors) - set(keep))
    assert len(missing) > 3
    with pytest.raises(ValueError) as err:
        weight_pack.use_pack(net, path)
    assert str(err.value) == (f"{path}: the pack does not fit this model (missing {missing[:3]}, "
                              "extra ['z.0', 'z.1', 'z.2'])")


def test_a_tensor_filling_its_lines_exactly_is_followed_on_the_next_line(tmp_path):
    entries = weight_pack.read_header(weight_pack.write_pack(
        {"a": torch.zeros(16), "b": torch.zeros(32, dtype=torch.float16), "c": torch.zeros(1)},
        tmp_path / "p.lkw"))["tensors"]
    assert [e["offset"] for e in entries.values()] == [0, 64, 128]          # 64 bytes, then 64 bytes: no gap
