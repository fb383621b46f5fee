"""The measurement module (labkit.labs.common.measure): how rounds run, how a verdict is reached,
how it is worded, and that injected contention never turns a verdict clearly the wrong way."""

import dataclasses
import json

import pytest
import torch

from labkit.i18n import set_language
from labkit.labs.common import measure
from labkit.labs.common.measure import (
    Clock,
    ContendedClock,
    Sample,
    Verdict,
    busy_warning,
    compare,
    measuring,
    record_verdict,
    verdict_from_ratios,
)


class FakeTime:
    """A clock that only moves when an arm says it did work."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds):
        self.now += seconds




def quiet_load():
    return 0.0


def two_arms(fake, base_s=1.0, cand_s=0.5, log=None):
    def arm(name, cost):
        def run():
            if log is not None:
                log.append(name)
            fake.work(cost)
        return run
    return {"base": arm("base", base_s), "cand": arm("cand", cand_s)}


@pytest.fixture(autouse=True)
def chinese():
    set_language("zh")
    yield
    set_language("zh")


# ----------------------------------------------------------------------------- verdict logic

@pytest.mark.parametrize("ratios, direction, confidence", [
    ([1.2, 1.3, 1.25], "greater", "clear"),
    ([0.5, 0.6, 0.55], "less", "clear"),
    ([0.98, 1.01, 1.03], "same", "clear"),
    ([0.9, 1.2, 1.3], "greater", "within noise"),       # one round below 1: the range includes "no effect"
    ([1.04, 1.3, 1.4], "greater", "within noise"),      # lowest round inside the margin
    ([0.7, 0.8, 1.1], "less", "within noise"),
])
def test_clear_only_when_every_round_lies_beyond_the_margin(ratios, direction, confidence):
    v = verdict_from_ratios(ratios, margin=0.05)
    assert (v.direction, v.confidence) == (direction, confidence)
    assert (v.ratio_min, v.ratio_max) == (min(ratios), max(ratios))


def test_load_above_the_cores_makes_any_verdict_machine_busy_and_keeps_the_direction():
    v = verdict_from_ratios([2.0, 2.1], load=5.0, cores=2)
    assert (v.direction, v.confidence) == ("greater", "machine busy")
    assert verdict_from_ratios([2.0, 2.1], load=2.0, cores=2).confidence == "clear"


def test_a_widely_spread_arm_is_machine_busy_even_at_low_load():
    v = verdict_from_ratios([2.0, 2.1], load=0.1, cores=2, spread=3.0)
    assert v.confidence == "machine busy" and "spread" in v.reasons[0]


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0]])
def test_bad_ratios_are_refused(bad):
    with pytest.raises(ValueError, match="ratios"):
        verdict_from_ratios(bad)


def test_an_exact_verdict_is_clear_and_compares_with_one():
    assert (Verdict.exact(3.0).direction, Verdict.exact(3.0).confidence) == ("greater", "clear")
    assert Verdict.exact(1.0).direction == "same"
    assert Verdict.exact_ratio(2, 4).direction == "less"


def test_verdict_fields_are_checked():
    with pytest.raises(ValueError, match="direction"):
        Verdict("faster", "clear", 1, 1, 1, 0)
    with pytest.raises(ValueError, match="confidence"):
        Verdict("greater", "sure", 1, 1, 1, 0)


# ----------------------------------------------------------------------------- sentences

TEMPLATES = dict(greater=("A 比 B 快", "A is faster than B"), less=("A 比 B 慢", "A is slower than B"),
                 same=("A 和 B 一样快", "A and B are as fast"))


def test_a_clear_verdict_states_the_finding_with_its_range_and_clock():
    v = verdict_from_ratios([2.0, 2.2], clock="CPU time (time.process_time)")
    s = v.sentence(**TEMPLATES)
    assert s.startswith("A 比 B 快") and "2.00×–2.20×" in s and "CPU 时间" in s


def test_within_noise_hedges_instead_of_stating():
    s = verdict_from_ratios([0.9, 1.3]).sentence(**TEMPLATES)
    assert "噪声之内" in s and "不能说明" in s and not s.startswith("A 比 B")


def test_machine_busy_says_what_to_do_in_both_languages(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "0")
    v = verdict_from_ratios([2.0, 2.1], load=9.0, cores=2)
    zh = v.sentence(**TEMPLATES)
    assert "机器正忙" in zh and "LABKIT_FAST=1" in zh and "再运行" in zh and "负载 9.0" in zh
    assert "LABKIT_FAST=1" in busy_warning([v])
    set_language("en")
    en = v.sentence(**TEMPLATES)
    assert "busy" in en and "LABKIT_FAST=1" in en and "Close other programs" in en


@pytest.mark.parametrize("language", ["zh", "en"])
def test_machine_busy_in_fast_mode_does_not_suggest_fast_mode(monkeypatch, language):
    monkeypatch.setenv("LABKIT_FAST", "1")
    set_language(language)
    v = verdict_from_ratios([2.0, 2.1], load=9.0, cores=2)
    sentence, warning = v.sentence(**TEMPLATES), busy_warning([v])
    assert "LABKIT_FAST" not in sentence and "LABKIT_FAST" not in warning
    assert ("关掉别的程序" if language == "zh" else "Close other programs") in sentence
    assert ("重跑本节" if language == "zh" else "rerun this section") in warning


def test_an_exact_verdict_reads_as_a_plain_statement():
    assert Verdict.exact(0.5).sentence(**TEMPLATES) == "A 比 B 慢。"


# ----------------------------------------------------------------------------- compare

def test_arms_interleave_with_alternating_order_and_the_warmup_is_dropped():
    fake, log = FakeTime(), []
    c = compare(two_arms(fake, log=log), baseline="base", rounds=4, warmup=1, clock=fake, load=quiet_load)
    assert log == ["base", "cand", "cand", "base", "base", "cand", "cand", "base", "base", "cand"]
    assert c.order[0] == ("base", "cand") and c.order[1] == ("cand", "base")
    assert len(c.arms["base"].values) == 4 and len(c.arms["cand"].values) == 4


def test_warmup_rounds_do_not_count():
    fake = FakeTime()
    calls = {"n": 0}

    def slow_first():
        calls["n"] += 1
        fake.work(100.0 if calls["n"] == 1 else 1.0)     # the first call pays a one-off cost

    c = compare({"base": slow_first, "cand": lambda: fake.work(0.5)}, baseline="base", rounds=3,
                warmup=1, clock=fake, load=quiet_load)
    assert c.arms["base"].values == (1.0, 1.0, 1.0)
    assert (c.verdict.direction, c.verdict.confidence) == ("less", "clear") and c.ratio == 0.5


def test_speed_uses_work_units_and_inverts_the_ratio():
    fake = FakeTime()
    arms = {"plain": lambda: (fake.work(1.0), 10)[1], "spec": lambda: (fake.work(1.0), 20)[1]}
    c = compare(arms, baseline="plain", rounds=3, clock=fake, quantity="speed", work=lambda n, out: out,
                load=quiet_load)
    assert c.arms["spec"].best == 20.0 and c.ratio == 2.0 and c.verdict.direction == "greater"


def test_an_arm_may_report_its_own_seconds_and_units():
    fake = FakeTime()
    arms = {"a": lambda: Sample(2.0, 4, "x"), "b": lambda: Sample(1.0, 4, "y")}
    c = compare(arms, baseline="a", rounds=2, clock=fake, load=quiet_load)
    assert c.arms["b"].values == (0.25, 0.25) and c.results == {"a": "x", "b": "y"}


def test_the_load_seen_while_measuring_decides_machine_busy():
    fake = FakeTime()
    loads = iter([0.5, 7.0])
    c = compare(two_arms(fake), baseline="base", rounds=2, clock=fake, load=lambda: next(loads))
    assert c.verdict.confidence == "machine busy" or c.cores >= 7
    assert (c.load_before, c.load_after) == (0.5, 7.0)


@pytest.mark.parametrize("kwargs, field", [
    (dict(baseline="nope", rounds=3), "baseline"), (dict(baseline="base", rounds=1), "rounds"),
    (dict(baseline="base", rounds=3, warmup=-1), "warmup"),
    (dict(baseline="base", rounds=3, quantity="fast"), "quantity"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    fake = FakeTime()
    with pytest.raises(ValueError, match=field):
        compare(two_arms(fake), clock=fake, load=quiet_load, **kwargs)


def test_an_arm_that_measured_no_time_is_refused():
    fake = FakeTime()
    with pytest.raises(ValueError, match="no time"):
        compare({"a": lambda: None, "b": lambda: fake.work(1)}, baseline="a", rounds=2, clock=fake,
                load=quiet_load)


def test_measuring_sets_the_threads_from_the_environment_and_restores_them(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("LABKIT_THREADS", raising=False)
    with measuring() as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    monkeypatch.setenv("LABKIT_THREADS", "zero")
    with pytest.raises(ValueError, match="LABKIT_THREADS"):
        measure.measure_threads()


def test_the_clock_is_the_cpu_clock_unless_overridden():
    assert measure.cpu_clock().name.startswith("CPU time")
    fake = FakeTime()
    with measure.clock_override(Clock("fake", fake)):
        assert measure.cpu_clock().name == "fake"
    assert measure.cpu_clock().name.startswith("CPU time")


def test_record_verdict_writes_the_lab_report(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    fake = FakeTime()
    compare(two_arms(fake), baseline="base", rounds=3, clock=Clock("fake clock", fake), load=quiet_load,
            id="demo", claim=("演示", "demo"), lab="09")
    entry = json.loads((tmp_path / "lab09.json").read_text())["verdicts"]["demo"]
    assert entry["direction"] == "less" and entry["confidence"] == "clear" and entry["ratio"] == 0.5
    assert entry["clock"] == "fake clock" and entry["claim"] == {"zh": "演示", "en": "demo"}
    assert entry["arms"]["base"]["values"] == [1.0, 1.0, 1.0] and entry["load"]["cores"] >= 1
    assert entry["cpu"]
    record_verdict("09", Verdict.exact(2.0, id="counted"))
    assert json.loads((tmp_path / "lab09.json").read_text())["verdicts"]["counted"]["deterministic"]
    with pytest.raises(ValueError, match="id"):
        record_verdict("09", Verdict.exact(2.0))


# ----------------------------------------------------------------------------- injected contention

def test_the_contended_clock_only_ever_slows_time_down():
    fake = FakeTime()
    clock = ContendedClock(fake, seed=3, p=0.5, slow=(1, 10), episode=(0.3, 3.0))
    readings = []
    for _ in range(200):
        fake.work(0.1)
        readings.append(clock())
    steps = [b - a for a, b in zip([0.0] + readings, readings)]
    assert all(0.1 - 1e-9 <= s <= 1.0 + 1e-9 for s in steps) and max(steps) > 0.5


@pytest.mark.parametrize("cand_s", [0.5, 0.8, 1.25, 2.0])
@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_contention_never_turns_a_verdict_clearly_the_other_way(cand_s, p):
    fake = FakeTime()
    quiet = compare(two_arms(fake, 1.0, cand_s), baseline="base", rounds=5, clock=fake, load=quiet_load).verdict
    assert quiet.confidence == "clear" and quiet.direction != "same"
    opposite = {"greater": "less", "less": "greater"}[quiet.direction]
    outcomes = {}
    for seed in range(300):
        fake = FakeTime()
        noisy = ContendedClock(fake, seed=seed, p=p, slow=(1, 10), episode=(0.3, 3.0))
        v = compare(two_arms(fake, 1.0, cand_s), baseline="base", rounds=5, clock=noisy, load=quiet_load).verdict
        assert not (v.clear and v.direction == opposite), (seed, v)
        outcomes[v.confidence] = outcomes.get(v.confidence, 0) + 1
    assert outcomes.get("machine busy", 0) + outcomes.get("within noise", 0) > 0   # the noise was felt


def test_the_injected_noise_is_strong_enough_to_fool_a_verdict_without_the_spread_guard():
    """The property above has teeth: judging by the rounds' ratios alone (no spread guard), this
    noise does produce clear verdicts the wrong way for some seeds."""
    flipped = 0
    for seed in range(2000):
        fake = FakeTime()
        noisy = ContendedClock(fake, seed=seed, p=0.5, slow=(1, 10), episode=(0.3, 3.0))
        v = compare(two_arms(fake, 1.0, 0.8), baseline="base", rounds=5, clock=noisy, load=quiet_load,
                    max_spread=float("inf")).verdict
        flipped += v.clear and v.direction == "greater"
    assert flipped > 0


def test_one_round_is_never_clear():
    v = verdict_from_ratios([3.0])
    assert (v.direction, v.confidence) == ("greater", "within noise") and "one round" in v.reasons[-1]


@pytest.mark.skipif(not __import__("os").path.exists("/proc/loadavg"), reason="the instant count is Linux's /proc/loadavg")
def test_machine_load_sees_programs_that_just_started():
    import subprocess
    import sys

    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(measure.cores() + 1)]
    try:
        import time

        time.sleep(0.5)
        assert measure.machine_load() > measure.cores()      # the 1-minute average alone would still be low
    finally:
        for p in loops:
            p.kill()
            p.wait()


@pytest.mark.parametrize("clock, words", [("CPU time (time.process_time)", "CPU 时间"),
                                          ("wall clock after torch.cuda.synchronize()", "同步 GPU"),
                                          ("wall clock (client-side latency)", "客户端")])
def test_the_sentence_names_the_clock_in_chinese(clock, words):
    assert words in verdict_from_ratios([2.0, 2.1], clock=clock).sentence(**TEMPLATES)


def test_the_printed_range_always_holds_the_headline():
    """A headline built across rounds (each arm's best round) can fall outside the paired rounds; the
    range a sentence prints must still hold it ("0.63x, rounds 0.41-0.56x" read as a contradiction in
    lab 05), and a headline outside the "same" band keeps the verdict from being clearly the same."""
    from labkit.labs.common.measure import verdict_from_ratios

    v = verdict_from_ratios([0.41, 0.56], ratio=0.63)
    assert (v.ratio_min, v.ratio, v.ratio_max) == (0.41, 0.63, 0.63)
    assert (v.direction, v.confidence) == ("less", "clear")
    v = verdict_from_ratios([0.99, 1.01], ratio=1.2, margin=0.05)
    assert v.ratio_max == 1.2 and v.confidence == "within noise"
    v = verdict_from_ratios([1.2, 1.4])
    assert (v.ratio_min, v.ratio_max) == (1.2, 1.4)


def test_a_comparison_prints_its_loads_to_one_decimal():
    from labkit.labs.common.measure import compare

    loads = iter([3.248046875, None])
    c = compare({"a": lambda: None, "b": lambda: None}, baseline="a", rounds=2, warmup=0, load=lambda: next(loads))
    assert c.loads == "3.2 → ?"


def test_a_verdict_comes_back_whole_from_its_saved_entry_even_with_an_undefined_ratio():
    from labkit.report.results import finite

    v = Verdict("greater", "within noise", float("inf"), 1.5, float("inf"), 0.1, id="x", claim=("快", "fast"),
                rounds=3, load_before=0.5, load_after=0.7, cores=2, reasons=("spread",))
    saved = json.loads(json.dumps(finite(v.as_entry())))          # as a results summary stores it
    assert saved["ratio"] is None and saved["claim"] == {"zh": "快", "en": "fast"} and "load" in saved
    assert Verdict.from_entry(saved) == v


# ----------------------------------------------------------------------------- the rule, mark and sentence at each case

@pytest.mark.parametrize("ratios, direction, confidence", [
    ([1.3, 1.5], "greater", "clear"),
    ([0.5, 0.7], "less", "clear"),
    ([1.25, 1.25], "same", "clear"),                # exactly 1 + m is within the margin, not beyond it
    ([0.75, 0.75], "same", "clear"),                # exactly 1 - m likewise
    ([1.25, 1.5], "greater", "within noise"),       # the lowest round on the margin: not all beyond it
    ([0.5, 0.75], "less", "within noise"),
    ([0.75, 1.25], "same", "clear"),
])
def test_a_round_exactly_on_the_margin_is_within_it(ratios, direction, confidence):
    v = verdict_from_ratios(ratios, margin=0.25)
    assert (v.direction, v.confidence, v.margin, v.rounds) == (direction, confidence, 0.25, 2)


def test_the_headline_is_the_median_round_unless_given_and_zero_is_a_ratio():
    v = verdict_from_ratios([1.0, 4.0, 1.5])
    assert (v.ratio, v.ratio_min, v.ratio_max, v.rounds) == (1.5, 1.0, 4.0, 3)
    assert verdict_from_ratios([0.0, 0.0]).direction == "less"
    assert verdict_from_ratios([1.0, 1.0], margin=0).confidence == "clear"
    with pytest.raises(ValueError, match="margin"):
        verdict_from_ratios([1.0, 1.0], margin=-0.01)
    with pytest.raises(ValueError, match="ratios"):
        verdict_from_ratios([1.0, float("inf")])


def test_each_reason_a_verdict_is_not_clear_is_said_with_its_numbers():
    assert verdict_from_ratios([2.0, 2.5]).reasons == ()
    assert verdict_from_ratios([0.9, 1.3]).reasons == (
        "round ratios 0.9–1.3 do not all lie on one side of 1 ± 0.05",)
    assert verdict_from_ratios([3.0]).reasons == ("one round only: no spread to judge the noise by",)
    v = verdict_from_ratios([2.0, 2.5], load=5.0, cores=2, spread=3.0)
    assert v.confidence == "machine busy" and v.reasons == (
        "load 5.0 above 2 cores", "an arm's rounds spread 3.00× (more than 1.5×): disturbed")
    assert (v.cores, v.spread, v.load_after) == (2, 3.0, 5.0)


def test_load_equal_to_the_cores_and_spread_equal_to_the_limit_are_not_busy():
    assert verdict_from_ratios([2.0, 2.5], load=2.0, cores=2, spread=1.5).confidence == "clear"
    assert verdict_from_ratios([2.0, 2.5], load=2.01, cores=2).confidence == "machine busy"
    assert verdict_from_ratios([2.0, 2.5], spread=1.51).confidence == "machine busy"
    assert verdict_from_ratios([2.0, 2.5], spread=4.0, max_spread=4.0).confidence == "clear"


def test_the_load_seen_is_the_load_after_unless_the_caller_says_it():
    assert verdict_from_ratios([2.0, 2.5], load=1.5, cores=4).load_after == 1.5
    assert verdict_from_ratios([2.0, 2.5], load=1.5, cores=4, load_after=0.5).load_after == 0.5
    assert verdict_from_ratios([2.0, 2.5]).load_after is None


def test_an_exact_verdict_is_one_clear_round_of_its_ratio_with_the_margin_inclusive():
    v = Verdict.exact(2.0)
    assert (v.confidence, v.ratio, v.ratio_min, v.ratio_max, v.margin, v.rounds, v.deterministic, v.clock) == (
        "clear", 2.0, 2.0, 2.0, 0.0, 1, True, "exact (counted or simulated)")
    assert Verdict.exact(1.25, margin=0.25).direction == "same"
    assert Verdict.exact(0.75, margin=0.25).direction == "same"
    assert Verdict.exact(1.26, margin=0.25).direction == "greater"
    assert Verdict.exact(0.74, margin=0.25).direction == "less"
    assert Verdict.exact_ratio(3, 0).ratio == float("inf") and Verdict.exact_ratio(3, 2).ratio == 1.5
    assert Verdict.exact_ratio(2.5, 2, margin=0.25).direction == "same"
    assert Verdict.exact(2.0, id="n").id == "n"


def test_clear_and_busy_name_the_confidence():
    assert verdict_from_ratios([2.0, 2.5]).clear and not verdict_from_ratios([2.0, 2.5]).busy
    noisy, busy = verdict_from_ratios([0.9, 1.3]), verdict_from_ratios([2.0, 2.5], load=9, cores=2)
    assert not noisy.clear and not noisy.busy and busy.busy and not busy.clear


MARKS = dict(greater=("更快", "faster"), less=("更慢", "slower"), same=("一样", "same"))


@pytest.mark.parametrize("language", ["zh", "en"])
def test_a_clear_verdict_marks_its_direction_and_any_other_its_confidence(language):
    set_language(language)
    zh = language == "zh"
    assert Verdict.exact(2.0).mark(**MARKS) == ("更快" if zh else "faster")
    assert Verdict.exact(0.5).mark(**MARKS) == ("更慢" if zh else "slower")
    assert Verdict.exact(1.0).mark(**MARKS) == ("一样" if zh else "same")
    assert Verdict.exact(1.0).mark() == ""
    assert verdict_from_ratios([0.9, 1.3]).mark(**MARKS) == ("（噪声之内）" if zh else " (within noise)")
    assert verdict_from_ratios([2.0, 2.5], load=9, cores=2).mark(**MARKS) == (
        "（机器正忙）" if zh else " (machine busy)")
    labels = {c: Verdict("same", c, 1, 1, 1, 0).confidence_label for c in measure.CONFIDENCES}
    assert labels == ({"clear": "明确（clear）", "within noise": "噪声之内（within noise）",
                       "machine busy": "机器正忙（machine busy）"} if zh else
                      {"clear": "clear", "within noise": "within noise", "machine busy": "machine busy"})


NUMBERED = dict(greater=("A 快 {ratio}（{lo} 到 {hi}）", "A is faster by {ratio} ({lo} to {hi})"),
                less=("A 慢", "A is slower"), same=("一样", "As fast"))


def test_a_clear_sentence_states_the_finding_then_its_rounds_range_and_clock():
    v = verdict_from_ratios([2.0, 2.5], clock="CPU time (time.process_time)")
    assert v.sentence(**NUMBERED) == "A 快 2.25×（2.00× 到 2.50×）（2 轮在 2.00×–2.50×，CPU 时间）。"
    assert v.sentence(**NUMBERED, unit=" 倍", digits=1) == "A 快 2.2 倍（2.0 倍 到 2.5 倍）（2 轮在 2.0 倍–2.5 倍，CPU 时间）。"
    assert verdict_from_ratios([0.5, 0.5]).sentence(**NUMBERED) == "A 慢（2 轮在 0.50×）。"
    set_language("en")
    assert v.sentence(**NUMBERED) == (
        "A is faster by 2.25× (2.00× to 2.50×) (2 rounds 2.00×–2.50×; CPU time (time.process_time)).")
    assert verdict_from_ratios([1.0, 1.0]).sentence(**NUMBERED) == "As fast (2 rounds 1.00×)."


def test_one_round_hedges_and_asks_for_more_rounds():
    v = verdict_from_ratios([3.0], clock="wall clock")
    assert v.sentence(**NUMBERED) == ("只测了一轮（3.00×，1 轮在 3.00×，墙钟时间），看不出噪声有多大：看起来A 快 3.00×"
                                      "（3.00× 到 3.00×），但这一轮不足以下结论；多测几轮（重跑这一格）才能确定。")
    set_language("en")
    assert v.sentence(**NUMBERED) == (
        "Only one round (3.00×; 1 rounds 3.00×; wall clock), so the noise is unknown: it suggests that a is faster "
        "by 3.00× (3.00× to 3.00×), but one round is not enough to conclude; measure more rounds (rerun this cell) "
        "to be sure.")


def test_within_noise_says_the_measurement_does_not_show_the_finding():
    v = verdict_from_ratios([0.5, 1.5])
    assert v.sentence(**NUMBERED) == "测得 1.00×，2 轮在 0.50×–1.50×：差别在噪声之内，这次测量不能说明「一样」。"
    set_language("en")
    assert v.sentence(**NUMBERED) == ("Measured 1.00×; 2 rounds 0.50×–1.50×: the difference is within noise; "
                                      "this measurement does not show that as fast.")


def test_machine_busy_names_the_load_or_the_spread_and_without_warning_only_hedges(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "1")
    by_load = Verdict("less", "machine busy", 0.5, 0.5, 0.5, 0.05, rounds=2, load_before=9.0, load_after=0.5,
                      cores=2)
    assert by_load.sentence(**NUMBERED) == ("测得 0.50×，2 轮在 0.50×，看起来A 慢；但测量时机器正忙（负载 9.0，2 个核），"
                                            "这个结论不可靠。关掉别的程序，然后再运行这个单元格。")
    by_spread = verdict_from_ratios([2.0, 2.5], spread=3.0, load=1.0, cores=2)
    assert by_spread.sentence(**NUMBERED) == (
        "测得 2.25×，2 轮在 2.00×–2.50×，看起来A 快 2.25×（2.00× 到 2.50×）；但测量时机器正忙"
        "（同一件事各轮用时相差到 3.0 倍），这个结论不可靠。关掉别的程序，然后再运行这个单元格。")
    assert by_load.sentence(**NUMBERED, warn=False) == "测得 0.50×，2 轮在 0.50×，看起来A 慢（机器正忙，不可靠）。"
    set_language("en")
    assert by_load.sentence(**NUMBERED) == (
        "Measured 0.50×; 2 rounds 0.50×, which suggests that a is slower; but the machine was busy while measuring "
        "(load 9.0 on 2 cores), so this is not reliable. Close other programs, then run this cell again.")
    assert by_spread.sentence(**NUMBERED).endswith(
        "(the same work took up to 3.0× longer in one round than in another), so this is not reliable. "
        "Close other programs, then run this cell again.")
    assert by_load.sentence(**NUMBERED, warn=False) == (
        "Measured 0.50×; 2 rounds 0.50×, which suggests that a is slower (machine busy: not reliable).")
    monkeypatch.setenv("LABKIT_FAST", "0")
    assert by_load.sentence(**NUMBERED).endswith(
        "Close other programs, or set LABKIT_FAST=1 before the first cell, then run this cell again.")


def test_the_busy_warning_counts_the_busy_verdicts_of_a_section(monkeypatch):
    monkeypatch.setenv("LABKIT_FAST", "1")
    busy = verdict_from_ratios([2.0, 2.5], load=9, cores=2)
    assert busy_warning([Verdict.exact(2.0), None, verdict_from_ratios([0.9, 1.3])]) == ""
    assert busy_warning([busy, None, busy, Verdict.exact(2.0)]) == (
        "本节 2 个结论测量时机器正忙（负载高于核数，或同一件事各轮用时相差太大），上面标着“不可靠”或“机器正忙”的结论和表格行不要当真。"
        "关掉别的程序，然后重跑本节。")
    set_language("en")
    monkeypatch.setenv("LABKIT_FAST", "0")
    assert busy_warning([busy]) == (
        "1 conclusion(s) in this section were measured while the machine was busy (load above the cores, or rounds "
        "of the same work far apart); do not trust the conclusions and table rows marked 'not reliable' or "
        "'machine busy'. Close other programs, or set LABKIT_FAST=1 before the first cell, then rerun this section.")


def test_an_undefined_ratio_prints_as_infinity_and_other_clocks_as_named():
    v = Verdict.exact_ratio(1.0, 0)
    assert v.sentence(greater=("快 {ratio}", "faster by {ratio}"), less=("", ""), same=("", "")) == "快 ∞×。"
    v = verdict_from_ratios([2.0, 2.5], clock="simulated steps")
    assert v.sentence(**NUMBERED).endswith("（2 轮在 2.00×–2.50×，simulated steps）。")
    v = verdict_from_ratios([2.0, 2.5], clock="wall clock (client-side latency)")
    assert v.sentence(**NUMBERED).endswith("（2 轮在 2.00×–2.50×，墙钟时间（客户端计时））。")


def test_a_verdicts_entry_names_its_claim_and_load_and_comes_back_from_a_plain_record():
    v = verdict_from_ratios([2.0, 2.5], load=1.0, cores=4, id="x", claim=("快", "fast"), load_before=0.5)
    entry = v.as_entry()
    assert entry["claim"] == {"zh": "快", "en": "fast"}
    assert entry["load"] == {"before": 0.5, "after": 1.0, "cores": 4}
    plain = json.loads(json.dumps(dataclasses.asdict(v)))          # a section record: the claim a list
    assert Verdict.from_entry(plain) == v
    plain.update(reasons=None, ratio_max=None)
    back = Verdict.from_entry(plain)
    assert back.reasons == () and back.ratio_max == float("inf")
    assert Verdict.from_entry({k: val for k, val in plain.items() if k != "claim"}).claim == ("", "")


def test_the_thread_count_is_the_positive_integer_set_or_one(monkeypatch):
    for raw, n in (("", 1), (" 1 ", 1), ("2", 2)):
        monkeypatch.setenv("LABKIT_THREADS", raw)
        assert measure.measure_threads() == n
    for raw in ("0", "-1", "1.5"):
        monkeypatch.setenv("LABKIT_THREADS", raw)
        with pytest.raises(ValueError, match=f"LABKIT_THREADS must be a positive integer, got '{raw}'"):
            measure.measure_threads()


def test_the_wall_clock_is_perf_counter_by_its_name_unless_overridden():
    import time

    clock = measure.wall_clock()
    assert (clock.name, clock.read) == ("wall clock (time.perf_counter)", time.perf_counter)
    assert measure.wall_clock("threads overlap").name == "threads overlap"
    fake = Clock("fake", FakeTime())
    with measure.clock_override(fake):
        assert measure.wall_clock() is fake
    assert measure.wall_clock().read is time.perf_counter


def test_a_saved_entry_missing_a_language_or_a_range_end_comes_back_with_the_gaps_filled():
    v = Verdict.exact_ratio(3, 2, id="n", claim=("快", "fast"))
    assert (v.id, v.claim, v.ratio) == ("n", ("快", "fast"), 1.5)
    entry = v.as_entry()
    entry.update(ratio_min=None, claim={"en": "fast"})
    back = Verdict.from_entry(entry)
    assert back.ratio_min == float("inf") and back.claim == ("", "fast")
    entry["claim"] = {"zh": "快"}
    assert Verdict.from_entry(entry).claim == ("快", "")


def test_a_busy_verdict_names_the_load_only_when_it_was_above_the_cores():
    spread_words = "（同一件事各轮用时相差到 2.0 倍）"
    no_load = Verdict("less", "machine busy", 0.5, 0.5, 0.5, 0.05, rounds=2, spread=2.0)
    at_cores = Verdict("less", "machine busy", 0.5, 0.5, 0.5, 0.05, rounds=2, load_after=2.0, cores=2, spread=2.0)
    assert spread_words in no_load.sentence(**NUMBERED) and spread_words in at_cores.sentence(**NUMBERED)
    v = verdict_from_ratios([2.0, 2.5], clock="wall clock after torch.cuda.synchronize()")
    assert v.sentence(**NUMBERED).endswith("（2 轮在 2.00×–2.50×，墙钟时间（同步 GPU 后））。")
    set_language("en")
    assert Verdict.exact(0.5).sentence(**NUMBERED) == "A is slower."


def test_a_comparisons_entry_is_one_candidates_verdict_with_its_and_the_baselines_arms(tmp_path, monkeypatch):
    arms = {"base": lambda: Sample(2.0, 4, None), "a": lambda: Sample(1.0, 4, None), "b": lambda: Sample(4.0, 4, None)}
    c = compare(arms, baseline="base", rounds=2, clock=FakeTime(), load=quiet_load, id="x")
    b = c.as_entry("b")
    first = compare({n: arms[n] for n in ("base", "a")}, baseline="base", rounds=2, clock=FakeTime(),
                    load=quiet_load).as_entry()                 # one candidate: the entry is its verdict's
    assert (first["candidate"], first["baseline"], first["ratio"], sorted(first["arms"])) == ("a", "base", 0.5, ["a", "base"])
    assert (b["candidate"], b["ratio"], sorted(b["arms"])) == ("b", 2.0, ["b", "base"])
    assert b["arms"]["b"] == {"values": [1.0, 1.0], "best": 1.0, "median": 1.0, "seconds": [4.0, 4.0], "units": [4, 4]}
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    record_verdict("09", c, candidate="b", key="k")
    assert json.loads((tmp_path / "lab09.json").read_text())["verdicts"]["k"]["candidate"] == "b"
    with pytest.raises(TypeError) as info:
        record_verdict("09", 3)
    assert str(info.value) == "measured must be a Comparison or a Verdict, got int"
    with pytest.raises(ValueError) as info:
        record_verdict("09", Verdict.exact(2.0))
    assert str(info.value) == "a recorded verdict needs an id: pass id= to compare/Verdict, or key="


def test_the_contended_clock_checks_its_arguments_names_itself_and_repeats_its_seed():
    fake = FakeTime()
    assert ContendedClock(fake, seed=1).p == 0.5
    for p in (0.0, 1.0):
        ContendedClock(fake, seed=1, p=p)
    ContendedClock(fake, seed=1, slow=(1.0, 1.0), episode=(0.5, 0.5))
    for kwargs, message in ((dict(p=-0.01), "p must be in [0, 1], got -0.01"), (dict(p=1.01), "p must be in [0, 1]"),
                            (dict(slow=(0.5, 2.0)), "slow must be (low, high) with 1 <= low <= high, got (0.5, 2.0)"),
                            (dict(slow=(3.0, 2.0)), "slow must be"), (dict(episode=(0.0, 1.0)),
                            "episode must be (low, high) seconds with 0 < low <= high, got (0.0, 1.0)"),
                            (dict(episode=(2.0, 1.0)), "episode must be")):
        with pytest.raises(ValueError) as info:
            ContendedClock(fake, seed=1, **kwargs)
        assert str(info.value).startswith(message), kwargs
    assert ContendedClock(fake, seed=7, p=0.25, slow=(2, 3)).name == "contended clock (seed 7, p=0.25, 2–3×)"
    runs = []
    for _ in range(2):
        fake = FakeTime()
        clock = ContendedClock(fake, seed=5, p=0.5, slow=(2.0, 3.0), episode=(0.1, 0.2))
        runs.append([(fake.work(0.07), clock())[1] for _ in range(50)])
    assert runs[0] == runs[1]
    fake = FakeTime()
    quiet = ContendedClock(fake, seed=5, p=0.0, slow=(2.0, 3.0), episode=(0.1, 0.2))   # never slowed: base time
    assert [(fake.work(0.07), quiet())[1] for _ in range(50)] == pytest.approx([0.07 * i for i in range(1, 51)])


def test_the_load_is_the_larger_of_the_1_minute_average_and_the_median_runnable_count(monkeypatch):
    import io

    from labkit.labs.common.measure import load as L

    counts, opened, pauses = iter(["3/456", "1/456", "2/456", "9/456", "4/456"]), [], []

    def fake_open(path, encoding=None):
        opened.append(path)
        return io.StringIO(f"0.50 0.40 0.30 {next(counts)} 789\n")

    monkeypatch.setattr(L, "open", fake_open, raising=False)
    monkeypatch.setattr(L.time, "sleep", pauses.append)
    monkeypatch.setattr(L.os, "getloadavg", lambda: (2.5, 9.0, 9.0))
    assert L.machine_load() == 3.0                      # median of 5 instant counts, above the 1-minute 2.5
    assert opened == ["/proc/loadavg"] * 5 and pauses == [0.01] * 4
    monkeypatch.setattr(L, "_runnable_now", lambda: None)
    assert L.machine_load() == 2.5

    def no_loadavg():
        raise OSError("no load average here")

    monkeypatch.setattr(L.os, "getloadavg", no_loadavg)
    assert L.machine_load() is None
