"""docs/performance.md's headline table is taken from the saved llama.cpp peer reports, never typed in."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("performance_page", REPO / "scripts" / "performance_page.py")
page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(page)

REPORT = """# labkit vs llama.cpp on this CPU

measured 2026-12-07 on: Some CPU; torch ISA AVX2

## Batch-1 decode, 1 thread(s): labkit vs llama.cpp

| system | decode tokens/s (median) | min-max | vs labkit fp32 | labkit / llama.cpp, same precision |
|---|---|---|---|---|
| labkit fp32 | 50.4 | 50.0-50.9 | 1.00x | 1.10x |
| labkit bf16 | 20.4 | 20.1-20.7 | 0.40x | 0.41x |
| llama.cpp F32 | 45.8 | 45.7-45.9 | 0.91x |  |

## Batch-16 decode, 2 thread(s): labkit vs llama.cpp

| system | decode tokens/s (median) | min-max | vs labkit fp32 | labkit / llama.cpp, same precision |
|---|---|---|---|---|
| labkit q4_1 | 250.8 | 250.8-250.8 | 1.15x | 2.32x |
"""


def test_the_headline_rows_are_the_peer_reports_ratios_by_batch_threads_and_precision(tmp_path):
    kind = tmp_path / "some-cpu"
    kind.mkdir()
    (kind / "llama_cpp_peer.md").write_text(REPORT)
    assert page.peer_ratios(REPORT) == [("1", "1", {"fp32": "1.10x", "bf16": "0.41x"}), ("16", "2", {"q4_1": "2.32x"})]
    table = page.headline([kind])
    assert "| Some CPU; torch ISA AVX2 | 1 | 1 | 1.10x | 0.41x | — |" in table
    assert "| Some CPU; torch ISA AVX2 | 16 | 2 | — | — | 2.32x |" in table


def test_a_cpu_kind_without_a_peer_report_adds_no_headline(tmp_path):
    (tmp_path / "k").mkdir()
    assert page.headline([tmp_path / "k"]) == ""


LEVELS = """# labkit vs llama.cpp on this CPU, by instruction-set level

measured 2026-12-07 on: Some CPU; torch ISA AVX512

## LABKIT_ISA=avx2: Batch-1 decode, 1 thread(s): labkit vs llama.cpp

| system | decode tokens/s (median) | min-max | vs labkit fp32 | labkit / llama.cpp, same precision |
|---|---|---|---|---|
| labkit fp32 | 40.0 | 39.0-41.0 | 1.00x | absent |
| labkit bf16 | 60.0 | 59.0-61.0 | 1.50x | absent |

## LABKIT_ISA=avx512: Batch-16 decode, 2 thread(s): labkit vs llama.cpp

| system | decode tokens/s (median) | min-max | vs labkit fp32 | labkit / llama.cpp, same precision |
|---|---|---|---|---|
| labkit q4_1 | 250.8 | 250.8-250.8 | 1.15x | 1.70x |
"""


def test_a_forced_level_report_adds_one_headline_row_per_level_table_with_absent_kept(tmp_path):
    kind = tmp_path / "some-cpu"
    kind.mkdir()
    (kind / "llama_cpp_peer_isa_avx2_avx512.md").write_text(LEVELS)
    assert page.level_ratios(LEVELS) == [("avx2", "1", "1", {"fp32": "absent", "bf16": "absent"}),
                                         ("avx512", "16", "2", {"q4_1": "1.70x"})]
    assert page.peer_ratios(LEVELS) == []          # a level's table is not the CPU's own row
    table = page.headline([kind])
    assert "| Some CPU; torch ISA AVX512; forced LABKIT_ISA=avx2 | 1 | 1 | absent | absent | — |" in table
    assert "| Some CPU; torch ISA AVX512; forced LABKIT_ISA=avx512 | 16 | 2 | — | — | 1.70x |" in table
