"""Lab 01's measurement helpers (labkit/labs) compute what the lab says they compute.

The real-model checks use a handful of tokens; the fragmentation checks use the simulated model and
hand-made traces whose pool split is worked out by hand below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.events import StepEnd
from labkit.kv.breakdown import PARTS, snapshot_slots
from labkit.labs.common.lazy import once
from labkit.labs.common.machine import meminfo_budget
from labkit.labs.common.references import cite
from labkit.labs.lab01_kv_cache import fragmentation as frag
from labkit.labs.lab01_kv_cache import measure as kv
from labkit.labs.lab01_kv_cache import preemption, servers
from labkit.labs.lab01_kv_cache.quiz import questions
from labkit.labs.lab01_kv_cache.solutions import FirstFitAllocator, kv_bytes_per_token
from labkit.traces import TraceRequest

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "01_kv_cache.ipynb"


# ----------------------------------------------------------------------------- bytes per token

def test_kv_bytes_per_token_formula_equals_the_engine_tensor_size_per_token(llm):
    facts, shape = kv.kv_tensor_facts(llm), kv.engine_shape(llm)
    assert facts.total_bytes == llm.engine.kv_cache.nbytes
    assert facts.bytes_per_token == shape.bytes_per_token
    assert shape.bytes_per_token == kv_bytes_per_token(30, 3, 64, facts.element_bytes)


def test_published_opt13b_shape_gives_the_papers_800_kb():
    opt = next(s for s in kv.published_shapes() if s.name.startswith("OPT-13B"))
    assert opt.bytes_per_token == 2 * 5120 * 40 * 2 == 819_200
    assert "800 KB" in cite("KV cache per token OPT-13B").value


def test_kv_budget_counts_the_tokens_left_after_the_weights():
    shape = kv.KVShape("toy", 1, 1, 1, 2, num_params=10)        # 4 B per token, 20 B of weights
    assert kv.kv_budget([shape], 100)[0].tokens_that_fit == (100 - 20) // 4
    assert kv.kv_budget([shape], 10)[0].tokens_that_fit == 0


# ----------------------------------------------------------------------------- cache vs recompute

def test_cache_processes_one_token_per_new_token_and_recompute_the_whole_sequence(llm):
    comparison = kv.compare_cache_recompute(llm, kv.text_prompt(llm, 4), 3)
    assert [c.tokens_processed for c in comparison.cache] == [4, 1, 1]
    assert [c.tokens_processed for c in comparison.recompute] == [4, 5, 6]
    assert [c.context_len for c in comparison.recompute] == [4, 5, 6]
    assert comparison.same_output and len(comparison.cache_output) == 3


def test_staggered_run_records_prefill_and_decode_tokens_per_step(llm):
    rows = kv.staggered_run(llm, [kv.text_prompt(llm, 8), kv.text_prompt(llm, 4, 1)], [0, 2], max_tokens=3)
    assert [(r.prefill_tokens, r.decode_tokens) for r in rows] == [(8, 0), (0, 1), (4, 1), (0, 1), (0, 1)]


def test_once_measures_on_first_call_only():
    calls = []
    run = once(lambda x: calls.append(x) or len(calls), "a")
    assert (run(), run(), calls) == (1, 1, ["a"])


# ----------------------------------------------------------------------------- the misreading

def test_preemption_recomputes_exactly_the_dropped_tokens_and_keeps_the_output(llm):
    prompts = [kv.text_prompt(llm, 16, i) for i in range(2)]   # 16 + 3 tokens: 2 blocks each, 4 in all
    kept, dropped, frugal = preemption.compare_pools(prompts, max_tokens=3, small_blocks=3)
    assert (kept.num_blocks, kept.num_preemptions, kept.tokens_recomputed) == (4, 0, 0)
    assert dropped.num_preemptions >= 1
    assert dropped.tokens_recomputed == dropped.tokens_lost > 0
    assert dropped.outputs == kept.outputs
    # the remedy, measured: the same small pool admitting one request at a time recomputes nothing, in more steps
    assert (frugal.num_blocks, frugal.max_num_seqs, frugal.num_preemptions, frugal.tokens_recomputed) == (3, 1, 0, 0)
    assert frugal.outputs == kept.outputs and frugal.num_steps > kept.num_steps
    again = preemption.pools_from_record(preemption.record_pools((kept, dropped, frugal)))
    assert [r.tokens_recomputed for r in again] == [0, dropped.tokens_recomputed, 0]


# ----------------------------------------------------------------------------- fragmentation

def test_pool_split_agrees_with_the_engines_waste_metrics_every_step():
    llm = servers.paper_like_server("max_model_len")
    seen = []
    llm.engine.hooks.subscribe(seen.append, StepEnd)
    report = frag.replay_breakdown(llm, servers.azure_conv_trace(12, seed=3), "test")
    assert report.num_steps == len(seen) > 0
    for event in seen:
        parts = snapshot_slots(event.block_map, event.stats.kv_external_frag_perc)
        reserved = parts["used"] + parts["reserved_later"] + parts["internal"]
        if reserved:
            assert 100 * parts["reserved_later"] / reserved == pytest.approx(event.stats.kv_reserved_unused_perc)
            assert 100 * parts["internal"] / reserved == pytest.approx(event.stats.kv_internal_frag_perc)
            assert 100 * (reserved - parts["used"]) / reserved == pytest.approx(event.stats.kv_waste_perc)
        assert sum(parts.values()) == pytest.approx(servers.PAPER_POOL_SLOTS)
    assert sum(report.breakdown.as_dict().values()) == pytest.approx(100)


def test_simulated_allocator_split_worked_by_hand():
    # 9 slots, exact reservations. Step 0: A, B, C fill the arena, D (4) waits with nothing free.
    # Step 1: A and C are gone; 6 slots free in two holes of 3, so D still waits: external = 6.
    # Step 2: B is gone, D sits at 0; the other 5 slots are plainly free.
    trace = [TraceRequest(0, 2, 1), TraceRequest(0, 1, 2), TraceRequest(0, 2, 1), TraceRequest(0, 3, 1)]
    split = frag.simulate_allocator(FirstFitAllocator, trace, num_slots=9)
    expected = {"used": 5 + 2 + 3, "reserved_later": 4 + 1 + 1, "internal": 0, "external": 6, "free": 5}
    assert split.as_dict() == pytest.approx({k: 100 * v / 27 for k, v in expected.items()})


def test_max_length_reservation_is_internal_fragmentation():
    trace = [TraceRequest(0, 2, 2)]          # needs 4, reserves 8: 4 slots internal for both steps
    split = frag.simulate_allocator(FirstFitAllocator, trace, num_slots=8, reserve_len=8)
    assert split.internal == pytest.approx(50.0)
    assert split.used + split.reserved_later == pytest.approx(50.0)


def test_simulated_allocator_tracks_the_engines_contiguous_layout():
    trace = servers.azure_conv_trace(40, seed=5)
    engine = frag.replay_breakdown(servers.paper_like_server("max_model_len"), trace, "engine").breakdown
    mine = frag.simulate_allocator(FirstFitAllocator, trace, servers.PAPER_POOL_SLOTS, reserve_len=2048)
    for part in PARTS:
        assert getattr(mine, part) == pytest.approx(getattr(engine, part), abs=2.0), part


class _AlwaysZero:
    def __init__(self, num_slots):
        pass

    def allocate(self, size):
        return 0

    def free(self, start):
        pass


class _NeverFrees(FirstFitAllocator):
    def free(self, start):
        pass


def test_a_broken_allocator_gets_a_message_in_the_learners_terms():
    trace = [TraceRequest(0, 2, 2)] * 3
    with pytest.raises(frag.AllocatorError, match="overlapping"):
        frag.simulate_allocator(_AlwaysZero, trace, num_slots=8)
    with pytest.raises(frag.AllocatorError, match="does free"):
        frag.simulate_allocator(_NeverFrees, trace, num_slots=8, reserve_len=8)


def test_paper_breakdowns_are_the_cited_fig2_rows():
    label, orca_max = frag.paper_breakdown("Orca(Max)")
    assert (orca_max.used, orca_max.internal) == (20.4, 57.3)
    assert sum(orca_max.as_dict().values()) == pytest.approx(100, abs=0.2)
    assert frag.paper_breakdown("Orca(Oracle)")[1].internal == 0


def test_paper_pool_holds_the_cited_15_7k_slots():
    assert round(servers.PAPER_POOL_SLOTS / 1000, 1) == float(cite("Max KV slots 13B").value.rstrip("K"))


# ----------------------------------------------------------------------------- machine, quiz, notebook

def test_memory_budget_reads_proc_meminfo(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       2048 kB\nMemFree:  1 kB\nMemAvailable:   1024 kB\n")
    budget = meminfo_budget(str(path))
    assert (budget.total_bytes, budget.available_bytes) == (2048 * 1024, 1024 * 1024)
    assert meminfo_budget(str(tmp_path / "absent")) is None


def test_quiz_has_eight_or_more_questions_each_answerable_and_explained():
    qs = questions()
    assert len(qs) >= 8
    for q in qs:
        assert q.check(q.answer).correct
        assert getattr(q, "explanations", None) or getattr(q, "explanation", None)
        wrong = [i for i in range(len(getattr(q, "options", ()))) if i != q.answer]
        assert not any(q.check(i).correct for i in wrong)


def test_notebook_is_committed_without_outputs_and_follows_the_template():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)
    headings = [line for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
    assert [h.split()[1] for h in headings] == [str(i) for i in range(1, 9)]
    assert sum("predict(" in "".join(c["source"]) for c in code) >= 5
