"""The fp32 product forms: one batch-invariant form for every row count, chosen by timing, cached per
machine, forceable."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F

from labkit.kernels import native
from labkit.kernels.ops.torch_ops import linear
from labkit.kernels.tuning import bf16, cache, forms, fp32, timing, walks
from labkit.kernels.tuning.forms import Form
from labkit.kernels.tuning.walks import Walk

SHAPES = [(200, 96), (64, 1152)]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty in-process table and a private disk cache; restored afterwards."""
    for name in ("_table", "_groups", "_timings"):
        monkeypatch.setattr(fp32, name, {})
    monkeypatch.setattr(forms, "_pad", {})
    monkeypatch.setattr(cache, "cache_path", lambda: tmp_path / "linear_forms.json")
    monkeypatch.delenv(fp32.ENV, raising=False)
    walk = native.sequential_rows()
    yield tmp_path / "linear_forms.json"
    native.set_sequential_rows(walk)


def weights(shape, count=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(count)]


def test_choose_takes_the_fastest_exact_form_and_never_an_inexact_one():
    exact = [Form.F_LINEAR, Form.W_XT]
    times = {Form.F_LINEAR: 3.0, Form.W_XT: 2.0, "fast but inexact": 0.5}
    assert timing.choose(times, exact) is Form.W_XT
    # a near tie (within the margin) keeps F.linear: noise must not flip the choice
    assert timing.choose({Form.F_LINEAR: 2.05, Form.W_XT: 2.0}, exact) is Form.F_LINEAR
    assert timing.choose({Form.F_LINEAR: 2.05, Form.W_XT: 2.0}, exact, margin=0.0) is Form.W_XT
    with pytest.raises(ValueError, match="no exact form"):
        timing.choose({"fast but inexact": 0.5}, [Form.F_LINEAR])


def test_the_probe_keeps_padded_f_linear_unless_the_kernel_wins_clearly_one_form_for_every_row_count(fresh, monkeypatch):
    def fake(fast):
        def time_forms(sample, rows, named, rounds=timing.PROBE_ROUNDS, dtype=None):
            return {n: (1.0 if (n is Form.NATIVE) == fast else 2.0) for n in named}
        return time_forms

    kernel = Form.NATIVE in forms.candidates()
    for fast, want in ((True, Form.NATIVE if kernel else Form.PADDED), (False, Form.PADDED)):
        fp32.forget()
        monkeypatch.setattr(cache, "read", lambda: {})
        monkeypatch.setattr(timing, "time_forms", fake(fast))
        fp32.prepare(weights(SHAPES[0]))
        assert all(fp32.form_name(SHAPES[0], rows) is want for rows in (*fp32.ROWS, 64, 1000))


@pytest.mark.parametrize("shape", SHAPES)
def test_the_probe_chooses_one_batch_invariant_exact_form(fresh, shape):
    fp32.prepare(weights(shape))
    exact = forms.exact_forms(*shape)
    chosen = fp32.table()[shape]
    assert sorted(chosen) == list(fp32.ROWS)
    assert len(set(chosen.values())) == 1 and chosen[1] in forms.INVARIANT
    for rows, form in chosen.items():
        assert form in exact[min(rows, forms.MAX_ROWS)], (rows, form, exact[min(rows, forms.MAX_ROWS)])


@pytest.mark.parametrize("form", forms.INVARIANT)
@pytest.mark.parametrize("shape", [(576, 1536), (3072, 576), (200, 96)])
def test_each_invariant_form_gives_a_row_the_same_bits_at_every_row_count_and_position(form, shape):
    """A row's product must not depend on the batch it is in (async scheduling, chunked
    prefill and speculative verification all change the row count around a request)."""
    if form not in forms.candidates() or (form is Form.NATIVE and not forms.kernel_admitted(*shape)):
        pytest.skip(f"{form} is not available here: {native.why_unavailable()}")
    g = torch.Generator().manual_seed(shape[0])
    w, x = torch.randn(*shape, generator=g), torch.randn(300, shape[1], generator=g)
    fn = forms.FORMS[form]
    with torch.inference_mode():
        full = fn(x, w)
        for t in (*range(1, 41), 63, 64, 65, 130, 256):
            assert torch.equal(fn(x[:t], w), full[:t]), t
        for i in range(0, 300, 13):
            assert torch.equal(fn(x[i:i + 1], w), full[i:i + 1]), i
            assert torch.equal(fn(x[i:i + 5], w), full[i:i + 5]), i


