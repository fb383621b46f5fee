"""Lab 02's timed verdicts under injected contention: the work is real, its time
comes from a work clock (known costs), and a contended clock over it never turns a verdict clearly
the other way."""

from __future__ import annotations

import functools

import pytest

from labkit.labs.common import measure
from labkit.labs.lab02_paged_attention import attention_cost
from tests.labs.noise import WorkClock, assert_never_clearly_opposite


@pytest.fixture
def work():
    return WorkClock()


def test_contention_never_makes_paged_attention_clearly_faster_than_dense(work, monkeypatch):
    real_dense, real_paged = attention_cost.dense_step, attention_cost.paged_step

    def dense(case, num_layers, kernel=attention_cost.SDPA, pool=None):
        out = real_dense(case, 1, kernel, pool)
        work.advance(1.0 * num_layers)
        return out

    def paged(case, backend, num_layers):
        out = real_paged(case, backend, 1)
        work.advance(1.25 * num_layers)      # the gather costs a quarter more (the paper's 20-26 %)
        return out

    monkeypatch.setattr(attention_cost, "dense_step", dense)
    monkeypatch.setattr(attention_cost, "paged_step", paged)
    monkeypatch.setattr(attention_cost, "compare", functools.partial(measure.compare, load=lambda: 0.0))
    case = attention_cost.make_case(num_seqs=2, context_len=32, block_size=16)
    assert_never_clearly_opposite(work, lambda: attention_cost.measure_indirection(case, rounds=5, num_layers=2),
                                  "greater")


@pytest.fixture(scope="module")
def small_servers():
    from labkit.labs.lab02_paged_attention import layouts

    return {kind: layouts.small_server(kind, num_blocks=16, max_model_len=32) for kind in ("contiguous", "paged")}


def test_contention_never_makes_paged_serving_clearly_faster_or_slower(work, small_servers, monkeypatch):
    from labkit.labs.lab02_paged_attention import layouts

    real_replay = layouts.replay

    def replay(engine, trace, **kwargs):
        out = real_replay(engine, trace, **kwargs)
        work.advance(1.0)          # the same steps and tokens either way: the same time
        return out

    monkeypatch.setattr(layouts, "replay", replay)
    monkeypatch.setattr(layouts, "small_server", lambda kind, *a, **k: small_servers[kind])
    monkeypatch.setattr(layouts, "machine_load", lambda: 0.0)
    trace = layouts.uniform_trace(2, prompt_len=8, output_len=3)

    def measure_once():
        contiguous, paged = layouts.compare_small(trace, num_blocks=16, max_model_len=32, name="t")
        return layouts.throughput_verdict(paged, contiguous)

    # Seed 39 slows both rounds of one arm alike: without the rounds' spread the verdict read "clearly faster".
    assert_never_clearly_opposite(work, measure_once, "same", verdict_of=lambda v: v, seeds=(0, 1, 2, 3, 39))


# ----------------------------------------------------------------------------- prefix caching's TTFT (engine timings)

def _prefix_runs(off_s, on_s, load=(0.1, 0.1)):
    from labkit.labs.lab02_paged_attention.sharing import PrefixRun

    n = len(off_s)
    return (PrefixRun(False, 80, (92,) * n, tuple(off_s), 92 * n, 0, n, 0, load),
            PrefixRun(True, 80, (92,) * n, tuple(on_s), 92 + 12 * (n - 1), 80 * (n - 1), n, n - 1, load))


def test_the_prefix_ttft_verdict_pairs_requests_from_the_second_on():
    from labkit.labs.lab02_paged_attention.sharing import ttft_verdict

    v = ttft_verdict(*_prefix_runs([0.5, 0.10, 0.11, 0.10], [0.5, 0.04, 0.04, 0.05]))
    assert (v.direction, v.confidence, v.rounds) == ("greater", "clear", 3)
    assert v.ratio == pytest.approx((0.31 / 3) / (0.13 / 3))
    assert ttft_verdict(*_prefix_runs([0.5, 0.10, 0.11], [0.5, 0.04, 0.04], load=(5.0, 5.0))).busy


