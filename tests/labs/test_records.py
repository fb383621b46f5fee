"""labkit.labs.common.records: typed section records, saved and loaded as JSON bundles."""

import json

import pytest

from labkit.labs.common import records as R
from labkit.labs.common.measure import Verdict, verdict_from_ratios


def ctx(load=0.5, cores=2, mode="fast"):
    return R.RunContext(cpu="Test CPU; torch ISA AVX2; no AMX; no AVX512_BF16", isa="AVX2", threads=1,
                        cores=cores, load=load, mode=mode, kind="test-cpu-avx2-no-bf16")


def rec(**kw):
    v = verdict_from_ratios([1.2, 1.3, 1.25], id="x", claim=("快", "faster"), cores=2, load=0.5)
    base = dict(lab="02", section="7-attention", context=ctx(), rounds={"a": [1.0, 2.0]},
                values={"n": 3, "pair": (1, 2)}, verdicts={"x": v})
    base.update(kw)
    return R.SectionRecord(**base)


def test_record_round_trips_through_json_and_rebuilds_the_verdict():
    r = rec()
    again = R.SectionRecord.from_json(r.to_json())
    assert again == r
    assert again.values["pair"] == [1, 2]
    v = again.verdict("x")
    assert isinstance(v, Verdict) and v.direction == "greater" and v.confidence == "clear"
    assert v.claim == ("快", "faster")


def test_an_infinite_ratio_survives_as_infinity():
    r = rec(verdicts={"x": Verdict.exact(float("inf"))})
    assert R.SectionRecord.from_json(r.to_json()).verdict("x").ratio == float("inf")


def test_bad_fields_are_named():
    with pytest.raises(ValueError, match="lab"):
        rec(lab="2")
    with pytest.raises(ValueError, match="section"):
        rec(section="a b")
    with pytest.raises(ValueError, match="mode"):
        ctx(mode="quick")
    with pytest.raises(KeyError, match="no verdict 'y'"):
        rec().verdict("y")
    with pytest.raises(ValueError, match="unknown field"):
        R.verdict_from_dict({**R.verdict_to_dict(rec().verdict("x")), "bogus": 1})
    with pytest.raises(ValueError, match="schema"):
        R.SectionRecord.from_dict({"schema": "other"})


def test_busy_comes_from_the_load_or_a_busy_verdict():
    assert not rec().busy
    assert rec(context=ctx(load=5.0)).busy
    assert rec().with_verdict("x", confidence="machine busy").busy


def test_with_verdict_changes_a_copy_and_checks_it():
    r = rec()
    flipped = r.with_verdict("x", direction="less")
    assert flipped.verdict("x").direction == "less" and r.verdict("x").direction == "greater"
    with pytest.raises(ValueError, match="direction"):
        r.with_verdict("x", direction="sideways")


def test_save_and_load_a_bundle(tmp_path):
    a, b = rec(), rec(lab="01", section="1.1-growing")
    assert R.save_record(a, tmp_path) == tmp_path / "lab02" / "7-attention.json"
    R.save_record(b, tmp_path)
    bundle = R.load_bundle(tmp_path)
    assert bundle == {"02": {"7-attention": a}, "01": {"1.1-growing": b}}
    (tmp_path / "lab01" / "broken.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        R.load_bundle(tmp_path)
    with pytest.raises(FileNotFoundError):
        R.load_bundle(tmp_path / "nothing")


def test_save_goes_beside_the_results_or_to_LABKIT_RECORDS(tmp_path, monkeypatch):
    monkeypatch.delenv("LABKIT_RECORDS", raising=False)
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    assert R.save_record(rec()) == tmp_path / "results" / "records" / "lab02" / "7-attention.json"
    monkeypatch.setenv("LABKIT_RECORDS", str(tmp_path / "bundle"))
    assert R.save_record(rec()) == tmp_path / "bundle" / "lab02" / "7-attention.json"
    data = json.loads((tmp_path / "bundle" / "lab02" / "7-attention.json").read_text(encoding="utf-8"))
    assert data["context"]["cpu"].startswith("Test CPU") and data["schema"] == R.SCHEMA


def test_find_bundles(tmp_path):
    R.save_record(rec(), tmp_path / "cpu-a" / "fast")
    (tmp_path / "cpu-b" / "full").mkdir(parents=True)          # empty: not a bundle
    assert R.find_bundles(tmp_path, tmp_path / "missing") == {"cpu-a/fast": tmp_path / "cpu-a" / "fast"}


def test_cpu_kind_names_vendor_isa_and_bf16(monkeypatch):
    monkeypatch.delenv("LABKIT_CPU_KIND", raising=False)
    assert R.cpu_kind("AMD EPYC; torch ISA AVX512; no AMX; AVX512_BF16", frozenset({"avx512_bf16"})) \
        == "amd-epyc-avx512-bf16"
    assert R.cpu_kind("Intel(R) Xeon(R) Platinum 8488C; torch ISA AVX512; no AMX; no AVX512_BF16",
                      frozenset()) == "intel-xeon-avx512-no-bf16"
    monkeypatch.setenv("LABKIT_CPU_KIND", "My Laptop")
    assert R.cpu_kind() == "my-laptop"


def test_current_context_reads_this_machine(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "1")
    c = R.RunContext.current(load=0.0)
    assert c.mode == "fast" and c.threads >= 1 and c.cores >= 1 and c.isa and c.cpu and c.kind
    assert "快速模式" in c.caption()
