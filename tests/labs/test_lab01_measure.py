"""Lab 01's timing sentences: computed from the numbers, true whichever way a noisy measurement
falls, and a reversed result says what it means. Timings: one thread, CPU time, load reported."""

from __future__ import annotations

import re

import pytest
import torch

from labkit import i18n
from labkit.labs.lab01_kv_cache import measure as kv
from labkit.labs.lab01_kv_cache import views
from labkit.labs.lab01_kv_cache.measure import CacheComparison, Conditions, TokenCost

QUIET = Conditions(1, "CPU time", 0.4, 0.9, 2)
BUSY = Conditions(1, "CPU time", 3.6, 4.2, 2)


def comparison(cache_s: float, recompute_s: float, conditions: Conditions = QUIET) -> CacheComparison:
    cache = tuple(TokenCost("cache", 8 + i, 8 if i == 0 else 1, cache_s) for i in range(3))
    recompute = tuple(TokenCost("recompute", 8 + i, 8 + i, recompute_s) for i in range(3))
    return CacheComparison(8, cache, recompute, (1, 2, 3), (1, 2, 3), conditions)


@pytest.fixture(autouse=True)
def chinese_after_each_test():
    yield
    i18n.set_language("zh")


def _verdict(ratio, conditions):
    from labkit.labs.common.measure import verdict_from_ratios

    return verdict_from_ratios([ratio, ratio], margin=views.SAME_BAND, load=conditions.load,
                               cores=conditions.num_cpus)


@pytest.mark.parametrize("ratio, expect", [(3.0, "是有缓存的 3.00×"), (1.04, "几乎一样"), (0.6, "反而更少")])
def test_the_time_sentence_is_true_for_any_measured_ratio(ratio, expect):
    sentence = views.time_comparison(_verdict(ratio, QUIET), QUIET)
    assert expect in sentence and "噪声" not in sentence
    assert not re.search(r"多(用了)?\s*[\d.]+\s*倍", sentence), "never the ambiguous 多 X 倍"
    if ratio < 1:
        assert "被干扰" in sentence and "0.9" in sentence and "重新运行" in sentence   # what it means, what to do


def test_a_busy_machine_or_a_bare_ratio_is_hedged():
    assert "机器正忙" in views.time_comparison(_verdict(3.0, BUSY), BUSY)
    assert "只测了一轮" in views.time_comparison(3.0, QUIET)          # one number: no spread to judge by


def test_the_sentences_switch_to_english():
    i18n.set_language("en")
    assert "disturbed" in views.time_comparison(_verdict(0.5, QUIET), QUIET)
    assert "3.00×" in views.time_comparison(_verdict(3.0, QUIET), QUIET)


def test_printed_lines_compare_counts_exactly_and_times_honestly():
    lines = views.comparison_lines(comparison(0.05, 0.03, BUSY))     # recompute measured faster: disturbed
    text = "\n".join(lines)
    assert "无缓存处理的 token 数是有缓存的 2.7 倍" in text           # (8+9+10) / (8+1+1)
    assert "反而更少" in text and "负载 3.6 → 4.2" in text and "机器较忙" in text and "机器正忙" in text
    assert "反而" not in "\n".join(views.comparison_lines(comparison(0.02, 0.06)))


def test_tables_flag_a_reversed_row_instead_of_presenting_it_as_a_result():
    table = views.context_table([comparison(0.02, 0.06), comparison(0.05, 0.03)])
    assert table.rows[0][5] == "3.00" and "反了" in table.rows[1][5]
    assert any("被机器上的其他程序干扰" in note for note in table.notes)
    assert "单线程" in table.caption


def test_a_measurement_runs_on_one_thread_in_cpu_time_and_restores_the_thread_count(llm):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = kv.compare_cache_recompute(llm, kv.text_prompt(llm, 6), 3)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert result.conditions.threads == 1 and result.conditions.num_cpus >= 1
    assert all(c.seconds > 0 and c.wall_seconds > 0 for c in result.cache + result.recompute)
    assert result.same_output and result.token_ratio() == (6 + 7 + 8) / (6 + 1 + 1)


def test_one_thread_restores_the_thread_count_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with kv.one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_contention_never_makes_the_cache_verdict_clearly_reversed():
    """Random tokens slowed 1-10x (another program took the core): the verdict on recompute ÷ cache
    may be hedged, never clearly "recompute is cheaper"."""
    import random

    quiet = comparison(0.02, 0.06).time_verdict()
    assert (quiet.direction, quiet.confidence) == ("greater", "clear")
    for seed in range(300):
        rng = random.Random(seed)

        def slowed(s):
            return s * (rng.uniform(1, 10) if rng.random() < 0.5 else 1.0)

        cache = tuple(TokenCost("cache", 8 + i, 8 if i == 0 else 1, slowed(0.02)) for i in range(5))
        recompute = tuple(TokenCost("recompute", 8 + i, 8 + i, slowed(0.06)) for i in range(5))
        v = CacheComparison(8, cache, recompute, (1,), (1,), QUIET).time_verdict()
        assert not (v.clear and v.direction == "less"), (seed, v)


# ----------------------------------------------------------------------------- contention injected into the real path

def test_contention_never_makes_recomputing_clearly_cheaper_than_the_cache(llm, monkeypatch):
    from tests.labs.noise import WorkClock, assert_never_clearly_opposite

    work, engine = WorkClock(), llm.engine
    real_step = engine.step

    def step():
        out = real_step()
        work.advance(1.0 + 0.05 * engine.metrics.last.num_scheduled_tokens)   # a forward costs more per token
        return out

    monkeypatch.setattr(engine, "step", step)
    monkeypatch.setattr(kv, "load_average", lambda: 0.0)       # contention comes from the clock alone
    prompt = kv.text_prompt(llm, 16)
    assert_never_clearly_opposite(work, lambda: kv.compare_cache_recompute(llm, prompt, 5), "greater",
                                  verdict_of=lambda c: c.time_verdict())
