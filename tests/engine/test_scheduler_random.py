"""Random traces through the real scheduler and KV managers (simulated model, shadow KV cache).

Each example draws an engine configuration — paged or contiguous KV, continuous or static batching,
prefix caching on shared prefixes, n-gram speculation, chunked prefill, a pool small enough to force
preemption — and a trace: requests arriving at random steps with random prompt and output lengths,
parallel sampling (n > 1, paged only), and aborts at random steps. The trace is stepped to the end.

Specification, checked while it runs and when it ends:
- after every step and every abort the KV manager's invariants hold (ref counts equal the block
  tables holding each block; contiguous regions never overlap), and no block is freed twice;
- every scheduled sequence reads back exactly its own tokens from the KV cache (``ShadowRunner``),
  through the inputs the engine's own builder made (list path or persistent batch, checked row by row);
- every request finishes, and the pool is empty again (paged: no used block; contiguous: no region);
- every request's output equals the oracle's (``expected_output``): what it would produce alone,
  so batching, preemption, prefix hits, copy-on-write and speculation never change a token; an
  aborted request's output is a prefix of it.

The default run draws a few hundred traces per test, and ``test_many_small_random_traces_...`` draws
``LABKIT_RANDOM_TRACES`` small ones (3,000 in ``make test``, which keeps the suite inside its time budget;
``LABKIT_RANDOM_TRACES=10000 pytest -k many_small`` is the long soak, about 95 s on two cores).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit import EngineConfig, SamplingParams, SpecConfig
from labkit.request import Request, RequestStatus
from labkit.sim.simulator import SIM_EOS
from tests.sim_oracle import expected_output, shadow_llm

ALPHABET = st.integers(97, 100)          # four letters: n-grams repeat, so speculation has matches


@dataclass(frozen=True)
class RequestSpec:
    request_id: str
    arrival_step: int
    prompt: tuple[int, ...]
    params: SamplingParams
    abort_step: int | None = None        # absolute step at which to abort ...
    abort_child: int = 0                 # ... the request itself (0) or its i-th child

    def abort_target(self, engine) -> str:
        """The id to abort: the request's, or its child's (children have engine-chosen ids)."""
        if self.abort_child == 0:
            return self.request_id
        return engine.get_request(self.request_id).child_ids[self.abort_child - 1]


@dataclass(frozen=True)
class TraceSpec:
    config: EngineConfig
    requests: tuple[RequestSpec, ...]


# ---------------------------------------------------------------------------------- strategies

@st.composite
def configs(draw) -> EngineConfig:
    kv_cache = draw(st.sampled_from(["paged", "contiguous"]))
    scheduler = draw(st.sampled_from(["continuous", "static"]))
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    max_model_len = draw(st.integers(8, 40))
    min_blocks = -(-max_model_len // block_size)          # one request of max_model_len always fits
    chunked = draw(st.booleans())
    spec = None
    if scheduler == "continuous" and draw(st.booleans()):
        lo = draw(st.integers(1, 2))
        spec = SpecConfig(method="ngram", num_speculative_tokens=draw(st.integers(1, 4)),
                          prompt_lookup_min=lo, prompt_lookup_max=lo + draw(st.integers(0, 2)))
    # Async scheduling takes every path a synchronous continuous engine takes, but speculation.
    async_scheduling = scheduler == "continuous" and spec is None and draw(st.booleans())
    return EngineConfig(
        block_size=block_size, num_blocks=draw(st.integers(min_blocks, 3 * min_blocks)),
        max_num_seqs=draw(st.integers(1, 6)), max_model_len=max_model_len,
        # Without chunked prefill a whole (re)computed sequence must fit one step's budget.
        max_num_batched_tokens=draw(st.integers(1 if chunked else max_model_len, max(48, max_model_len))),
        scheduler=scheduler, kv_cache=kv_cache, contiguous_reserve=draw(st.sampled_from(["max_model_len",
                                                                                         "max_tokens"])),
        enable_prefix_caching=kv_cache == "paged" and draw(st.booleans()), enable_chunked_prefill=chunked,
        speculative=spec, async_scheduling=async_scheduling, persistent_batch=draw(st.booleans()))


@st.composite
def requests(draw, index: int, config: EngineConfig, prefixes: list[list[int]]) -> RequestSpec:
    prefix = draw(st.sampled_from(prefixes)) if prefixes and draw(st.booleans()) else []
    tail = draw(st.lists(ALPHABET, min_size=1, max_size=12))
    prompt = tuple((prefix + tail)[-(config.max_model_len - 1):])
    # Parallel sampling needs paged KV; with static batching it can deadlock (see
    # test_baselines.py::test_static_batching_with_parallel_sampling_finishes), so not drawn there yet.
    paged_continuous = config.kv_cache == "paged" and config.scheduler == "continuous"
    n = draw(st.integers(1, min(3, config.max_num_seqs))) if paged_continuous else 1
    temperature = draw(st.sampled_from([0.0, 0.0, 0.7]))
    params = SamplingParams(temperature=temperature, max_tokens=draw(st.integers(1, 20)), n=n,
                            ignore_eos=draw(st.booleans()), seed=index if temperature else None)
    arrival = draw(st.integers(0, 12))
    abort_step = draw(st.none() | st.integers(arrival, arrival + 25))
    return RequestSpec(f"r{index}", arrival, prompt, params, abort_step, draw(st.integers(0, n - 1)))


@st.composite
def traces(draw, max_requests: int = 8, async_only: bool = False) -> TraceSpec:
    config = draw(configs())
    if async_only:
        config = replace(config, scheduler="continuous", speculative=None, async_scheduling=True)
    prefixes = draw(st.lists(st.lists(ALPHABET, min_size=1, max_size=20), max_size=2))
    num = draw(st.integers(1, max_requests))
    return TraceSpec(config, tuple(draw(requests(i, config, prefixes)) for i in range(num)))


# ---------------------------------------------------------------------------------- the driver

@dataclass
class TraceRun:
    llm: object
    steps: int
    max_running: int
    max_scheduled: int


def run_trace(trace: TraceSpec, max_steps: int = 5_000, prepare=None) -> TraceRun:
    """Step the trace to the end, checking the KV invariants after every step and abort. ``prepare``:
    called with the engine before the first request (e.g. to swap in another scheduler)."""
    llm = shadow_llm(trace.config)
    engine = llm.engine
    if prepare is not None:
        prepare(engine)
    arrivals = sorted(trace.requests, key=lambda r: r.arrival_step)
    aborts = sorted((r for r in trace.requests if r.abort_step is not None), key=lambda r: r.abort_step)
    step = max_running = max_scheduled = 0
    while arrivals or aborts or engine.has_unfinished_requests():
        while arrivals and arrivals[0].arrival_step <= step:
            r = arrivals.pop(0)
            engine.add_request(list(r.prompt), r.params, request_id=r.request_id)
        while aborts and aborts[0].abort_step <= step:
            engine.abort(aborts.pop(0).abort_target(engine))
            engine.kv.check_invariants()
        engine.step()
        engine.kv.check_invariants()
        max_running = max(max_running, len(engine.scheduler.running))
        num_scheduled = engine.metrics.last.batch_occupancy_perc * trace.config.max_num_seqs / 100
        max_scheduled = max(max_scheduled, round(num_scheduled))
        step += 1
        assert step < max_steps, f"no progress after {step} steps"
    return TraceRun(llm, step, max_running, max_scheduled)


def assert_pool_empty(engine) -> None:
    if engine.kv.layout == "paged":
        assert engine.kv.pool.num_used_blocks() == 0
        assert engine.kv.block_tables == {}
    else:
        assert engine.kv.regions == {}
    assert engine.kv.usage() == 0.0


def oracle(engine, req) -> list[int]:
    p = req.sampling_params
    first = None
    if req.parent_id is not None:
        first = engine.get_request(req.parent_id).output_token_ids[0]
    return expected_output(req.request_id, req.prompt_token_ids, p.max_tokens, engine.max_model_len,
                           ignore_eos=p.ignore_eos, first_token=first)


def assert_outputs_match_oracle(engine, trace: TraceSpec) -> None:
    aborted = {r.abort_target(engine) for r in trace.requests if r.abort_step is not None}
    for req in engine.requests.values():
        want = oracle(engine, req)
        got = req.output_token_ids
        if req.status is RequestStatus.FINISHED_ABORTED:
            assert req.request_id in aborted, f"{req.request_id} aborted without being asked to"
            assert got == want[:len(got)], f"{req.request_id}: aborted output is not a prefix of the oracle"
        else:
            assert got == want, f"{req.request_id} ({req.status.value}): {got} != oracle {want}"
            assert req.status is (RequestStatus.FINISHED_STOPPED if got[-1] == SIM_EOS
                                  and not req.sampling_params.ignore_eos else RequestStatus.FINISHED_LENGTH)


def assert_parallel_sampling_complete(engine, trace: TraceSpec) -> None:
    """Children exist once their parent produced its first token, and then all n - 1 of them."""
    for r in trace.requests:
        parent = engine.get_request(r.request_id)
        children = [rid for rid in parent.child_ids if rid in engine.requests]
        expected = r.params.n - 1 if parent.output_token_ids else 0
        assert len(children) == expected


def check_trace(trace: TraceSpec, prepare=None) -> TraceRun:
    run = run_trace(trace, prepare=prepare)
    engine = run.llm.engine
    assert all(req.is_finished for req in engine.requests.values())
    assert_pool_empty(engine)
    assert_outputs_match_oracle(engine, trace)
    assert_parallel_sampling_complete(engine, trace)
    stats = engine.stats()
    assert stats["num_finished_requests"] == len(engine.requests)
    assert stats["num_output_tokens"] == sum(len(r.output_token_ids) for r in engine.requests.values())
    return run


# ---------------------------------------------------------------------------------- the tests

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=250, **SETTINGS)
@given(traces())
def test_random_traces_finish_free_everything_and_match_the_oracle(trace):
    check_trace(trace)


@settings(max_examples=60, **SETTINGS)
@given(traces(max_requests=10).filter(lambda t: all(r.params.n == 1 for r in t.requests)))
def test_running_requests_never_exceed_max_num_seqs_without_parallel_sampling(trace):
    run = check_trace(trace)
    assert run.max_running <= trace.config.max_num_seqs
    assert run.max_scheduled <= trace.config.max_num_seqs


@settings(max_examples=250, **SETTINGS)
@given(traces(async_only=True))
def test_with_async_scheduling_random_traces_still_match_the_oracle_and_free_everything(trace):
    """Planning each step before the previous one's tokens are applied changes no token, no KV read
    and no invariant: preemption of a request whose row is in flight, a stop token in flight (one
    wasted row), aborts between steps and forks of a parent preempted mid-flight included."""
    check_trace(trace)


def _many_traces() -> int:
    raw = os.environ.get("LABKIT_RANDOM_TRACES", "3000")
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"LABKIT_RANDOM_TRACES must be a whole number of traces, got {raw!r}") from None
    if count < 1:
        raise ValueError(f"LABKIT_RANDOM_TRACES must be at least 1, got {count}")
    return count


@pytest.mark.slow
@settings(max_examples=_many_traces(), **SETTINGS)
@given(traces(max_requests=5))
def test_many_small_random_traces_finish_free_everything_and_match_the_oracle(trace):
    check_trace(trace)


def paths_taken(run: TraceRun, trace: TraceSpec) -> set[str]:
    """Which interesting engine paths one run went through."""
    engine, stats = run.llm.engine, run.llm.engine.stats()
    reqs = list(engine.requests.values())
    taken = {
        "preemption": stats["num_preemptions"] > 0,
        "prefix hit": stats["prefix_cache_hits"] > 0,
        "copy-on-write": bool(engine.runner.copies),
        "draft accepted": stats["spec_decode_num_accepted_tokens"] > 0,
        "draft rejected": stats["spec_decode_num_draft_tokens"] > stats["spec_decode_num_accepted_tokens"],
        "abort while running": any(r.status is RequestStatus.FINISHED_ABORTED and r.output_token_ids for r in reqs),
        "abort while waiting": any(r.status is RequestStatus.FINISHED_ABORTED and not r.output_token_ids for r in reqs),
        "eos": any(r.status is RequestStatus.FINISHED_STOPPED for r in reqs),
        "max_model_len": any(r.num_tokens == engine.max_model_len for r in reqs),
        "parallel sampling": any(r.parent_id for r in reqs),
        "static": trace.config.scheduler == "static",
        "contiguous": trace.config.kv_cache == "contiguous",
        "async": trace.config.async_scheduling,
        "persistent batch with drafts": trace.config.persistent_batch and stats["spec_decode_num_draft_tokens"] > 0,
        "persistent batch with copy-on-write": trace.config.persistent_batch and bool(engine.runner.copies),
        "async preemption": trace.config.async_scheduling and stats["num_preemptions"] > 0,
        "async parallel sampling": trace.config.async_scheduling and any(r.parent_id for r in reqs),
    }
    return {name for name, hit in taken.items() if hit}


def test_the_random_traces_reach_every_path_they_are_meant_to_check():
    seen: set[str] = set()

    @settings(max_examples=400, database=None, derandomize=True, **SETTINGS)
    @given(traces())
    def run(trace):
        seen.update(paths_taken(check_trace(trace), trace))

    run()

    @settings(max_examples=150, database=None, derandomize=True, **SETTINGS)
    @given(traces(async_only=True))
    def run_async(trace):
        seen.update(paths_taken(check_trace(trace), trace))

    run_async()
    assert seen == {"preemption", "prefix hit", "copy-on-write", "draft accepted", "draft rejected",
                    "abort while running", "abort while waiting", "eos", "max_model_len",
                    "parallel sampling", "static", "contiguous", "async", "async preemption",
                    "persistent batch with drafts", "persistent batch with copy-on-write",
                    "async parallel sampling"}


# ----------------------------------------------------------------------- targeted random cases

def _tiny_pool_trace(kv_cache: str, scheduler: str, seed: int) -> TraceSpec:
    import random

    rng = random.Random(seed)
    config = EngineConfig(block_size=2, num_blocks=12, max_num_seqs=4, max_model_len=24,
                          max_num_batched_tokens=32, kv_cache=kv_cache, scheduler=scheduler,
                          contiguous_reserve="max_tokens")
    reqs = tuple(RequestSpec(f"r{i}", rng.randrange(4), tuple(rng.choices(range(97, 101), k=rng.randint(4, 10))),
                             SamplingParams(max_tokens=rng.randint(6, 12), ignore_eos=True))
                 for i in range(6))
    return TraceSpec(config, reqs)


@pytest.mark.parametrize("seed", range(5))
def test_a_pool_too_small_for_the_batch_preempts_and_still_matches_the_oracle(seed):
    run = check_trace(_tiny_pool_trace("paged", "continuous", seed))
    assert run.llm.engine.stats()["num_preemptions"] > 0


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_contiguous_regions_make_requests_wait_instead_of_preempting(scheduler):
    # prompt + max_tokens reservations: at most two fit the 24 slots at once, so the rest queue.
    run = check_trace(_tiny_pool_trace("contiguous", scheduler, seed=0))
    assert run.max_running <= 2
    assert run.llm.engine.stats()["num_preemptions"] == 0


def test_without_chunked_prefill_a_prompt_longer_than_the_token_budget_is_refused():
    engine = shadow_llm(EngineConfig(max_num_batched_tokens=8, enable_chunked_prefill=False,
                                     max_model_len=64)).engine
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        engine.add_request([97] * 20, SamplingParams(max_tokens=4))


@given(st.lists(st.integers(0, 9), min_size=1, max_size=12), st.lists(st.integers(0, 9), max_size=5),
       st.integers(0, 20), st.integers(0, 20))
def test_a_token_slice_equals_slicing_the_whole_sequence(tokens, drafts, start, end):
    req = Request("r", tokens, SamplingParams(), 0.0, spec_token_ids=drafts)
    assert req.token_slice(start, end) == (list(tokens) + list(drafts))[start:end]
