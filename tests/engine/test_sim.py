"""The simulated model ("virtual GPU"): the real engine, a roofline cost model instead of a forward pass.

Specification: runs are reproducible; the cost model behaves like a GPU (decode memory-bound, so a
bigger batch costs almost nothing extra; prefill compute-bound, so time grows with tokens); every
number it reports is marked simulated; trace replay honours arrival times on the virtual clock.
"""

from __future__ import annotations

import pytest

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit import events as ev
from labkit.replay import replay
from labkit.sim.cost import HARDWARE, MODELS, HardwareProfile, ModelProfile, step_time
from labkit.sim.simulator import SIM_EOS, SimRunner
from labkit.traces import TraceRequest, synthetic_trace

A100, LLAMA3 = HARDWARE["a100-80gb"], MODELS["llama-3-8b"]


def sim(**config) -> LLM:
    return LLM(model="sim", config=EngineConfig(**{"max_model_len": 2048, **config}), progress=False)


def run_trace(trace, watch: bool = False, **config):
    """Replay on the virtual clock; ``watch`` records every StepEnd (its block map is one entry per
    block, so keep the pool small when watching)."""
    llm = sim(**config)
    steps: list[ev.StepEnd] = []
    if watch:
        llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
    result = replay(llm.engine, trace, keep_outputs=True)
    return llm.engine, result, steps


# --------------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("config", [{}, {"scheduler": "static"}, {"kv_cache": "contiguous", "num_blocks": 2000},
                                    {"num_blocks": 40, "enable_prefix_caching": True},
                                    {"speculative": SpecConfig(method="ngram", num_speculative_tokens=2)}],
                         ids=["continuous", "static", "contiguous", "preempting", "ngram"])
def test_the_same_config_and_trace_give_the_same_run(config):
    trace = synthetic_trace(40, seed=3, prompt_len=(40, 1.0, 2, 300), output_len=(20, 1.0, 1, 200))
    config = {"num_blocks": 1000, **config}
    _, first, first_steps = run_trace(trace, watch=True, **config)
    _, again, again_steps = run_trace(trace, watch=True, **config)
    assert first.outputs == again.outputs
    assert [s.batch for s in first_steps] == [s.batch for s in again_steps]
    assert [s.stats.model_s for s in first_steps] == [s.stats.model_s for s in again_steps]
    assert first.stats["num_preemptions"] == again.stats["num_preemptions"]


def test_with_timed_arrivals_the_outputs_are_reproducible():
    # Which step a request joins may move by one between runs: the virtual clock includes the
    # *measured* scheduler CPU time (that is what lets labs show Python overhead), so only the
    # tokens, not the batch compositions, are bit-for-bit reproducible here.
    trace = synthetic_trace(40, seed=2, rate=80.0, prompt_len=(40, 1.0, 2, 300), output_len=(20, 1.0, 1, 200))
    assert run_trace(trace, max_num_seqs=8)[1].outputs == run_trace(trace, max_num_seqs=8)[1].outputs


def test_tokens_are_a_fixed_function_of_request_and_position_and_never_eos():
    llm = sim()
    outs = llm.generate([[97] * 5, [97] * 5], SamplingParams(max_tokens=50))
    ids = [o.request_id for o in outs]
    for rid, out in zip(ids, outs):
        assert out.token_ids == [SimRunner.next_byte(rid, 5 + i) for i in range(50)]
        assert SIM_EOS not in out.token_ids and out.finish_reason == "length"
    assert outs[0].token_ids != outs[1].token_ids              # same prompt, different request


# --------------------------------------------------------------------------------- cost model

TOY_HW = HardwareProfile("toy", mem_bandwidth=1e9, compute=1e12, memory_bytes=1e9, efficiency=0.5,
                         step_overhead_s=1e-3)
TOY_MODEL = ModelProfile("toy", num_params=1e6, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=4)


def test_step_time_is_the_roofline_maximum_plus_launch_overhead():
    # KV bytes per token = 2 (K,V) x 2 layers x 1 head x 4 dims x 2 bytes = 32.
    # bytes = 2e6 weights + (10 + 20) x 32 read + 3 x 32 written; FLOPs = 2e6 x 3 + 4 x 2 x 2 x 4 x (1x10 + 2x20)
    memory_s = (2e6 + 30 * 32 + 3 * 32) / (1e9 * 0.5)
    compute_s = (2e6 * 3 + 64 * 50) / (1e12 * 0.5)
    assert TOY_MODEL.kv_bytes_per_token == 32
    assert step_time(TOY_MODEL, TOY_HW, [1, 2], [10, 20]) == pytest.approx(max(memory_s, compute_s) + 1e-3)
    assert step_time(TOY_MODEL, TOY_HW, [], []) == 0.0


def test_decode_is_memory_bound_so_step_time_is_nearly_flat_in_batch_size():
    one = step_time(LLAMA3, A100, [1], [512])
    for batch in (2, 8, 16):
        assert step_time(LLAMA3, A100, [1] * batch, [512] * batch) < 1.1 * one
    # ... so tokens per second grow almost linearly with the batch:
    assert 16 / step_time(LLAMA3, A100, [1] * 16, [512] * 16) > 14 / one


