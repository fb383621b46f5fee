"""The fp32 product forms: one batch-invariant form for every row count, chosen by timing, cached per
machine, forceable."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F

from labkit.model import linear_forms as lf
from labkit.model import native
from labkit.model.llama import linear

SHAPES = [(200, 96), (64, 1152)]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty in-process table and a private disk cache; restored afterwards."""
    saved = (dict(lf._table), dict(lf._groups), dict(lf._timings), dict(lf._pad), native.sequential_rows())
    monkeypatch.setattr(lf, "cache_path", lambda: tmp_path / "linear_forms.json")
    monkeypatch.delenv(lf.ENV, raising=False)
    lf.forget()
    yield tmp_path / "linear_forms.json"
    lf.forget()
    lf._table.update(saved[0])
    lf._groups.update(saved[1])
    lf._timings.update(saved[2])
    lf._pad.update(saved[3])
    native.set_sequential_rows(saved[4])


def weights(shape, count=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(count)]


def test_choose_takes_the_fastest_exact_form_and_never_an_inexact_one():
    times = {"F.linear": 3.0, "(W @ xᵀ)ᵀ": 2.0, "fast but inexact": 0.5}
    assert lf.choose(times, ["F.linear", "(W @ xᵀ)ᵀ"]) == "(W @ xᵀ)ᵀ"
    # a near tie (within the margin) keeps F.linear: noise must not flip the choice
    assert lf.choose({"F.linear": 2.05, "(W @ xᵀ)ᵀ": 2.0}, ["F.linear", "(W @ xᵀ)ᵀ"]) == "F.linear"
    assert lf.choose({"F.linear": 2.05, "(W @ xᵀ)ᵀ": 2.0}, ["F.linear", "(W @ xᵀ)ᵀ"], margin=0.0) == "(W @ xᵀ)ᵀ"
    with pytest.raises(ValueError, match="no exact form"):
        lf.choose({"fast but inexact": 0.5}, ["F.linear"])


def test_the_probe_keeps_padded_f_linear_unless_the_kernel_wins_clearly_one_form_for_every_row_count(fresh, monkeypatch):
    def fake(fast):
        def time_forms(sample, rows, names, rounds=lf.PROBE_ROUNDS, forms=None, dtype=None):
            return {n: (1.0 if (n == lf.NATIVE) == fast else 2.0) for n in names}
        return time_forms

    kernel = lf.NATIVE in lf.candidates()
    for fast, want in ((True, lf.NATIVE if kernel else lf.PADDED), (False, lf.PADDED)):
        lf.forget()
        monkeypatch.setattr(lf, "_read_cache", lambda: {})
        monkeypatch.setattr(lf, "time_forms", fake(fast))
        lf.prepare(weights(SHAPES[0]))
        assert all(lf.form_name(SHAPES[0], rows) == want for rows in (*range(1, lf.PREFILL + 1), 64, 1000))


@pytest.mark.parametrize("shape", SHAPES)
def test_the_probe_chooses_one_batch_invariant_exact_form(fresh, shape):
    lf.prepare(weights(shape))
    exact = lf.exact_forms(*shape)
    chosen = lf.table()[shape]
    assert sorted(chosen) == list(range(1, lf.PREFILL + 1))
    assert len(set(chosen.values())) == 1 and chosen[1] in lf.INVARIANT
    for rows, name in chosen.items():
        assert name in exact[min(rows, lf.MAX_ROWS)], (rows, name, exact[min(rows, lf.MAX_ROWS)])


