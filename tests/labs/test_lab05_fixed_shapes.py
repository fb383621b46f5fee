"""Lab 05's fixed-shape analogue of TensorRT-LLM's engine build: buckets, padding, the batch trace,
the padded step's real rows against eager, and a tiny end-to-end run with no dynamo warning."""

from __future__ import annotations

import logging

import pytest
import torch

from labkit.labs.lab05_engine_choice import fixed_shapes as fs
from labkit.model.model_config import ModelConfig

pytestmark = pytest.mark.timeout(300)

TINY = ModelConfig(128, 32, 64, 2, 4, 2, 8, 1e-5, 1e4, 128, True, 1, 2)


def test_a_batch_goes_to_the_smallest_bucket_that_holds_it():
    assert [fs.bucket_for(b) for b in (1, 2, 3, 4, 5, 8, 9, 16)] == [1, 2, 4, 4, 8, 8, 16, 16]
    assert fs.bucket_for(3, (3, 6)) == 3


@pytest.mark.parametrize("bad, field", [(0, "batch"), (17, "largest bucket"), (2.0, "batch")])
def test_a_batch_no_bucket_holds_is_refused_naming_why(bad, field):
    with pytest.raises(ValueError, match=field):
        fs.bucket_for(bad)


@pytest.mark.parametrize("buckets", [(), (2, 1), (1, 1, 2), (0, 4)])
def test_bad_bucket_sets_are_refused(buckets):
    with pytest.raises(ValueError, match="buckets"):
        fs.bucket_for(1, buckets)


def test_padding_waste_is_padded_rows_over_computed_rows():
    # 3 -> 4, 5 -> 8, 16 -> 16: 24 rows, 4 of padding (1 + 3)
    assert fs.padding_waste([3, 5, 16]) == pytest.approx(4 / 28)
    assert fs.padding_waste([1, 2, 4, 8, 16]) == 0.0
    with pytest.raises(ValueError, match="batches"):
        fs.padding_waste([])


def test_the_batch_trace_is_reproducible_and_within_the_batch_limit():
    trace = fs.batch_trace(200, max_batch=16, seed=3)
    assert trace == fs.batch_trace(200, max_batch=16, seed=3) and len(trace) == 200
    assert 1 <= min(trace) and max(trace) <= 16 and len(set(trace)) > 4
    with pytest.raises(ValueError, match="num_steps"):
        fs.batch_trace(0)


def test_quiet_dynamo_silences_dynamo_and_restores_its_logger():
    logger = logging.getLogger("torch._dynamo")
    before = logger.level
    with fs.quiet_dynamo(recompile_limit=32):
        import torch._dynamo

        assert logger.level == logging.ERROR and torch._dynamo.config.recompile_limit == 32
    assert logger.level == before


def test_the_padded_fixed_step_gives_eagers_rows_and_the_tiny_run_prints_no_dynamo_warning(caplog, capfd):
    with fs.quiet_dynamo():
        layers = fs.dense_layers(TINY, 2)
        eager = fs.make_arm("eager", layers, 8)
        fixed = fs.make_arm("fixed", layers, 8, (1, 2, 4))
        for b in (1, 3, 4):
            assert torch.allclose(fixed.run(b), eager.run(b), atol=1e-5)
            assert fixed.run(b).shape == (b, TINY.hidden_size)
    with caplog.at_level(logging.WARNING):
        r = fs.run_fixed_shapes(TINY, num_layers=1, num_steps=8, rounds=2, buckets=(1, 2, 4, 8, 16))
    out, err = capfd.readouterr()
    assert "recompile" not in (out + err + caplog.text).lower()
    assert r.padding_waste == pytest.approx(fs.padding_waste(r.trace, r.buckets))
    assert r.new_batch == 32 and set(r.rebuild_s) == set(r.build_s) == {"eager", "dynamic", "fixed"}
    assert r.build_s["eager"] == 0.0 and r.build_s["fixed"] > 0 and r.max_abs_diff < 1e-4
    assert set(r.comparison.verdicts) == {"dynamic", "fixed"}


def test_make_arm_refuses_an_unknown_arm_or_a_fixed_arm_without_buckets():
    layers = fs.dense_layers(TINY, 1)
    with pytest.raises(ValueError, match="name"):
        fs.make_arm("tensorrt", layers, 4)
    with pytest.raises(ValueError, match="buckets"):
        fs.make_arm("fixed", layers, 4)


def test_the_default_config_has_the_default_models_shapes():
    cfg = fs.default_config()
    assert cfg.hidden_size > 0 and cfg.num_attention_heads * cfg.head_dim > 0