def test_padded_f_linear_gives_each_row_the_bits_f_linear_gives_it_in_a_batch_of_pad_rows():
    shape = (3072, 576)
    m = forms.pad_rows(*shape)
    assert m is not None and 1 <= m <= forms.MAX_ROWS + 1
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(*shape, generator=g), torch.randn(64, shape[1], generator=g)
    full = F.linear(x, w)
    assert all(torch.equal(F.linear(x[:t], w), full[:t]) for t in range(m, 64))
    assert all(torch.equal(forms.FORMS[Form.PADDED](x[:t], w), full[:t]) for t in range(1, m + 1))


def test_the_gate_always_admits_f_linear_and_rejects_a_different_summation_order():
    def reversed_sum(x, w):           # the same products, summed from the last column to the first
        return (x[:, None, :] * w[None]).flip(-1).cumsum(-1)[..., -1]

    exact = forms.exact_forms(64, 1152, max_rows=4, forms={"F.linear": F.linear, "reversed": reversed_sum})
    assert all(exact[t] == ["F.linear"] for t in range(1, 5)), exact


def test_the_table_is_cached_on_disk_per_machine_and_read_back_without_probing(fresh, monkeypatch):
    fp32.prepare(weights(SHAPES[1]))
    first = fp32.table()[SHAPES[1]]
    stored = json.loads(fresh.read_text())
    key = cache.machine_key(torch.get_num_threads(), fp32.SUBJECT)
    entry = stored[key][f"{SHAPES[1][0]}x{SHAPES[1][1]}"]
    assert entry == {**{str(t): form.value for t, form in first.items()}, "pad": forms.pad_rows(*SHAPES[1])}
    fp32.forget()
    monkeypatch.setattr(fp32, "probe_shapes", lambda *a: pytest.fail("probed although the disk cache had the table"))
    fp32.prepare(weights(SHAPES[1]))
    assert fp32.table()[SHAPES[1]] == first


def test_a_damaged_cache_entry_is_probed_again(fresh):
    key = cache.machine_key(torch.get_num_threads(), fp32.SUBJECT)
    fresh.write_text(json.dumps({key: {f"{SHAPES[0][0]}x{SHAPES[0][1]}": {"1": "no such form"}}}))
    fp32.prepare(weights(SHAPES[0]))
    assert set(fp32.table()[SHAPES[0]].values()) <= set(forms.FORMS)


def test_one_thread_is_filled_at_load_and_a_new_thread_count_on_first_use(fresh):
    fp32.prepare(weights(SHAPES[0]))
    assert sorted(fp32.table(1)[SHAPES[0]]) == list(fp32.ROWS)     # what the labs time with
    other = torch.get_num_threads() + 1
    assert fp32.table(other) == {}
    assert fp32.form_name(SHAPES[0], 3, threads=other) in forms.FORMS
    assert sorted(fp32.table(other)[SHAPES[0]]) == list(fp32.ROWS)


def test_unregistered_weights_take_f_linear(fresh):
    assert fp32.form_name((123, 45), 4) is Form.F_LINEAR
    assert fp32.form_name((123, 45), 400) is Form.F_LINEAR


def test_a_form_can_be_forced_by_context_or_environment(fresh, monkeypatch):
    fp32.prepare(weights(SHAPES[0]))
    with fp32.forced(Form.W_XT):
        assert all(fp32.form_name(SHAPES[0], t) is Form.W_XT for t in range(1, 17))
    with fp32.forced("(W @ xᵀ)ᵀ"):                      # by the name tables print
        assert fp32.form_name(SHAPES[0], 3) is Form.W_XT
    with pytest.raises(ValueError, match="unknown linear form 'gemm': choose one of F.linear, "):
        with fp32.forced("gemm"):
            pass
    monkeypatch.setenv(fp32.ENV, "F.linear of a pair")
    assert fp32.form_name(SHAPES[0], 1) is Form.F_LINEAR_PAIR
    monkeypatch.setenv(fp32.ENV, "nope")
    with pytest.raises(ValueError, match=fp32.ENV):
        fp32.form_name(SHAPES[0], 1)