@pytest.mark.parametrize("form", lf.INVARIANT)
@pytest.mark.parametrize("shape", [(576, 1536), (3072, 576), (200, 96)])
def test_each_invariant_form_gives_a_row_the_same_bits_at_every_row_count_and_position(form, shape):
    """A row's product must not depend on the batch it is in (async scheduling, chunked
    prefill and speculative verification all change the row count around a request)."""
    if form not in lf.candidates() or (form == lf.NATIVE and not lf.kernel_admitted(*shape)):
        pytest.skip(f"{form} is not available here: {native.why_unavailable()}")
    g = torch.Generator().manual_seed(shape[0])
    w, x = torch.randn(*shape, generator=g), torch.randn(300, shape[1], generator=g)
    fn = lf.FORMS[form]
    with torch.inference_mode():
        full = fn(x, w)
        for t in (*range(1, 41), 63, 64, 65, 130, 256):
            assert torch.equal(fn(x[:t], w), full[:t]), t
        for i in range(0, 300, 13):
            assert torch.equal(fn(x[i:i + 1], w), full[i:i + 1]), i
            assert torch.equal(fn(x[i:i + 5], w), full[i:i + 5]), i


def test_padded_f_linear_gives_each_row_the_bits_f_linear_gives_it_in_a_batch_of_pad_rows():
    shape = (3072, 576)
    m = lf.pad_rows(*shape)
    assert m is not None and 1 <= m <= lf.MAX_ROWS + 1
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(*shape, generator=g), torch.randn(64, shape[1], generator=g)
    full = F.linear(x, w)
    assert all(torch.equal(F.linear(x[:t], w), full[:t]) for t in range(m, 64))
    assert all(torch.equal(lf.FORMS[lf.PADDED](x[:t], w), full[:t]) for t in range(1, m + 1))


def test_the_gate_always_admits_f_linear_and_rejects_a_different_summation_order():
    def reversed_sum(x, w):           # the same products, summed from the last column to the first
        return (x[:, None, :] * w[None]).flip(-1).cumsum(-1)[..., -1]

    forms = {"F.linear": F.linear, "reversed": reversed_sum}
    exact = lf.exact_forms(64, 1152, max_rows=4, forms=forms)
    assert all(exact[t] == ["F.linear"] for t in range(1, 5)), exact


def test_the_table_is_cached_on_disk_per_machine_and_read_back_without_probing(fresh, monkeypatch):
    lf.prepare(weights(SHAPES[1]))
    first = lf.table()[SHAPES[1]]
    stored = json.loads(fresh.read_text())
    key = lf.machine_key(torch.get_num_threads())
    entry = stored[key][f"{SHAPES[1][0]}x{SHAPES[1][1]}"]
    assert entry == {**{str(t): n for t, n in first.items()}, "pad": lf.pad_rows(*SHAPES[1])}
    lf.forget()
    monkeypatch.setattr(lf, "probe_shapes", lambda *a: pytest.fail("probed although the disk cache had the table"))
    lf.prepare(weights(SHAPES[1]))
    assert lf.table()[SHAPES[1]] == first


def test_a_damaged_cache_entry_is_probed_again(fresh):
    key = lf.machine_key(torch.get_num_threads())
    fresh.write_text(json.dumps({key: {f"{SHAPES[0][0]}x{SHAPES[0][1]}": {"1": "no such form"}}}))
    lf.prepare(weights(SHAPES[0]))
    assert set(lf.table()[SHAPES[0]].values()) <= set(lf.FORMS)


def test_one_thread_is_filled_at_load_and_a_new_thread_count_on_first_use(fresh):
    lf.prepare(weights(SHAPES[0]))
    assert sorted(lf.table(1)[SHAPES[0]]) == list(range(1, lf.PREFILL + 1))     # what the labs time with
    other = torch.get_num_threads() + 1
    assert lf.table(other) == {}
    assert lf.form_name(SHAPES[0], 3, threads=other) in lf.FORMS
    assert sorted(lf.table(other)[SHAPES[0]]) == list(range(1, lf.PREFILL + 1))


def test_unregistered_weights_take_f_linear(fresh):
    assert lf.form_name((123, 45), 4) == "F.linear"
    assert lf.form_name((123, 45), 400) == "F.linear"


