"""The fp32 product forms: chosen by timing among the exact ones, cached per machine, forceable."""

from __future__ import annotations

import json

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
    saved = (dict(lf._table), dict(lf._groups), dict(lf._timings))
    monkeypatch.setattr(lf, "cache_path", lambda: tmp_path / "linear_forms.json")
    monkeypatch.delenv(lf.ENV, raising=False)
    lf.forget()
    yield tmp_path / "linear_forms.json"
    lf.forget()
    lf._table.update(saved[0])
    lf._groups.update(saved[1])
    lf._timings.update(saved[2])


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


def test_a_fake_timing_table_picks_its_fastest_exact_form_at_every_row_count(fresh, monkeypatch):
    # (W @ xᵀ)ᵀ is made fastest at even row counts, F.linear at odd ones; the pair forms are slowest.
    def fake(sample, rows, names, rounds=lf.PROBE_ROUNDS):
        return {n: (1.0 if (n == "(W @ xᵀ)ᵀ") == (rows % 2 == 0) else 2.0) + (5.0 if lf.PAIR in n else 0.0)
                for n in names}

    monkeypatch.setattr(lf, "time_forms", fake)
    lf.prepare(weights(SHAPES[0]))
    exact = lf.exact_forms(*SHAPES[0])
    for rows in range(1, lf.MAX_ROWS + 1):
        times = fake(None, rows, exact[rows])
        want = lf.choose(times, exact[rows])
        assert lf.form_name(SHAPES[0], rows) == want
        if rows > 1 and "(W @ xᵀ)ᵀ" in exact[rows]:
            assert want == ("(W @ xᵀ)ᵀ" if rows % 2 == 0 else "F.linear")


@pytest.mark.parametrize("shape", SHAPES)
def test_the_probe_chooses_only_exact_forms(fresh, shape):
    lf.prepare(weights(shape))
    exact = lf.exact_forms(*shape)
    chosen = lf.table()[shape]
    assert sorted(chosen) == list(range(1, lf.PREFILL + 1))
    for rows, name in chosen.items():
        assert name in exact[min(rows, lf.MAX_ROWS)], (rows, name, exact[min(rows, lf.MAX_ROWS)])
    assert chosen[lf.PREFILL] in ("F.linear", lf.NATIVE)


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
    assert stored[key][f"{SHAPES[1][0]}x{SHAPES[1][1]}"] == {str(t): n for t, n in first.items()}
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


def test_unregistered_weights_take_f_linear_and_all_prefill_rows_one_form(fresh):
    assert lf.form_name((123, 45), 4) == "F.linear"
    assert lf.form_name((123, 45), 400) == "F.linear"
    lf.prepare(weights(SHAPES[0]))
    prefill = lf.form_name(SHAPES[0], lf.MAX_ROWS + 1)
    assert prefill in ("F.linear", lf.NATIVE)
    assert all(lf.form_name(SHAPES[0], rows) == prefill for rows in (lf.PREFILL, 64, 1000))


def test_the_prefill_form_is_the_kernel_only_when_it_wins_clearly(fresh, monkeypatch):
    def fake(fast):
        def time_forms(sample, rows, names, rounds=lf.PROBE_ROUNDS):
            return {n: (1.0 if (n == lf.NATIVE) == fast else 2.0) for n in names}
        return time_forms

    if lf.NATIVE not in lf.candidates():
        pytest.skip(f"C kernel unavailable: {native.why_unavailable()}")
    for fast, want in ((True, lf.NATIVE), (False, "F.linear")):
        lf.forget()
        monkeypatch.setattr(lf, "_read_cache", lambda: {})
        monkeypatch.setattr(lf, "time_forms", fake(fast))
        lf.prepare(weights(SHAPES[0]))
        assert lf.form_name(SHAPES[0], 100) == want


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
