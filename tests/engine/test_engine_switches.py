"""Every combination of the engine's switches, swept (not sampled) through the simulated oracle.

The random traces (``test_scheduler_random.py``) draw configurations, so a rare combination of switches
can go untested for months and then fail one run in a hundred. Here each combination is enumerated:

    async scheduling × persistent batch × prefix caching × chunked prefill × n > 1 × a pool that preempts
    × n-gram speculation (synchronous engines only: async scheduling does not speculate)

and run through a few deterministic traces built to reach what the switch is about (shared whole-block
prefixes for prefix hits, n = 2 forks for copy-on-write, a pool of one sequence's blocks for preemption).
Each run is checked by ``check_trace``: KV invariants after every step, each row reading back exactly its
own tokens through the inputs the engine built (the persistent batch's block table included), every
output equal to the oracle's, the pool empty at the end. Each combination must also *reach* the path
its switches name, or the sweep would pass by not testing it.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from labkit import EngineConfig, SamplingParams, SpecConfig
from tests.engine.test_scheduler_random import RequestSpec, TraceSpec, check_trace, paths_taken

BLOCK = 4
MAX_LEN = 24


def _combinations():
    for async_, persistent, prefix, chunked, fork, preempt, spec in itertools.product((False, True), repeat=7):
        if async_ and spec:
            continue                      # async scheduling does not speculate (EngineConfig refuses it)
        yield pytest.param(async_, persistent, prefix, chunked, fork, preempt, spec,
                           id="-".join(name for name, on in (("async", async_), ("persistent", persistent),
                                                             ("prefix", prefix), ("chunked", chunked),
                                                             ("n2", fork), ("preempt", preempt), ("spec", spec))
                                       if on) or "plain")


def _config(async_, persistent, prefix, chunked, preempt, spec) -> EngineConfig:
    blocks_per_seq = -(-MAX_LEN // BLOCK)
    return EngineConfig(
        block_size=BLOCK, num_blocks=blocks_per_seq + 1 if preempt else 8 * blocks_per_seq,
        max_num_seqs=4, max_model_len=MAX_LEN,
        max_num_batched_tokens=10 if chunked else MAX_LEN, enable_chunked_prefill=chunked,
        scheduler="continuous", kv_cache="paged", enable_prefix_caching=prefix,
        speculative=SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2)
        if spec else None,
        async_scheduling=async_, persistent_batch=persistent)


def _traces(config: EngineConfig, fork: bool, seed: int) -> list[TraceSpec]:
    """Three traces: random requests over two shared prefixes (one exactly two blocks long); the
    issue-51 shape (one-token requests fill the prefix cache, then a long n = 2 prompt); a burst."""
    rng = random.Random(seed)
    prefixes = [[97, 98, 99, 100] * 2, [98, 97] * 3]
    reqs = []
    for i in range(6):
        prefix = rng.choice(prefixes) if rng.random() < 0.7 else []
        tail = [rng.randrange(97, 101) for _ in range(rng.randint(0, 6))] or [97]
        temperature = rng.choice([0.0, 0.0, 0.7])
        params = SamplingParams(temperature=temperature, max_tokens=rng.randint(2, 10), ignore_eos=rng.random() < 0.5,
                                n=2 if fork and i % 2 == 0 else 1, seed=i if temperature else None)
        reqs.append(RequestSpec(f"r{i}", rng.randrange(4), tuple(prefix + tail)[:MAX_LEN - 1], params))
    # One-token requests leave cached blocks; then a 7-token prompt forks, and in a pool of 6 blocks of 4 a
    # child is preempted in a step with no rows and readmitted on a prefix hit.
    small = replace(config, max_model_len=14, max_num_seqs=2, num_blocks=6 if config.num_blocks < 20 else 24,
                    max_num_batched_tokens=config.max_num_batched_tokens if config.enable_chunked_prefill else 14)
    one = SamplingParams(temperature=0.0, max_tokens=1)
    shaped = [RequestSpec(f"r{i}", 0, (97,), one) for i in range(3)]      # the sim's tokens follow the ids
    shaped.append(RequestSpec("r3", 0, (97,) * 7, SamplingParams(temperature=0.0, max_tokens=7 - 2 * seed,
                                                                 n=2 if fork else 1)))
    burst = [RequestSpec(f"b{i}", 0, tuple(prefixes[0] + [97 + i % 4]), SamplingParams(
        temperature=0.0, max_tokens=8, ignore_eos=True, n=2 if fork and i == 0 else 1)) for i in range(5)]
    return [TraceSpec(config, tuple(reqs)), TraceSpec(small, tuple(shaped)), TraceSpec(config, tuple(burst))]


@pytest.mark.parametrize("async_, persistent, prefix, chunked, fork, preempt, spec", list(_combinations()))
def test_every_switch_combination_matches_the_oracle_and_reaches_its_paths(async_, persistent, prefix, chunked,
                                                                             fork, preempt, spec):
    config = _config(async_, persistent, prefix, chunked, preempt, spec)
    seen: set[str] = set()
    for seed in range(2):
        for trace in _traces(config, fork, seed):
            seen |= paths_taken(check_trace(trace), trace)
    wanted = {"prefix hit"} if prefix else set()
    wanted |= {"parallel sampling", "copy-on-write"} if fork else set()
    wanted |= {"preemption"} if preempt else set()
    wanted |= {"draft accepted"} if spec else set()
    assert wanted <= seen, f"the sweep did not reach {wanted - seen}"


def test_a_fork_after_prefix_hits_with_async_persistent_batch_reads_its_own_blocks():
    """The trace that found a stale block table: a child is preempted in a step with no rows (which no runner
    sees) and readmitted with a prefix hit that ends exactly where its persistent-batch row ended; the row must
    be rewritten."""
    cfg = EngineConfig(block_size=4, num_blocks=6, max_num_seqs=2, max_num_batched_tokens=14, max_model_len=14,
                       scheduler="continuous", kv_cache="paged", contiguous_reserve="max_model_len",
                       enable_prefix_caching=True, enable_chunked_prefill=False, async_scheduling=True,
                       persistent_batch=True)
    one = SamplingParams(temperature=0.0, max_tokens=1)
    reqs = tuple(RequestSpec(f"r{i}", 0, (97,), one) for i in range(3)) + (
        RequestSpec("r3", 0, (97,) * 7, SamplingParams(temperature=0.0, max_tokens=7, n=2)),)
    run = check_trace(TraceSpec(cfg, reqs))
    assert run.llm.engine.stats()["num_preemptions"] > 0


@pytest.mark.slow       # the real model, four engines: about 20 s
def test_on_the_real_model_every_switch_on_gives_the_plain_engines_tokens(tokenizer):
    from labkit import LLM
    from labkit.traces import load_prompts

    prompts = [tokenizer.encode(p)[:40] for p in load_prompts("chat")[:6]]
    prompts[1] = prompts[0][:32] + prompts[1][:5]             # two whole blocks of 16 shared with prompt 0
    sampled = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=8, ignore_eos=True, n=2, seed=7)
    greedy = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    switches = dict(block_size=16, num_blocks=7, max_num_seqs=4, max_num_batched_tokens=24,
                    enable_chunked_prefill=True, enable_prefix_caching=True, persistent_batch=True)
    for params, extra in ((sampled, dict(async_scheduling=True)),
                          (greedy, dict(speculative=SpecConfig(method="ngram", num_speculative_tokens=3,
                                                               prompt_lookup_min=1, prompt_lookup_max=2)))):
        # plain: one request at a time (its n sequences together), no cache, whole prefill, synchronous
        plain = LLM(config=EngineConfig(max_num_seqs=params.n, enable_prefix_caching=False), progress=False)
        want = [[c.token_ids for c in o.outputs] for o in plain.generate(prompts, params)]
        every = LLM(config=EngineConfig(**switches, **extra), progress=False)
        every.generate(prompts[:1], params)                   # the cache holds prompt 0's blocks
        got = [[c.token_ids for c in o.outputs] for o in every.generate(prompts, params)]
        assert got == want, extra
        stats = every.engine.stats()
        assert stats["num_preemptions"] > 0 and stats["prefix_cache_hits"] > 0, stats