def test_a_form_can_be_forced_by_context_or_environment(fresh, monkeypatch):
    lf.prepare(weights(SHAPES[0]))
    with lf.forced("(W @ xᵀ)ᵀ"):
        assert all(lf.form_name(SHAPES[0], t) == "(W @ xᵀ)ᵀ" for t in range(1, 17))
    with pytest.raises(ValueError, match="unknown linear form"):
        with lf.forced("gemm"):
            pass
    monkeypatch.setenv(lf.ENV, "F.linear of a pair")
    assert lf.form_name(SHAPES[0], 1) == "F.linear of a pair"
    monkeypatch.setenv(lf.ENV, "nope")
    with pytest.raises(ValueError, match=lf.ENV):
        lf.form_name(SHAPES[0], 1)


@pytest.mark.parametrize("form", list(lf.FORMS))
@pytest.mark.parametrize("rows", [1, 2, 7, 16])
def test_every_form_computes_the_product(form, rows):
    if form not in lf.candidates():
        pytest.skip(f"{form} is not available here: {native.why_unavailable()}")
    g = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 96, generator=g), torch.randn(200, 96, generator=g)
    with lf.forced(form):
        got = linear(x, w)
    assert got.shape == (rows, 200)
    torch.testing.assert_close(got, F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_the_default_model_registers_its_shapes_with_exact_choices(llm):
    net = llm.engine.runner.model
    shapes = {tuple(w.shape) for w in net.linear_weights()}
    chosen = lf.table()
    assert shapes <= set(chosen), (shapes, set(chosen))
    for shape in sorted(shapes, key=lambda s: s[0] * s[1])[:2]:      # the gate is cheap on the small ones
        exact = lf.exact_forms(*shape)
        assert all(chosen[shape][t] in exact[t] for t in exact), shape


def test_without_an_invariant_form_the_probe_warns_and_keeps_f_linear(fresh, monkeypatch):
    monkeypatch.setattr(lf, "invariant_forms", lambda shapes: [])
    with pytest.warns(RuntimeWarning, match="batch-invariant"):
        lf.prepare(weights(SHAPES[0]))
    assert set(lf.table()[SHAPES[0]].values()) == {"F.linear"}


def test_a_choice_timed_while_busy_is_timed_again_once_the_machine_is_quiet(fresh, monkeypatch):
    # (A bf16 choice timed beside a CI run once picked PyTorch's form and kept it for good.)
    timed, chosen = [], []

    def walk(crossover):
        """time_walks for _set_walk whose timings make the sequential walk win up to ``crossover`` rows."""
        return lambda: timed.append(crossover) or {rows: {"tiles": 2.0, "sequential": 1.0 if rows <= crossover else 3.0}
                                                   for rows in lf.WALK_ROWS}

    monkeypatch.setattr(lf, "_busy", lambda: True)
    lf._set_walk("walk", chosen.append, walk(2))
    lf._set_walk("walk", chosen.append, walk(4))          # still busy: the choice stands
    assert timed == [2] and chosen == [2, 2]
    monkeypatch.setattr(lf, "_busy", lambda: False)
    lf._set_walk("walk", chosen.append, walk(4))          # quiet: timed again, and kept
    lf._set_walk("walk", chosen.append, walk(8))
    assert timed == [2, 4] and chosen == [2, 2, 4, 4]
    data = json.loads(fresh.read_text())
    key = next(k for k in data if k.endswith("| walk"))
    assert data[key] == 4 and key + lf.PROVISIONAL not in data


def test_the_bf16_choice_is_retimed_after_a_busy_timing(fresh, monkeypatch):
    saved = dict(lf._bf16_choice)
    choices = iter([False, True])
    monkeypatch.setattr(lf, "_probe_bf16", lambda threads: next(choices))
    try:
        lf._bf16_choice.clear()
        monkeypatch.setattr(lf, "_busy", lambda: True)
        lf._fill_bf16(1)
        assert lf._bf16_choice[1] is False
        lf._bf16_choice.clear()                       # a new process, on a quiet machine
        monkeypatch.setattr(lf, "_busy", lambda: False)
        lf._fill_bf16(1)
        assert lf._bf16_choice[1] is True
    finally:
        lf._bf16_choice.clear()
        lf._bf16_choice.update(saved)


def test_busy_means_the_load_average_reaches_the_core_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert lf._busy()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0.0, 0.0))    # this timing alone, on 2 cores
    assert not lf._busy()
