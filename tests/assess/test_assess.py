"""Assessment: quizzes judge every option, exercises judge learner code safely and helpfully."""

from __future__ import annotations

import os
import random
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labkit.labs.common.display as display
from labkit import set_language
from labkit.assess import MultipleChoice, Numeric, Quiz
from labkit.labs.exercises import EXERCISES, exercise
from labkit.labs.lab03_batching.exercises import RequestState


@pytest.fixture(autouse=True)
def chinese_by_default(monkeypatch):
    monkeypatch.setenv("LABKIT_LEARNER_ID", "test-learner")     # quizzes shuffle; never touch ~/.cache
    set_language("zh")
    yield
    set_language("zh")


# ----------------------------------------------------------------------------- learner answers

def kv_forgets_v(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return num_layers * num_kv_heads * head_dim * dtype_bytes


def kv_crashes(num_layers, num_kv_heads, head_dim, dtype_bytes):
    shape = [num_layers, num_kv_heads]
    return shape[2] * head_dim  # the line the learner must be shown


def kv_loops_forever(num_layers, num_kv_heads, head_dim, dtype_bytes):
    total = 0
    while total >= 0:
        total += 1


def kv_stub(num_layers, num_kv_heads, head_dim, dtype_bytes):
    """Starter code: the body is still `...`."""
    ...  # noqa: PIE790  (the starter body under test)


def kv_no_return(num_layers, num_kv_heads, head_dim, dtype_bytes):
    2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def kv_calls_exit(*args):
    sys.exit(3)


def kv_kills_its_process(*args):
    os._exit(7)


def kv_correct(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


class FirstFitFreesOneSlot:
    def __init__(self, num_slots):
        self.used, self.sizes = [False] * num_slots, {}

    def allocate(self, size):
        run = 0
        for slot, taken in enumerate(self.used):
            run = 0 if taken else run + 1
            if run == size:
                start = slot - size + 1
                self.used[start:slot + 1] = [True] * size
                self.sizes[start] = size
                return start
        return None

    def free(self, start):
        self.used[start] = False


class FirstFitStub:
    def __init__(self, num_slots):
        self.num_slots = num_slots

    def allocate(self, size):
        raise NotImplementedError

    def free(self, start):
        pass


class LifoBlockAllocator:
    def __init__(self, num_blocks):
        self.free_ids, self.counts = list(range(num_blocks))[::-1], [0] * num_blocks

    def allocate(self):
        if not self.free_ids:
            return None
        block = self.free_ids.pop()
        self.counts[block] = 1
        return block

    def share(self, block):
        self.counts[block] += 1

    def free(self, block):
        self.counts[block] -= 1
        if self.counts[block] == 0:
            self.free_ids.append(block)     # LIFO: the freed block is reused first

    def num_free_blocks(self):
        return len(self.free_ids)

    def ref_count(self, block):
        return self.counts[block]


def schedule_ignoring_budget(running, waiting, max_num_batched_tokens, max_num_seqs):
    return {r.request_id: r.num_tokens - r.num_computed_tokens for r in running + waiting}


def schedule_mutating_input(running, waiting, max_num_batched_tokens, max_num_seqs):
    for r in running:
        r.num_computed_tokens += 1
    return {}


def greedy_drops_recovered_token(draft_token_ids, target_token_ids):
    out = []
    for d, t in zip(draft_token_ids, target_token_ids):
        if d != t:
            return out
        out.append(d)
    return out + [target_token_ids[len(out)]]


def _weighted(weights, rng):
    return rng.choices(range(len(weights)), weights=weights)[0]


def verify_accepting_everything(draft_token_ids, draft_probs, target_probs, rng):
    return list(draft_token_ids) + [_weighted(target_probs[-1], rng)]


def verify_resampling_from_p(draft_token_ids, draft_probs, target_probs, rng):
    out = []
    for i, x in enumerate(draft_token_ids):
        if rng.random() < min(1.0, target_probs[i][x] / draft_probs[i][x]):
            out.append(x)
            continue
        return out + [_weighted(target_probs[i], rng)]     # should be max(0, p - q)
    return out + [_weighted(target_probs[-1], rng)]


def verify_own_draw_order(draft_token_ids, draft_probs, target_probs, rng):
    """Correct, but draws random numbers in a different order than the reference."""
    uniforms = [rng.random() for _ in draft_token_ids]
    out = []
    for i, x in enumerate(draft_token_ids):
        p, q = target_probs[i], draft_probs[i]
        if uniforms[i] * q[x] < p[x]:
            out.append(x)
            continue
        return out + [_weighted([max(0.0, a - b) for a, b in zip(p, q)], rng)]
    return out + [_weighted(target_probs[-1], rng)]


# ----------------------------------------------------------------------------- exercises

@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_reference_solution_passes_all_its_hidden_checks(name):
    ex = exercise(name)
    result = ex.self_test()
    assert result.passed, result.message
    assert result.num_passed == result.num_checks == len(ex.checks) >= 4


def test_kv_checks_include_smollm2_and_opt13b_with_their_byte_counts():
    ex = exercise("kv_bytes_per_token")
    expected = dict(zip([c.label["en"].split("  #")[0] for c in ex.checks], ex.expected_values()))
    assert expected["kv_bytes_per_token(40, 40, 128, 2)"] == 819_200          # OPT-13B ≈ 800 KB
    assert expected["kv_bytes_per_token(30, 3, 64, 2)"] == 2 * 30 * 3 * 64 * 2  # SmolLM2-135M


def test_no_answer_yet_fails_without_running_anything():
    result = exercise("kv_bytes_per_token").check(None)
    assert not result.passed and result.num_passed == 0
    assert "还没有可检查的代码" in result.message


@pytest.mark.parametrize("stub, name", [(kv_stub, "kv_stub"), (FirstFitStub, "FirstFitStub.allocate")])
def test_a_placeholder_body_is_named_as_unfinished(stub, name):
    ex = exercise("kv_bytes_per_token" if stub is kv_stub else "first_fit_allocator")
    result = ex.check(stub)
    assert not result.passed
    assert f"{name} 还只是占位" in result.message


def test_a_wrong_answer_shows_the_failing_input_expected_and_actual_value():
    result = exercise("kv_bytes_per_token").check(kv_forgets_v)
    assert not result.passed and result.num_passed == 0
    assert result.failure.kind == "wrong"
    assert result.failure.expected == 23040 and result.failure.got == 11520
    assert "kv_bytes_per_token(30, 3, 64, 2)" in result.message
    assert "既要存 K，也要存 V" in result.message        # the typical-mistake note
    assert "提示 2/2" in result.message                 # half with 2-byte numbers: check every factor


def test_a_missing_return_is_pointed_out():
    result = exercise("kv_bytes_per_token").check(kv_no_return)
    assert result.failure.got is None
    assert "忘了 return" in result.message


def test_an_exception_is_reported_at_the_learners_line_and_pushes_no_unrelated_hint():
    ex = exercise("kv_bytes_per_token")
    first = ex.check(kv_crashes)
    assert first.failure.kind == "error"
    assert first.failure.error.type_name == "IndexError"
    assert first.failure.error.line == "return shape[2] * head_dim  # the line the learner must be shown"
    assert first.failure.error.lineno == kv_crashes.__code__.co_firstlineno + 2
    assert "Traceback" not in first.message
    assert "提示 1/2" not in first.message and ".hint()" in first.message
    assert ex.hint().number == 1                        # the hints are still all there


@pytest.mark.timeout(30)   # a broken sandbox must fail this test, not hang the suite
def test_an_endless_loop_is_stopped_within_the_time_limit_and_checking_goes_on():
    ex = exercise("kv_bytes_per_token")
    ex.time_limit_s = 1.0
    started = time.monotonic()
    result = ex.check(kv_loops_forever)
    assert time.monotonic() - started < 3.0
    assert result.failure.kind == "timeout" and result.failure.index == 0
    assert "永远不结束的循环" in result.message
    assert ex.check(kv_correct).passed


def test_the_default_time_limit_is_about_five_seconds():
    assert exercise("kv_bytes_per_token").time_limit_s == 5.0


def test_exit_in_learner_code_is_reported_not_obeyed():
    result = exercise("kv_bytes_per_token").check(kv_calls_exit)
    assert result.failure.kind == "error" and result.failure.error.type_name == "SystemExit"


def test_a_child_that_dies_is_reported_with_its_exit_code():
    result = exercise("kv_bytes_per_token").check(kv_kills_its_process)
    assert result.failure.kind == "crash" and result.failure.got == 7


def test_a_wrong_allocator_is_shown_the_steps_up_to_its_first_wrong_result():
    result = exercise("first_fit_allocator").check(FirstFitFreesOneSlot)
    assert not result.passed
    lines = result.message.splitlines()
    assert "  allocate(4) → 0  ✓" in lines and "  free(0)  ✓" in lines
    assert "  allocate(2) → 期望 0，得到 7  ✗" in lines


def test_a_lifo_free_list_fails_the_fifo_block_allocator():
    result = exercise("block_allocator").check(LifoBlockAllocator)
    assert not result.passed and result.failure.kind == "wrong"


def test_a_scheduler_that_ignores_the_token_budget_fails():
    result = exercise("schedule_step").check(schedule_ignoring_budget)
    assert not result.passed
    assert "max_num_batched_tokens" in result.message


def test_a_scheduler_that_modifies_its_inputs_is_stopped_with_an_error():
    result = exercise("schedule_step").check(schedule_mutating_input)
    assert result.failure.kind == "error"
    assert result.failure.error.type_name == "FrozenInstanceError"


def test_scheduler_input_is_the_vllm_style_request_state():
    request = RequestState("a", num_tokens=10, num_computed_tokens=9)
    assert request.num_tokens - request.num_computed_tokens == 1


def test_greedy_verify_without_the_recovered_token_fails():
    assert not exercise("greedy_verify").check(greedy_drops_recovered_token).passed


@pytest.mark.parametrize("verifier", [verify_accepting_everything, verify_resampling_from_p])
def test_wrong_rejection_samplers_fail(verifier):
    result = exercise("rejection_verify").check(verifier)
    assert not result.passed


def test_resampling_from_p_is_caught_by_the_distribution_check():
    result = exercise("rejection_verify").check(verify_resampling_from_p)
    assert result.failure.index == 4
    assert "总变差距离" in result.message


def test_a_correct_rejection_sampler_with_its_own_draw_order_passes():
    result = exercise("rejection_verify").check(verify_own_draw_order)
    assert result.passed, result.message


def test_hints_come_one_at_a_time_and_the_last_repeats():
    ex = exercise("first_fit_allocator")
    numbers = [ex.hint().number for _ in range(5)]
    assert numbers == [1, 2, 3, 3, 3]


def test_exercise_messages_follow_the_language():
    set_language("en")
    result = exercise("kv_bytes_per_token").check(kv_forgets_v)
    assert "hidden tests passed" in result.message and "expected: 23040" in result.message
    assert "Hint 2/2" in result.message


def test_check_result_renders_as_escaped_html():
    html = exercise("kv_bytes_per_token").check(kv_crashes)._repr_html_()
    assert html.startswith("<div") and "IndexError" in html and "<script" not in html


# ----------------------------------------------------------------------------- quiz

KV_QUESTION = MultipleChoice(
    question={"zh": "KV 缓存里存的是什么？", "en": "What does the KV cache hold?"},
    options=[{"zh": "每层的 K 和 V", "en": "K and V of every layer"},
             {"zh": "注意力权重", "en": "attention weights"},
             {"zh": "模型参数", "en": "model weights"}],
    answer=0,
    explanations=[{"zh": "每个 token 每层一份 K、一份 V。", "en": "One K and one V per token per layer."},
                  {"zh": "注意力权重每步重新计算。", "en": "Attention weights are recomputed every step."},
                  {"zh": "参数与序列无关。", "en": "Weights do not depend on the sequence."}])

OPT_QUESTION = Numeric(
    question={"zh": "OPT-13B 每个 token 的 KV 字节数？", "en": "KV bytes per token for OPT-13B?"},
    answer=819_200, tol=1_000, unit={"zh": "字节", "en": "bytes"},
    hint={"zh": "2 × 层数 × 头数 × head_dim × 2 字节", "en": "2 × layers × heads × head_dim × 2 bytes"})


@pytest.mark.parametrize("choice", range(3))
def test_each_option_gets_its_own_verdict_and_explanation(choice):
    feedback = KV_QUESTION.check(choice)
    assert feedback.correct == (choice == 0)
    assert KV_QUESTION.explanations[choice]["zh"] in feedback.message
    assert feedback.message.startswith("✓" if choice == 0 else "✗")


def test_an_option_can_be_given_by_letter_or_text():
    assert KV_QUESTION.check("A").correct
    assert KV_QUESTION.check("attention weights") == KV_QUESTION.check(1)
    assert not KV_QUESTION.check("Z").correct


def test_a_multiple_choice_answer_outside_the_options_is_rejected():
    with pytest.raises(ValueError, match="answer"):
        MultipleChoice("q", ["a", "b"], answer=2)


@pytest.mark.parametrize("typed, correct", [(819_200, True), ("819,200", True), (820_200, True),
                                            (820_201, False), (818_199, False), (409_600, False)])
def test_numeric_answers_are_right_within_the_tolerance(typed, correct):
    assert OPT_QUESTION.check(typed).correct is correct


def test_a_wrong_number_says_which_way_and_gives_the_hint():
    feedback = OPT_QUESTION.check(409_600)
    assert "偏小" in feedback.message and "2 × 层数" in feedback.message


def test_text_that_is_not_a_number_asks_for_a_number():
    assert not OPT_QUESTION.check("about 800KB").correct
    assert "请输入一个数字" in OPT_QUESTION.check("about 800KB").message


@settings(max_examples=60, deadline=None)
@given(answer=st.floats(-1e6, 1e6), tol=st.floats(0.01, 1e3), inside=st.floats(0, 0.99), sign=st.sampled_from([-1, 1]))
def test_numeric_tolerance_is_absolute_and_symmetric(answer, tol, inside, sign):
    q = Numeric("q", answer=answer, tol=tol)
    assert q.check(answer + sign * inside * tol).correct
    assert not q.check(answer + sign * 1.01 * tol).correct


def test_relative_tolerance_scales_with_the_answer():
    q = Numeric("q", answer=2000, rel_tol=0.05)
    assert q.check(2099).correct and not q.check(2101).correct


def test_quiz_feedback_switches_to_english():
    set_language("en")
    assert KV_QUESTION.check(1).message == "✗ Not quite. Attention weights are recomputed every step."
    assert OPT_QUESTION.check(409_600).message.startswith("✗ 409,600 is too low.")
    assert Quiz([KV_QUESTION, OPT_QUESTION]).check([0, "819200"])[1].message.startswith("✓ Correct: 819,200 bytes.")


def test_a_quiz_on_screen_relabels_itself_when_the_language_changes():
    view = Quiz([KV_QUESTION, OPT_QUESTION]).view()
    view.views[0].answer(1)
    assert "注意力权重每步重新计算" in view.views[0].feedback.value
    set_language("en")
    assert any("K and V of every layer" in label.value for label in view.views[0].labels)
    assert "recomputed every step" in view.views[0].feedback.value
    assert view.views[1].button.description == "Check"
    assert view.score.value == "Answered 1/2, right at the first attempt 0/2"


def test_clicking_options_marks_buttons_and_updates_the_score():
    view = Quiz([KV_QUESTION, OPT_QUESTION]).view()
    view.views[0].answer(0)
    view.views[1].answer("819200")
    choice = view.views[0]
    assert choice.buttons[choice.order.index(0)].button_style == "success"   # the row showing option 0
    assert view.views[1].button.button_style == "success"
    assert view.score.value == "已作答 2/2，第一次就答对 2/2"


def test_a_quiz_displays_as_an_ipywidget():
    bundle = Quiz([KV_QUESTION])._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


# ----------------------------------------------------------------------------- display helpers

def test_predict_reveals_the_measured_value_and_the_error():
    calls = []
    prediction = display.predict("多少？", lambda: calls.append(1) or 200.0, unit="MB")
    result = prediction.reveal("250")
    assert (result.actual, result.relative_error) == (200.0, 0.25)
    assert "测得：200 MB" in result.message and "偏高 25%" in result.message
    prediction.reveal(200)
    assert calls == [1]


def test_predict_widget_asks_for_a_guess_before_revealing():
    view = display.PredictionView(display.predict("?", 3.0))
    view.reveal()
    assert view.result is None and "请先写下" in view.output.value
    view.entry.value = "3"
    view.reveal()
    assert "与测得值相同" in view.output.value and view.entry.disabled


def test_show_source_highlights_labkit_code_with_its_path():
    from labkit.labs.lab01_kv_cache.solutions import kv_bytes_per_token
    html = display.source_html(kv_bytes_per_token)
    assert "labkit/labs/lab01_kv_cache/solutions.py" in html
    assert "kv_bytes_per_token" in html and "style=" in html


def test_fast_picks_the_small_value_only_in_fast_mode(monkeypatch):
    monkeypatch.setattr(display, "FAST", False)
    assert display.fast(200, 20) == 200
    monkeypatch.setattr(display, "FAST", True)
    assert display.fast(200, 20) == 20


def test_random_first_fit_sequences_only_free_live_regions():
    from labkit.labs.lab01_kv_cache.exercises import _random_first_fit_ops
    ops = _random_first_fit_ops(seed=random.Random(1).randrange(100), num_slots=32, num_ops=40)
    freed = [args[0].index for name, args in ops if name == "free"]
    assert len(freed) == len(set(freed)) and all(ops[i][0] == "allocate" for i in freed)