def test_prefill_is_compute_bound_so_step_time_grows_with_prompt_tokens():
    t1, t2 = step_time(LLAMA3, A100, [2048], [2048]), step_time(LLAMA3, A100, [4096], [4096])
    compute_s = 2 * LLAMA3.num_params * 2048 / (A100.compute * A100.efficiency)
    memory_s = LLAMA3.weight_bytes / (A100.mem_bandwidth * A100.efficiency)
    assert compute_s > memory_s
    assert 2.0 <= t2 / t1 < 2.5             # linear in tokens, plus attention's quadratic share


def test_the_engine_charges_each_step_what_the_cost_model_says():
    llm = sim()
    steps: list[ev.StepEnd] = []
    llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
    llm.generate([[97] * 100, [98] * 30], SamplingParams(max_tokens=3))
    assert steps[0].stats.model_s == pytest.approx(step_time(LLAMA3, A100, [100, 30], [100, 30]))
    assert steps[1].stats.model_s == pytest.approx(step_time(LLAMA3, A100, [1, 1], [101, 31]))


def test_decode_steps_in_the_engine_cost_about_the_same_at_batch_1_and_32():
    def decode_step_s(batch: int) -> float:
        llm = sim(max_num_seqs=32)
        steps: list[ev.StepEnd] = []
        llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
        llm.generate([[97 + i % 26] * 64 for i in range(batch)], SamplingParams(max_tokens=8))
        return steps[-1].stats.model_s
    assert decode_step_s(32) < 1.1 * decode_step_s(1)


def test_the_default_pool_is_what_the_gpu_has_left_after_the_weights():
    llm = sim()
    bytes_per_block = LLAMA3.kv_bytes_per_token * 16
    assert llm.engine.kv.pool.num_blocks == int((A100.memory_bytes * 0.9 - LLAMA3.weight_bytes) // bytes_per_block)


def test_unknown_profiles_and_draft_models_are_refused_naming_the_option():
    with pytest.raises(ValueError, match="hardware"):
        LLM(model="sim", hardware="tpu-v9", progress=False)
    with pytest.raises(ValueError, match="model_profile"):
        LLM(model="sim", model_profile="gpt-9", progress=False)
    with pytest.raises(ValueError, match="draft"):
        LLM(model="sim", config=EngineConfig(speculative=SpecConfig(method="draft")), progress=False)


# ---------------------------------------------------------------------------- marked simulated

def test_everything_the_simulated_engine_reports_is_marked_simulated():
    llm = sim()
    steps: list[ev.StepEnd] = []
    llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
    llm.generate([[97] * 10], SamplingParams(max_tokens=3))
    assert llm.engine.simulated is True and llm.engine.stats()["simulated"] is True
    assert steps and all(s.stats.simulated for s in steps)
    assert "datasheet" in llm.engine.hardware.name          # the profile says where its numbers come from


def test_the_real_engine_is_not_marked_simulated():
    assert ev.StepStats.__dataclass_fields__["simulated"].default is False


# ------------------------------------------------------------------------ replay, virtual clock

def test_replay_adds_each_request_at_its_arrival_time_and_never_starts_it_earlier():
    trace = synthetic_trace(60, seed=1, rate=50.0, prompt_len=(200, 1.0, 2, 1500), output_len=(50, 1.0, 1, 300))
    engine, result, _ = run_trace(trace, max_num_seqs=8)
    assert result.stats["num_finished_requests"] == 60
    for rid, tr in zip(sorted(result.request_ids, key=int), trace):
        req = engine.get_request(rid)
        t = req.timings()
        assert req.arrival_time == pytest.approx(tr.arrival_s)
        assert t.first_scheduled_time >= req.arrival_time
        assert t.ttft_s >= 0 and t.queue_s >= 0
    assert result.stats["queue_p99_s"] > 0                       # 8 slots at 50 req/s: some queue


def test_an_idle_engine_jumps_its_clock_to_the_next_arrival():
    trace = [TraceRequest(0.0, 10, 3), TraceRequest(3600.0, 10, 3)]       # an hour apart
    engine, result, _ = run_trace(trace)
    late = engine.get_request(result.request_ids[1])
    assert late.first_scheduled_time == pytest.approx(3600.0)
    assert engine.clock.now < 3601.0 and result.wall_s < 60


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_virtual_clock_advances_by_each_steps_host_and_model_time(async_scheduling):
    """step_s: scheduler + model (sync) or scheduler + waiting for the overlapped model (async); the
    clock also carries the input preparation and stats/events the engine did (unreported_host_s)."""
    llm = LLM(model="sim", config=EngineConfig(max_num_seqs=8, async_scheduling=async_scheduling), progress=False)
    steps: list[ev.StepEnd] = []
    llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
    llm.generate([[97] * 30, [98] * 300], SamplingParams(max_tokens=20))
    engine = llm.engine
    assert engine.unreported_host_s > 0
    assert engine.clock.now == pytest.approx(sum(s.stats.step_s for s in steps) + engine.unreported_host_s)
    assert sum(s.stats.model_s for s in steps) <= engine.clock.now


def test_time_to_first_token_includes_the_prefill_step():
    llm = sim()
    steps: list[ev.StepEnd] = []
    llm.engine.hooks.subscribe(steps.append, ev.StepEnd)
    out, = llm.generate([[97] * 1000], SamplingParams(max_tokens=2))
    assert out.metrics.ttft_s >= steps[0].stats.model_s > 0
    assert out.metrics.e2e_s >= sum(s.stats.model_s for s in steps)