@pytest.mark.parametrize("form", list(forms.FORMS))
@pytest.mark.parametrize("rows", [1, 2, 7, 16])
def test_every_form_computes_the_product(form, rows):
    if form not in forms.candidates():
        pytest.skip(f"{form} is not available here: {native.why_unavailable()}")
    g = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 96, generator=g), torch.randn(200, 96, generator=g)
    with fp32.forced(form):
        got = linear(x, w)
    assert got.shape == (rows, 200)
    torch.testing.assert_close(got, F.linear(x, w), rtol=1e-5, atol=1e-4)


def test_the_default_model_registers_its_shapes_with_exact_choices(llm):
    net = llm.engine.runner.model
    shapes = {tuple(w.shape) for w in net.linear_weights()}
    chosen = fp32.table()
    assert shapes <= set(chosen), (shapes, set(chosen))
    for shape in sorted(shapes, key=lambda s: s[0] * s[1])[:2]:      # the gate is cheap on the small ones
        exact = forms.exact_forms(*shape)
        assert all(chosen[shape][t] in exact[t] for t in exact), shape


def test_without_an_invariant_form_the_probe_warns_and_keeps_f_linear(fresh, monkeypatch):
    monkeypatch.setattr(fp32, "invariant_forms", lambda shapes: [])
    with pytest.warns(RuntimeWarning, match="batch-invariant"):
        fp32.prepare(weights(SHAPES[0]))
    assert set(fp32.table()[SHAPES[0]].values()) == {Form.F_LINEAR}


def test_a_choice_timed_while_busy_is_timed_again_once_the_machine_is_quiet(fresh, monkeypatch):
    # (A bf16 choice timed beside a CI run once picked PyTorch's form and kept it for good.)
    timed, chosen = [], []

    def walk(crossover):
        """time_walks for set_crossover whose timings make the sequential walk win up to ``crossover`` rows."""
        return lambda: timed.append(crossover) or {
            rows: {Walk.TILES: 2.0, Walk.SEQUENTIAL: 1.0 if rows <= crossover else 3.0} for rows in walks.WALK_ROWS}

    monkeypatch.setattr(cache, "is_busy", lambda: True)
    walks.set_crossover("walk", chosen.append, walk(2))
    walks.set_crossover("walk", chosen.append, walk(4))          # still busy: the choice stands
    assert timed == [2] and chosen == [2, 2]
    monkeypatch.setattr(cache, "is_busy", lambda: False)
    walks.set_crossover("walk", chosen.append, walk(4))          # quiet: timed again, and kept
    walks.set_crossover("walk", chosen.append, walk(8))
    assert timed == [2, 4] and chosen == [2, 2, 4, 4]
    data = json.loads(fresh.read_text())
    key = next(k for k in data if k.endswith("| walk"))
    assert data[key] == 4 and key + cache.PROVISIONAL not in data


def test_a_second_models_shapes_are_cached_beside_the_firsts(fresh, monkeypatch):
    fp32.prepare(weights(SHAPES[0]))
    fp32.forget()
    fp32.prepare(weights(SHAPES[1]))
    fp32.forget()
    monkeypatch.setattr(fp32, "probe_shapes", lambda *a: pytest.fail("probed although both models' shapes were cached"))
    for shape in SHAPES:
        fp32.prepare(weights(shape))
        fp32.forget()


def test_a_check_of_bits_is_never_provisional(fresh, monkeypatch):
    monkeypatch.setattr(cache, "is_busy", lambda: True)
    assert cache.cached_or_probe("gate", lambda: "verdict", lambda found: found is not None, timed=False) == "verdict"
    assert json.loads(fresh.read_text()) == {"gate": "verdict"}
    assert cache.cached_or_probe("gate", lambda: pytest.fail("checked again"), lambda found: found is not None) == "verdict"


def test_the_bf16_choice_is_retimed_after_a_busy_timing(fresh, monkeypatch):
    choices = iter([False, True])
    monkeypatch.setattr(bf16, "_probe", lambda threads: next(choices))
    monkeypatch.setattr(bf16, "_choice", {})
    monkeypatch.setattr(cache, "is_busy", lambda: True)
    assert bf16._uses_kernel_as_timed(1) is False
    bf16._choice.clear()                       # a new process, on a quiet machine
    monkeypatch.setattr(cache, "is_busy", lambda: False)
    assert bf16._uses_kernel_as_timed(1) is True


def test_busy_means_the_load_average_reaches_the_core_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert cache.is_busy()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0.0, 0.0))    # this timing alone, on 2 cores
    assert not cache.is_busy()
