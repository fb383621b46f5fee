"""The optional llama.cpp peer benchmark: its skip path and pure helpers only (it is not part of
``make test``; ``python -m bench.llama_cpp_peer`` runs it when llama-cpp-python is installed)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import gguf_files, llama_cpp_peer


def test_without_llama_cpp_the_benchmark_skips_with_a_clear_message(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    reason = llama_cpp_peer.skip_reason()
    assert "llama-cpp-python" in reason
    sections = llama_cpp_peer.run(llama_cpp_peer.parse_args(["--tiny"]))
    assert len(sections) == 1 and "skipped" in sections[0].title and sections[0].rows == [[reason]]


def test_a_llama_cpp_that_does_not_import_is_a_skip_not_a_crash(monkeypatch):
    import builtins
    import importlib.util

    real_import, real_find = builtins.__import__, importlib.util.find_spec

    def failing_import(name, *args, **kwargs):
        if name == "llama_cpp":
            raise ModuleNotFoundError("No module named 'diskcache'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "llama_cpp" else real_find(name, *a))
    monkeypatch.setattr(builtins, "__import__", failing_import)
    reason = llama_cpp_peer.skip_reason()
    assert "does not import" in reason and "diskcache" in reason


def test_decode_rate_counts_steps_after_the_first():
    assert llama_cpp_peer.decode_rate([1.0, 1.5, 2.0]) == pytest.approx(2.0)          # 2 steps in 1 s
    assert llama_cpp_peer.decode_rate([0.0, 1.0], rows=16) == pytest.approx(16.0)
    assert np.isnan(llama_cpp_peer.decode_rate([1.0]))
    steps = [(0.0, 3), (1.0, 4), (2.0, 4), (3.0, 2)]
    assert llama_cpp_peer.full_window(steps, 4) == [1.0, 2.0]


def test_threads_are_counts_or_cores_and_a_bad_one_is_refused_by_name():
    import os

    cores = len(os.sched_getaffinity(0))
    assert llama_cpp_peer.parse_args([]).threads == [1]                        # one thread, as the labs measure
    assert llama_cpp_peer.parse_args(["--threads", "1,cores"]).threads == list(dict.fromkeys([1, cores]))
    assert llama_cpp_peer.thread_counts("3, 1,3") == [3, 1]
    for bad in ("0", "-1", "two", "", "1,,2"):
        with pytest.raises(Exception, match="threads"):
            llama_cpp_peer.thread_counts(bad)


def test_the_prompt_set_is_the_same_token_ids_for_both_sides(tokenizer):
    singles, batch = llama_cpp_peer.prompt_set(tokenizer, 16)
    assert len(batch) == 16 and batch[:len(singles)] == singles[:16]
    assert all(isinstance(t, int) for p in singles for t in p)


def _tiny_gguf(path, rng):
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_token_list(["<a>", "b", "c"])
    writer.add_file_type(3)
    q = rng.standard_normal((32, 64)).astype(np.float32)
    writer.add_tensor("blk.0.attn_q.weight", quantize(q, GGMLQuantizationType.Q4_1), raw_dtype=GGMLQuantizationType.Q4_1)
    writer.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(64).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("kind", ["F32", "BF16"])
def test_retyped_gguf_keeps_metadata_and_holds_the_dequantised_values(tmp_path, kind):
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    _tiny_gguf(tmp_path / "q.gguf", np.random.default_rng(0))
    gguf_files.write_retyped(tmp_path / "q.gguf", tmp_path / "out.gguf", kind)
    src, out = GGUFReader(str(tmp_path / "q.gguf")), GGUFReader(str(tmp_path / "out.gguf"))
    assert out.fields["tokenizer.ggml.tokens"].contents() == ["<a>", "b", "c"]
    assert out.fields["llama.block_count"].contents() == 1
    assert out.fields["general.file_type"].contents() == gguf_files.FILE_TYPES[kind]
    (q_src, norm_src), (q_out, norm_out) = src.tensors, out.tensors
    assert q_out.name == q_src.name and q_out.shape.tolist() == q_src.shape.tolist() == [64, 32]
    assert q_out.tensor_type.name == kind and norm_out.tensor_type.name == "F32"     # norms stay F32
    want = torch.from_numpy(dequantize(q_src.data, q_src.tensor_type).reshape(32, 64).astype(np.float32))
    got = torch.from_numpy(dequantize(q_out.data, q_out.tensor_type).reshape(32, 64).astype(np.float32))
    assert torch.equal(got, want if kind == "F32" else want.bfloat16().float())    # round to nearest even
    assert np.array_equal(norm_out.data, norm_src.data)


def test_an_unknown_gguf_kind_is_named():
    with pytest.raises(ValueError, match="kind"):
        gguf_files.gguf_path("Q8_0")


def test_isa_runs_one_child_per_level_with_the_level_forced_and_titles_its_tables(monkeypatch):
    import json
    import subprocess
    from types import SimpleNamespace

    assert llama_cpp_peer.parse_args(["--isa", "all"]).isa == ["generic", "avx2", "avx512", "avx512bf16"]
    with pytest.raises(SystemExit):
        llama_cpp_peer.parse_args(["--isa", "avx1024"])
    calls = []

    def child(cmd, env, **kwargs):
        calls.append((cmd, env))
        section = {"title": "Batch-1 decode, 1 thread(s): labkit vs llama.cpp", "headers": ["system"],
                   "rows": [["labkit bf16"]], "notes": []}
        return SimpleNamespace(returncode=0, stdout="noise\n" + json.dumps([section]), stderr="")

    monkeypatch.setattr(subprocess, "run", child)
    argv = ["--quick", "--isa", "avx2,avx512", "--threads", "1"]
    sections = llama_cpp_peer.run_levels(llama_cpp_peer.parse_args(argv), argv)
    assert [c[1]["LABKIT_ISA"] for c in calls] == ["avx2", "avx512"]
    assert [(c[1]["ATEN_CPU_CAPABILITY"], c[1]["ONEDNN_MAX_CPU_ISA"]) for c in calls] == [("avx2", "AVX2"),
                                                                                       ("avx512", "AVX512_CORE")]
    assert all("--isa" not in c[0] and c[0][-4:] == ["--quick", "--threads", "1", "--as-json"] for c in calls)
    titled = [s.title for s in sections if s.title.startswith("LABKIT_ISA=")]
    assert titled == ["LABKIT_ISA=avx2: Batch-1 decode, 1 thread(s): labkit vs llama.cpp",
                      "LABKIT_ISA=avx512: Batch-1 decode, 1 thread(s): labkit vs llama.cpp"]


def test_without_llama_cpp_a_level_table_marks_its_numbers_absent():
    run = llama_cpp_peer.Run
    results = [{"labkit fp32": run([[1, 2]], 10.0), "labkit bf16": run([[1, 2]], 15.0)} for _ in range(2)]
    section = llama_cpp_peer.table(results, "t", [])
    assert [row[0] for row in section.rows] == ["labkit fp32", "labkit bf16"]
    assert [row[-1] for row in section.rows] == ["absent", "absent"] and section.rows[1][3] == "1.50x"
