"""Every figure the labs build passes the figure check (``tests/figure_check.py``).

The figures are built by the lab modules themselves from small inputs: short simulated runs where a
run is cheap, hand-made results of the lab's own dataclasses where it is not (a figure only draws
what it is given). ``static_problems`` runs everywhere; ``rendered_problems`` draws each figure with
plotly.js in chromium and is a browser test.
"""

from __future__ import annotations

import plotly.offline
import pytest

from labkit import LLM, EngineConfig, i18n
from labkit.kv.breakdown import PoolBreakdown
from labkit.labs.lab02_paged_attention import block_map, sharing
from labkit.labs.lab02_paged_attention import figures as lab02
from labkit.labs.lab02_paged_attention.attention_cost import IndirectionCost
from labkit.labs.lab02_paged_attention.block_size import BlockSizePoint
from labkit.labs.lab02_paged_attention.layouts import LayoutRun
from labkit.labs.lab03_batching import views as lab03
from labkit.labs.lab03_batching.offline import ANYSCALE_SYSTEMS, AnyscaleRow, OfflineRun
from labkit.labs.lab03_batching.online import SLO, ServingResult
from labkit.labs.lab03_batching.overhead import OverheadRow
from labkit.labs.lab03_batching.scaling import StepTiming
from tests.browser_util import launch_chromium, missing_browser_reason
from tests.figure_check import english_words, rendered_problems, static_problems


def sim(num_blocks: int) -> LLM:
    return LLM(model="sim", config=EngineConfig(num_blocks=num_blocks, block_size=16))


def layout_run(label: str, layout: str, waste: float, mean_running: float) -> LayoutRun:
    used = 100 - waste - 10
    return LayoutRun(label, layout, PoolBreakdown(used, waste / 2, waste / 2, 0.0, 10.0), 20, 100, mean_running,
                     int(mean_running) + 1, 500, 2.0, True, 16, 12, ())


def offline_run(label: str, steps: int, seconds: float, occupancy: float) -> OfflineRun:
    return OfflineRun(label, 100, 4000, steps, seconds, seconds, occupancy, occupancy, 50.0, 32, True)


def serving(label: str, rate: float, ttft: float, tpot: float, good: int, n: int = 40) -> ServingResult:
    duration = n / min(rate, 5.0)
    return ServingResult(label, rate, n, duration, ttft / 2, ttft, tpot / 2, tpot, tpot / 2, tpot, good, 4000, True)