@pytest.fixture(scope="module")
def prefix_servers():
    from labkit.labs.lab02_paged_attention import sharing

    return {caching: sharing.prefix_server(caching, num_blocks=64) for caching in (False, True)}


def test_contention_never_makes_prefix_caching_clearly_slow_the_first_token(work, prefix_servers, monkeypatch):
    """The real path: engines serve the prompts (interleaved off/on), their TTFT read from the
    injected clock; a forward pass costs 1 + 0.02 per computed token on the work clock. (The first
    forward of each shape is real; its logits are reused, since this CPU shared by many would spend
    a second on each: the timing path, not the model, is under test.)"""
    from labkit.labs.lab02_paged_attention import sharing

    for llm in prefix_servers.values():
        runner = llm.engine.runner
        real, seen = runner.execute, {}

        def execute(decision, real=real, seen=seen):
            key = len(decision.scheduled)
            if key not in seen:
                seen[key] = real(decision)
            work.advance(1.0 + 0.02 * decision.num_scheduled_tokens)
            return seen[key]

        monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(sharing, "prefix_server", lambda caching, **kw: prefix_servers[caching])
    monkeypatch.setattr(sharing, "machine_load", lambda: 0.0)
    llm = prefix_servers[False]
    prefix = sharing.few_shot_prefix(llm, 1)
    prompts = sharing.shared_prefix_prompts(llm, prefix, 4)
    assert_never_clearly_opposite(work, lambda: sharing.compare_prefix_caching(prompts, len(prefix)), "greater",
                                  verdict_of=lambda runs: sharing.ttft_verdict(*runs))


def test_prefix_lines_count_exactly_and_time_from_the_verdict(tmp_path, monkeypatch):
    from labkit.i18n import set_language
    from labkit.labs.lab02_paged_attention import views
    from labkit.report import results

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    set_language("zh")
    clear, noisy = views.prefix_ttft_lines({"5-shot": _prefix_runs([0.5, 0.10, 0.11, 0.10], [0.5, 0.04, 0.04, 0.05]),
                                            "1-shot": _prefix_runs([0.5, 0.10, 0.03, 0.10], [0.5, 0.04, 0.09, 0.05])})
    assert "预填充 token 从 368 降到 128（计数）" in clear and "首 token 来得更快" in clear and "噪声" not in clear
    assert "噪声之内" in noisy or "机器正忙" in noisy
    assert set(results.read_summary("02")["verdicts"]) == {"prefix_ttft/5-shot", "prefix_ttft/1-shot"}


def test_indirection_lines_set_the_overhead_against_the_paper_only_when_clear():
    from labkit.i18n import set_language
    from labkit.labs.common.measure import verdict_from_ratios
    from labkit.labs.lab02_paged_attention import views

    def cost(ratios, L=512, kernel=attention_cost.SDPA):
        v = verdict_from_ratios(ratios, ratio=min(ratios))
        return attention_cost.IndirectionCost(L, 16, 8, 1.0 * min(ratios), 1.0, 1e-7, v, kernel)

    set_language("zh")
    big = views.indirection_lines([cost([1.9, 2.0, 2.1])])
    assert "分页注意力比连续的慢" in big[1] and "SDPA 路径" in big[2]
    # the copy explains the SDPA path's cost only: the C kernel reads in place, and no reason is made up
    big_kernel = views.indirection_lines([cost([1.9, 2.0, 2.1], kernel=attention_cost.KERNEL)])
    assert "超出论文" in big_kernel[2] and "复制" not in big_kernel[2]
    level = views.indirection_lines([cost([1.20, 1.22, 1.21])])
    assert "量级之内" in level[2]
    noisy = views.indirection_lines([cost([0.9, 1.4, 1.3])])
    assert len(noisy) == 2 and "噪声之内" in noisy[1] and "反而" not in noisy[1].split("「")[0]
