"""Workloads: prompt sets, synthetic traces, the Azure 2023 trace and its shipped statistics."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit import traces
from labkit.traces import (
    AZURE_STATS_PATH,
    DATA_DIR,
    LogNormalLengths,
    TraceRequest,
    azure_like_trace,
    load_azure_trace,
    load_prompts,
    scale_trace,
    synthetic_trace,
)

CJK = re.compile(r"[\u4e00-\u9fff]")


def prompt_records(name: str) -> list[dict]:
    with open(DATA_DIR / "prompts" / f"{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def prompt_lens(trace):
    return np.array([r.prompt_len for r in trace])


def output_lens(trace):
    return np.array([r.output_len for r in trace])


def shipped_stats() -> dict:
    return json.loads(AZURE_STATS_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def azure_conv() -> list[TraceRequest]:
    try:
        return load_azure_trace("conv")
    except FileNotFoundError as err:
        pytest.skip(f"real Azure trace not available (../shared absent, not shipped): {err}")


# ---------------------------------------------------------------------------------------- prompts

@pytest.mark.parametrize("name", traces.PROMPT_SETS)
class TestPromptSets:
    def test_has_at_least_36_prompts(self, name):
        assert len(prompt_records(name)) >= 36

    def test_every_record_has_id_lang_split_and_a_non_empty_prompt(self, name):
        for r in prompt_records(name):
            assert set(r) == {"id", "lang", "split", "prompt"}
            assert r["lang"] in ("zh", "en") and r["split"] in ("train", "heldout")
            assert r["prompt"].strip()

    def test_ids_are_unique(self, name):
        ids = [r["id"] for r in prompt_records(name)]
        assert len(set(ids)) == len(ids)

    def test_mixes_chinese_and_english_roughly_half_each(self, name):
        langs = [r["lang"] for r in prompt_records(name)]
        assert 0.4 <= langs.count("zh") / len(langs) <= 0.6

    def test_lang_label_matches_the_text(self, name):
        for r in prompt_records(name):
            assert bool(CJK.search(r["prompt"])) == (r["lang"] == "zh"), r["id"]

    def test_last_six_are_heldout_and_the_rest_train(self, name):
        splits = [r["split"] for r in prompt_records(name)]
        assert splits[-6:] == ["heldout"] * 6
        assert set(splits[:-6]) == {"train"}

    def test_heldout_has_both_languages(self, name):
        assert {r["lang"] for r in prompt_records(name)[-6:]} == {"zh", "en"}

    def test_load_prompts_splits_partition_the_set_in_file_order(self, name):
        everything = [r["prompt"] for r in prompt_records(name)]
        assert load_prompts(name) == everything
        assert load_prompts(name, "train") + load_prompts(name, "heldout") == everything
        assert len(load_prompts(name, split="heldout")) == 6


def test_copy_prompts_each_carry_a_passage_after_the_instruction():
    for r in prompt_records("copy"):
        instruction, _, passage = r["prompt"].partition("\n\n")
        assert len(passage) > len(instruction), r["id"]


def test_some_code_prompts_include_a_code_block():
    assert sum("```" in r["prompt"] for r in prompt_records("code")) >= 10


@pytest.mark.parametrize("kwargs, field", [({"name": "poems"}, "name"),
                                           ({"name": "chat", "split": "test"}, "split")])
def test_load_prompts_rejects_unknown_names_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        load_prompts(**kwargs)


# -------------------------------------------------------------------------------------- synthetic

lengths = st.tuples(st.floats(1, 500), st.floats(0, 2), st.integers(1, 64), st.integers(0, 1000)) \
    .map(lambda t: LogNormalLengths(t[0], t[1], t[2], t[2] + t[3]))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), prompt=lengths, output=lengths,
       rate=st.none() | st.floats(0.1, 100))
def test_synthetic_trace_is_reproducible_by_seed_and_stays_within_bounds(seed, prompt, output, rate):
    trace = synthetic_trace(200, seed=seed, rate=rate, prompt_len=prompt, output_len=output)
    assert trace == synthetic_trace(200, seed=seed, rate=rate, prompt_len=prompt, output_len=output)
    assert prompt.min <= prompt_lens(trace).min() and prompt_lens(trace).max() <= prompt.max
    assert output.min <= output_lens(trace).min() and output_lens(trace).max() <= output.max


def test_different_seeds_give_different_traces():
    assert synthetic_trace(50, seed=1) != synthetic_trace(50, seed=2)


def test_synthetic_lengths_are_heavy_tailed_around_the_requested_median():
    trace = synthetic_trace(5000, seed=0, prompt_len=(48, 1.0, 1, 100_000),
                            output_len=(32, 1.0, 1, 100_000))
    for lens, median in ((prompt_lens(trace), 48), (output_lens(trace), 32)):
        p50, p99 = np.percentile(lens, [50, 99])
        assert abs(p50 / median - 1) < 0.06
        assert 8 < p99 / p50 < 13  # exp(2.326 * sigma) = 10.2 for sigma = 1


def test_default_synthetic_trace_keeps_a_heavy_tail_after_clipping():
    trace = synthetic_trace(5000, seed=0)
    for lens in (prompt_lens(trace), output_lens(trace)):
        assert np.percentile(lens, 99) / np.percentile(lens, 50) > 5


def test_sigma_zero_gives_every_request_the_median_length():
    trace = synthetic_trace(20, prompt_len=(100, 0.0, 1, 512), output_len=(7, 0.0, 1, 512))
    assert set(prompt_lens(trace)) == {100} and set(output_lens(trace)) == {7}


def test_without_a_rate_every_request_arrives_at_time_zero():
    assert {r.arrival_s for r in synthetic_trace(100, seed=3)} == {0.0}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rate", [0.5, 4.0, 50.0])
def test_poisson_arrivals_have_the_requested_mean_rate_and_exponential_gaps(rate, seed):
    arrivals = np.array([r.arrival_s for r in synthetic_trace(5000, seed=seed, rate=rate)])
    gaps = np.diff(arrivals)
    assert arrivals[0] == 0.0 and (gaps >= 0).all()
    assert abs((len(arrivals) - 1) / arrivals[-1] / rate - 1) < 0.06  # 1/sqrt(5000) = 1.4 % std
    assert abs(gaps.std() / gaps.mean() - 1) < 0.08  # an exponential has CV = 1


@pytest.mark.parametrize("kwargs, field", [
    ({"rate": 0.0}, "rate"), ({"rate": -1.0}, "rate"),
    ({"prompt_len": (48, 1.0, 10, 5)}, "prompt_len"), ({"output_len": (0, 1.0, 1, 5)}, "output_len"),
    ({"output_len": (8, -0.1, 1, 5)}, "output_len"), ({"num_requests": 0}, "num_requests")])
def test_synthetic_trace_rejects_invalid_arguments_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        synthetic_trace(**{"num_requests": 10, **kwargs})


# ----------------------------------------------------------------------------------- azure (real)

def write_csv(path, rows, header="TIMESTAMP,ContextTokens,GeneratedTokens"):
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_azure_loader_reads_seven_digit_timestamps_relative_to_the_first_request(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["2023-11-16 23:59:59.9999999,10,5",
                                         "2023-11-17 00:00:01.0000001,20,6"])
    first, second = load_azure_trace(path=path)
    assert first == TraceRequest(0.0, 10, 5)
    assert (second.prompt_len, second.output_len) == (20, 6)
    assert second.arrival_s == pytest.approx(1.0000002, abs=1e-9)


def test_azure_loader_finds_the_file_through_the_environment_variable(tmp_path, monkeypatch):
    write_csv(tmp_path / "AzureLLMInferenceTrace_code.csv", ["2023-11-16 18:17:03.9799600,7,3"])
    monkeypatch.setenv("LABKIT_AZURE_TRACE_DIR", str(tmp_path))
    assert load_azure_trace("code") == [TraceRequest(0.0, 7, 3)]


def test_missing_azure_trace_explains_that_the_data_is_not_shipped(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_azure_trace("conv", path=tmp_path / "nope.csv")
    for words in ("not shipped", "CC-BY 4.0", "Splitwise", "azure_like_trace"):
        assert words in str(err.value)


def test_azure_loader_rejects_a_file_with_another_header(tmp_path):
    with pytest.raises(ValueError, match="header"):
        load_azure_trace(path=write_csv(tmp_path / "t.csv", ["1,2,3"], header="a,b,c"))


@pytest.mark.parametrize("kwargs, field", [({"kind": "chat"}, "kind"), ({"limit": 0}, "limit"),
                                           ({"max_total_tokens": -5}, "max_total_tokens")])
def test_azure_loader_rejects_invalid_arguments_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        load_azure_trace(**kwargs)


def test_real_azure_trace_has_one_request_per_csv_row(azure_conv):
    directory = os.environ.get("LABKIT_AZURE_TRACE_DIR", traces.AZURE_DEFAULT_DIR)
    with open(Path(directory) / "AzureLLMInferenceTrace_conv.csv", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(azure_conv) == len(lines) - 1  # one header line
    for request, line in zip(azure_conv[:3], lines[1:4]):
        assert (request.prompt_len, request.output_len) == tuple(map(int, line.split(",")[1:]))
    assert azure_conv[0].arrival_s == 0.0
    arrivals = np.array([r.arrival_s for r in azure_conv])
    assert (np.diff(arrivals) >= 0).all() and 3000 < arrivals[-1] < 4000  # about an hour


def test_azure_limit_keeps_the_first_requests(azure_conv):
    assert load_azure_trace("conv", limit=25) == azure_conv[:25]


def test_azure_max_total_tokens_filters_before_limit(azure_conv):
    kept = [r for r in azure_conv if r.prompt_len + r.output_len <= 600]
    trace = load_azure_trace("conv", limit=40, max_total_tokens=600)
    assert len(trace) == 40
    assert all(r.prompt_len + r.output_len <= 600 for r in trace)
    assert [(r.prompt_len, r.output_len) for r in trace] == [(r.prompt_len, r.output_len)
                                                             for r in kept[:40]]
    assert trace[0].arrival_s == 0.0
    assert trace[-1].arrival_s == pytest.approx(kept[39].arrival_s - kept[0].arrival_s)


# ------------------------------------------------------------------------------ azure (resampled)

def test_shipped_stats_are_small_and_carry_the_attribution():
    stats = shipped_stats()
    assert AZURE_STATS_PATH.stat().st_size < 100_000
    assert stats["licence"] == "CC-BY 4.0"
    assert "Splitwise" in stats["citation"] and "ISCA 2024" in stats["citation"]
    assert "github.com/Azure/AzurePublicDataset" in stats["source_url"]


def test_shipped_quantiles_are_non_decreasing_and_span_min_to_max():
    stats = shipped_stats()
    assert stats["quantile_probs"][0] == 0.0 and stats["quantile_probs"][-1] == 1.0
    for kind in traces.AZURE_KINDS:
        for field in ("context_tokens", "generated_tokens"):
            q = stats["kinds"][kind]["empirical_quantiles"][field]
            assert len(q) == len(stats["quantile_probs"]) and np.all(np.diff(q) >= 0)
            summary = stats["kinds"][kind][field]
            assert (q[0], q[-1]) == (summary["min"], summary["max"])


def test_shipped_stats_are_exactly_what_the_script_derives_from_the_real_trace(azure_conv):
    spec = importlib.util.spec_from_file_location(
        "derive_azure_stats", DATA_DIR / "traces" / "derive_azure_stats.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.render(script.build_stats_document()) == AZURE_STATS_PATH.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", traces.AZURE_KINDS)
def test_azure_like_trace_reproduces_the_shipped_quantiles(kind):
    trace = azure_like_trace(kind, 20_000, seed=7)
    stats = shipped_stats()["kinds"][kind]
    for lens, field in ((prompt_lens(trace), "context_tokens"),
                        (output_lens(trace), "generated_tokens")):
        for p in (10, 50, 90, 99):
            assert np.percentile(lens, p) == pytest.approx(stats[field][f"p{p}"], rel=0.05, abs=2)
        assert lens.mean() == pytest.approx(stats[field]["mean"], rel=0.05)


def test_azure_like_trace_is_reproducible_and_respects_max_total_tokens():
    trace = azure_like_trace("conv", 300, seed=5, rate=2.0, max_total_tokens=1024)
    assert trace == azure_like_trace("conv", 300, seed=5, rate=2.0, max_total_tokens=1024)
    assert len(trace) == 300 and all(r.prompt_len + r.output_len <= 1024 for r in trace)
    assert trace[0].arrival_s == 0.0 and trace[-1].arrival_s > 0


def test_azure_like_trace_works_without_the_raw_trace(tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "AZURE_DEFAULT_DIR", tmp_path / "absent")
    monkeypatch.setenv("LABKIT_AZURE_TRACE_DIR", str(tmp_path / "absent"))
    assert len(azure_like_trace("code", 10)) == 10


def test_azure_like_trace_refuses_an_impossible_token_limit():
    with pytest.raises(ValueError, match="max_total_tokens"):
        azure_like_trace("conv", 10, max_total_tokens=2)


# ---------------------------------------------------------------------------------------- scaling

def test_scale_trace_caps_lengths_and_keeps_the_shape_below_the_quantile():
    trace = synthetic_trace(4000, seed=0, rate=1.0, prompt_len=(1000, 1.0, 1, 100_000),
                            output_len=(300, 0.8, 1, 100_000))
    small = scale_trace(trace, max_prompt_len=256, max_output_len=64)
    assert prompt_lens(small).max() <= 256 and output_lens(small).max() <= 64
    for before, after in ((prompt_lens(trace), prompt_lens(small)),
                          (output_lens(trace), output_lens(small))):
        ratio_after = np.percentile(after, 90) / np.percentile(after, 50)
        assert ratio_after == pytest.approx(np.percentile(before, 90) / np.percentile(before, 50),
                                            rel=0.05)
    assert [r.arrival_s for r in small] == [r.arrival_s for r in trace]


def test_scale_trace_leaves_a_trace_that_already_fits_unchanged():
    trace = synthetic_trace(500, seed=4)
    assert scale_trace(trace, max_prompt_len=512, max_output_len=256, quantile=1.0) == trace