def lab02_figures():
    demo = block_map.record_block_map(sim(24), [[97 + j for j in range(n)] for n in (12, 28, 7, 40)],
                                      [20, 12, 28, 16], [0, 0, 2, 4])
    fork = sharing.parallel_sampling(sim(64), [98] * 40, n=4, max_tokens=6)
    runs = [layout_run("模拟 conv：连续（最大长度）", "contiguous", 70.0, 7.0),
            layout_run("模拟 conv：分页", "paged", 3.0, 12.0)]
    off = sharing.PrefixRun(False, 32, (40, 40, 40), (0.2, 0.2, 0.21), 120, 0, 0, 0)
    on = sharing.PrefixRun(True, 32, (40, 40, 40), (0.2, 0.1, 0.09), 56, 64, 3, 2)
    sizes = [BlockSizePoint(b, 2.0 + b / 4, 10.0 - b / 32, 1.0 + 0.01 * b, 100.0 * (100 // b * b) / 120)
             for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    costs = [IndirectionCost(c, 16, 8, 0.002 * c / 128, 0.0015 * c / 128, 1e-7) for c in (128, 512, 1024)]
    return {
        "lab02 block ownership": lab02.block_ownership_figure(demo),
        "lab02 breakdown": lab02.breakdown_figure([(r.label, r.breakdown) for r in runs]),
        "lab02 effective use": lab02.effective_use_figure(runs),
        "lab02 prefix TTFT": lab02.prefix_ttft_figure(off, on),
        "lab02 fork": lab02.fork_figure(fork),
        "lab02 block size": lab02.block_size_figure(sizes),
        "lab02 indirection": lab02.indirection_figure(costs),
    }


def lab03_figures():
    names = list(ANYSCALE_SYSTEMS)
    anyscale = [AnyscaleRow(cap, {names[0]: offline_run(names[0], 1000, 10.0, 40.0),
                                  names[1]: offline_run(names[1], 400 + cap // 8, 10.0 / (2 + cap / 512), 70.0),
                                  names[2]: offline_run(names[2], 300, 10.0 / (3 + cap / 256), 90.0)})
                for cap in (32, 128, 512, 1536)]
    rates = [0.5, 1, 2, 4, 8, 16, 32]
    sweep = {"static": [serving("static", r, 3.0 * r, 0.05 + 0.01 * r, max(0, 40 - 8 * r)) for r in rates],
             "continuous": [serving("continuous", r, 0.3 + 0.05 * r ** 2, 0.03 + 0.004 * r, 40 if r < 16 else 10)
                            for r in rates]}
    decode = [StepTiming("decode", b, 0.02 + 0.0004 * b) for b in (1, 2, 4, 8, 16, 32)]
    prefill = [StepTiming("prefill", n, 0.001 * n) for n in (32, 64, 128, 256, 512)]
    overhead = [OverheadRow(n, 0.0002 + 2e-6 * n, 0.005 + 1e-6 * n, 0.0001) for n in (1, 64, 1024, 4096)]
    return {
        "lab03 anyscale": lab03.anyscale_figure(anyscale, {"Anyscale 8x": 8.0, "Anyscale 23x": 23.0}),
        "lab03 serving": lab03.serving_figure(sweep, SLO(ttft_s=2.0, tpot_s=0.1)),
        "lab03 scaling": lab03.scaling_figure(decode, prefill, knee=20.0),
        "lab03 overhead": lab03.overhead_figure({"之前": overhead}, 0.005),
    }


def other_lab_figures():
    """Labs 01, 04 and 05, from the same kind of small inputs (their own tests' row shapes)."""
    from labkit.labs.lab01_kv_cache import views as lab01
    from labkit.labs.lab01_kv_cache.measure import CacheComparison, TokenCost
    from labkit.labs.lab04_speculative import speedup, sweeps
    from labkit.labs.lab04_speculative import views as lab04
    from labkit.labs.lab05_engine_choice import ablation, chapter
    from labkit.labs.lab05_engine_choice import views as lab05
    from tests.labs.test_lab05 import _metrics

    lens = (16, 32, 64, 128)
    comparison = CacheComparison(16, tuple(TokenCost("cache", n, 1, 0.002) for n in lens),
                                 tuple(TokenCost("recompute", n, n, 0.002 * n / 16) for n in lens), (1,), (1,))
    spec = [speedup.Row(w, f"{m} k=4", 4, a, 0.4, 1.0, 0.05, 2.0, 1.3, s, "1/1", drafted=(4,), steps=1,
                        num_accepted=2, num_trials=4) for w, m, s, a in (("copy", "ngram", 1.6, 0.8), ("chat", "draft", 0.8, 0.3))]
    batches = [sweeps.BatchRow(1, spec[0], 0.05, 0.06), sweeps.BatchRow(16, spec[1], 0.2, 0.25)]

    def variant_row(workload, name, zh, cpu_s):
        variant = ablation.Variant(name, zh, name, EngineConfig())
        return ablation.AblationRow(workload, variant, _metrics(50.0 * cpu_s), cpu_s, weights_bytes=100, peak_kv_bytes=0)
    ablation_rows = [variant_row(w, n, zh, c) for w in ("chat", "code")
                     for n, zh, c in (("baseline", "基线", 1.0), ("compile", "编译", 0.7))]
    return {
        "lab01 cache vs recompute": lab01.cache_vs_recompute_figure([comparison]),
        "lab01 cumulative": lab01.cumulative_figure(comparison),
        "lab04 sweep": lab04.sweep_figure(spec[:1]),
        "lab04 matrix": lab04.matrix_figure(spec),
        "lab04 batch": lab04.batch_figure(batches),
        "lab05 ablation": lab05.ablation_figure(ablation_rows, ["chat", "code"]),
        "lab05 chapter": lab05.chapter_figure(chapter.chapter_stages((2.0, 1.5), 1.1)),
    }


@pytest.fixture(scope="module")
def figures():
    i18n.set_language("zh")
    built = {**lab02_figures(), **lab03_figures(), **other_lab_figures()}
    assert sorted(built) == sorted(FIGURES)
    return built


def test_the_check_knows_english_labels_from_chinese_ones():
    assert english_words("static") == ["static"] and english_words("continuous, paged KV") == ["continuous", "paged"]
    assert english_words("请求率（请求/秒）") == [] and english_words("TTFT P99 (s)") == []
    assert english_words("goodput（请求/秒）") == [] and english_words("Anyscale 23x") == []


FIGURES = ["lab02 block ownership", "lab02 breakdown", "lab02 effective use", "lab02 prefix TTFT", "lab02 fork",
           "lab02 block size", "lab02 indirection", "lab03 anyscale", "lab03 serving", "lab03 scaling", "lab03 overhead",
           "lab01 cache vs recompute", "lab01 cumulative", "lab04 sweep", "lab04 matrix", "lab04 batch",
           "lab05 ablation", "lab05 chapter"]
@pytest.mark.parametrize("name", FIGURES)
def test_lab_figures_are_labelled_in_chinese_with_decade_log_ticks(figures, name):
    assert static_problems(figures[name]) == []


@pytest.fixture(scope="module")
def plotly_page():
    reason = missing_browser_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_content("<html><body></body></html>")
        page.add_script_tag(content=plotly.offline.get_plotlyjs())
        yield page
        browser.close()


@pytest.mark.browser
def test_lab_figures_as_drawn_keep_axes_near_the_data_and_legends_clear(figures, plotly_page):
    problems = {name: rendered_problems(plotly_page, fig) for name, fig in figures.items()}
    assert {name: p for name, p in problems.items() if p} == {}
