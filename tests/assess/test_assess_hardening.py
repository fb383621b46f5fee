"""Assessment hardening: learner code never sees expected values, never runs in the kernel, and
quizzes and hints cannot be gamed. Every test here failed before its fix."""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import time

import pytest

from labkit import set_language
from labkit.assess import Exercise, MultipleChoice, Numeric, Quiz
from labkit.assess.checks import Check, call_check
from labkit.labs.exercises import exercise
from labkit.labs.lab01_kv_cache.quiz import questions as lab01_questions


@pytest.fixture(autouse=True)
def chinese_by_default(monkeypatch):
    monkeypatch.setenv("LABKIT_LEARNER_ID", "test-learner")     # quizzes shuffle; never touch ~/.cache
    set_language("zh")
    yield
    set_language("zh")


def _kv(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


# ----------------------------------------------------------------------------- 12.2 expectations out of reach

def _holds(value, target, depth=0) -> bool:
    if type(value) is int:
        return value == target
    if depth < 3 and isinstance(value, (list, tuple)):
        return any(_holds(v, target, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return any(_holds(v, target, depth + 1) for v in value.values())
    return False


def kv_reads_expected_from_the_stack(num_layers, num_kv_heads, head_dim, dtype_bytes):
    """Knows the answer only to look for it: returns it if any caller's locals hold it."""
    target = _kv(num_layers, num_kv_heads, head_dim, dtype_bytes)
    frame = sys._getframe().f_back
    while frame is not None:
        if any(_holds(v, target) for v in dict(frame.f_locals).values()):
            return target
        frame = frame.f_back
    return None


def kv_asks_the_checker(num_layers, num_kv_heads, head_dim, dtype_bytes):
    frame = sys._getframe().f_back
    while frame is not None:
        owner = frame.f_locals.get("self")
        if hasattr(owner, "reference_solution"):
            return owner.reference_solution()(num_layers, num_kv_heads, head_dim, dtype_bytes)
        frame = frame.f_back
    return None


def kv_imports_the_reference(*args):
    from labkit.labs.lab01_kv_cache.solutions import kv_bytes_per_token
    return kv_bytes_per_token(*args)


def test_a_learner_walking_the_stack_finds_no_expected_value():
    result = exercise("kv_bytes_per_token").check(kv_reads_expected_from_the_stack)
    assert not result.passed and result.failure.kind == "wrong" and result.failure.got is None


@pytest.mark.parametrize("cheat", [kv_asks_the_checker, kv_imports_the_reference])
def test_calling_the_reference_from_learner_code_does_not_pass(cheat):
    result = exercise("kv_bytes_per_token").check(cheat)
    assert not result.passed and result.failure.kind == "reference"
    assert "参考答案" in result.message


def test_the_reference_solution_itself_is_refused_kindly():
    ex = exercise("first_fit_allocator")
    result = ex.check(ex.reference_solution())
    assert not result.passed and "这是参考答案" in result.message
    set_language("en")
    assert "this is the reference solution" in exercise("kv_bytes_per_token").check(_reference_kv()).message.lower()


def _reference_kv():
    from labkit.labs.lab01_kv_cache.solutions import kv_bytes_per_token
    return kv_bytes_per_token


def test_a_subclass_of_the_reference_class_is_refused():
    from labkit.labs.lab01_kv_cache.solutions import FirstFitAllocator

    class Mine(FirstFitAllocator):
        pass

    assert "这是参考答案" in exercise("first_fit_allocator").check(Mine).message


def test_self_test_runs_the_reference_through_the_sandbox():
    result = exercise("first_fit_allocator").self_test()
    assert result.passed and result.num_passed == result.num_checks


# ----------------------------------------------------------------------------- 12.3 nothing of the learner's runs in the kernel

class LoopingInt(int):
    def __eq__(self, other):
        while True:
            pass

    __ne__ = __eq__
    __hash__ = int.__hash__


class ExitsWhenUnpickled:
    def __reduce__(self):
        return os._exit, (7,)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("offset, passed", [(0, True), (1, False)])
def test_an_int_subclass_with_a_looping_eq_cannot_hang_the_kernel(offset, passed):
    ex = exercise("kv_bytes_per_token")
    ex.time_limit_s = 1.0
    started = time.monotonic()
    result = ex.check(lambda *args: LoopingInt(_kv(*args) + offset))
    assert time.monotonic() - started < 5.0
    assert result.passed is passed


def test_a_result_that_runs_code_when_unpickled_cannot_touch_the_kernel():
    pid = os.fork()                      # if the kernel side unpickled it, only this fork dies
    if pid == 0:
        code = 3
        try:
            result = exercise("kv_bytes_per_token").check(lambda *args: ExitsWhenUnpickled())
            code = 0 if result.failure.kind == "type" and "ExitsWhenUnpickled" in result.message else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def kv_returns_a_lambda(*args):
    return lambda: 0


def test_a_result_that_is_not_plain_data_is_named():
    result = exercise("kv_bytes_per_token").check(kv_returns_a_lambda)
    assert result.failure.kind == "type"
    assert "function" in result.message and "lambda" in result.message


def test_numpy_results_arrive_as_plain_numbers():
    np = pytest.importorskip("numpy")
    assert exercise("kv_bytes_per_token").check(lambda *args: np.int64(_kv(*args))).passed
    assert exercise("greedy_verify").check(
        lambda d, t: np.array(_greedy(d, t))).passed


def _greedy(draft, target):
    out = []
    for d, t in zip(draft, target):
        if d != t:
            return out + [t]
        out.append(d)
    return out + [target[len(out)]]


def kv_jams_the_pipe(*args):
    """Writes half a message to every pipe it may write to, then never finishes it."""
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                os.write(fd, b"\x00\x00\x10\x00")
        except OSError:
            pass
    while True:
        pass


@pytest.mark.timeout(30)
def test_a_half_written_message_cannot_hold_the_kernel_past_the_time_limit():
    ex = exercise("kv_bytes_per_token")
    ex.time_limit_s = 1.0
    started = time.monotonic()
    result = ex.check(kv_jams_the_pipe)
    assert time.monotonic() - started < 5.0
    assert not result.passed


def kv_asks_for_a_terabyte(*args):
    return len(bytearray(2 ** 40))


def kv_grows_a_gigabyte(*args):
    blocks = [bytearray(64 * 2 ** 20) for _ in range(16)]
    return len(blocks)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hog", [kv_asks_for_a_terabyte, kv_grows_a_gigabyte])
def test_a_memory_blow_up_is_reported_as_memory(hog):
    ex = exercise("kv_bytes_per_token")
    ex.memory_limit_mb = 256
    result = ex.check(hog)
    assert result.failure.kind == "memory"
    assert "内存" in result.message and "循环" not in result.message


# ----------------------------------------------------------------------------- 17.6 quizzes

def _orders(learner_id, monkeypatch):
    monkeypatch.setenv("LABKIT_LEARNER_ID", learner_id)
    return [Quiz([q]).view().views[0].order for q in lab01_questions() if isinstance(q, MultipleChoice)]


def test_options_are_shuffled_per_learner_and_stable_across_reloads(monkeypatch):
    first = _orders("learner-a", monkeypatch)
    assert first == _orders("learner-a", monkeypatch)
    assert first != _orders("learner-b", monkeypatch)
    positions = [order.index(q.answer) for order, q in
                 zip(first, [q for q in lab01_questions() if isinstance(q, MultipleChoice)])]
    assert len(set(positions)) > 1                       # the right answer is not always at A


def test_shown_letters_follow_the_shuffle_and_check_keeps_original_identity(monkeypatch):
    monkeypatch.setenv("LABKIT_LEARNER_ID", "learner-a")
    question = MultipleChoice("q", ["zero", "one", "two", "three"], answer=2)
    view = Quiz([question]).view().views[0]
    shown = [label.value for label in view.labels]
    assert sorted(shown) == ["one", "three", "two", "zero"]
    view.buttons[shown.index("two")].click()
    assert view.result.correct
    assert question.check(2).correct and question.check("two").correct


def test_the_first_answer_counts_and_attempts_are_shown():
    question = MultipleChoice("q", ["a", "b", "c"], answer=1)
    view = Quiz([question, Numeric("n", answer=10)]).view()
    view.views[0].answer(0)
    view.views[0].answer(1)
    view.views[1].answer("10")
    assert "第 2 次作答" in view.views[0].feedback.value
    assert "答对 1/2" in view.score.value                  # the choice question was wrong first


@pytest.mark.parametrize("typed, factor", [(819.2, "1000"), (800, "1024"), (8_192_000, "10")])
def test_a_numeric_answer_off_by_a_power_gets_a_unit_hint(typed, factor):
    question = Numeric("q", answer=819_200, tol=1_000, unit={"zh": "字节", "en": "bytes"})
    feedback = question.check(typed)
    assert not feedback.correct
    assert f"{factor} 倍" in feedback.message and "单位" in feedback.message


def test_a_plainly_wrong_number_gets_no_unit_hint():
    assert "单位" not in Numeric("q", answer=819_200, tol=1_000).check(409_600).message


# ----------------------------------------------------------------------------- 17.7 checker rough edges

class FirstFitThatNeverFrees:
    def __init__(self, num_slots):
        self.used = [False] * num_slots

    def allocate(self, size):
        run = 0
        for slot, taken in enumerate(self.used):
            run = 0 if taken else run + 1
            if run == size:
                self.used[slot - size + 1:slot + 1] = [True] * size
                return slot - size + 1
        return None

    def free(self, start):
        pass


def kv_body_is_pass(num_layers, num_kv_heads, head_dim, dtype_bytes):
    pass


class FirstFitLoops:
    def __init__(self, num_slots):
        self.num_slots = num_slots

    def allocate(self, size):
        while True:
            pass

    def free(self, start):
        pass


def test_a_method_whose_body_is_pass_is_run_not_refused():
    result = exercise("first_fit_allocator").check(FirstFitThatNeverFrees)
    assert result.failure is not None and result.failure.kind == "wrong"
    assert "占位" not in result.message


def test_a_function_whose_body_is_pass_is_told_it_returns_none():
    result = exercise("kv_bytes_per_token").check(kv_body_is_pass)
    assert result.failure.kind == "wrong" and "忘了 return" in result.message


@pytest.mark.timeout(30)
def test_an_endless_loop_gets_loop_advice_not_the_next_hint():
    ex = exercise("first_fit_allocator")
    ex.time_limit_s = 1.0
    result = ex.check(FirstFitLoops)
    assert result.failure.kind == "timeout"
    assert "提示" not in result.message and "循环" in result.message
    assert ex.hint().number == 1                         # the exercise's hints were not used up


def test_a_failing_case_shows_the_hint_it_names():
    hints = [{"zh": "先想清楚公式。", "en": "Formula first."}, {"zh": "别忘了 V。", "en": "Do not forget V."}]
    ex = Exercise(name="kv", reference="labkit.labs.lab01_kv_cache.solutions:kv_bytes_per_token", hints=hints,
                  checks=[call_check("kv", (1, 1, 1, 1)), call_check("kv", (30, 3, 64, 2), hint=1)])
    result = ex.check(lambda n_layers, h, d, b: 2 if (n_layers, h, d, b) == (1, 1, 1, 1) else n_layers * h * d * b)
    assert result.failure.index == 1 and "提示 2/2" in result.message and "别忘了 V" in result.message


def test_a_check_accepts_a_hint_index():
    assert Check(label="x", run=lambda fn, _e: fn(), hint=0).hint == 0


class FirstFitOffByOne:
    """Returns start + 1; its own free then fails on the id it handed out."""

    def __init__(self, num_slots):
        self.sizes, self.next = {}, 0

    def allocate(self, size):
        start, self.next = self.next, self.next + size
        self.sizes[start] = size
        return start + 1

    def free(self, start):
        del self.sizes[start]


def test_a_sequence_reports_its_first_wrong_step_not_the_error_it_caused_later():
    from labkit.assess.checks import Ref, ops_check
    ex = Exercise(name="ff", reference="labkit.labs.lab01_kv_cache.solutions:FirstFitAllocator",
                  checks=[ops_check("FirstFitAllocator(8)", (8,), [("allocate", (4,)), ("allocate", (2,)),
                                                                   ("free", (Ref(0),))])])
    result = ex.check(FirstFitOffByOne)
    assert result.failure.kind == "wrong"
    assert "  allocate(4) → 期望 0，得到 1  ✗" in result.message.splitlines()


def test_the_learner_id_is_kept_in_the_cache_folder_or_derived(monkeypatch, tmp_path):
    from labkit.assess import learner
    monkeypatch.delenv("LABKIT_LEARNER_ID")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = learner.learner_id()
    assert (tmp_path / "labkit" / "learner_id").read_text().strip() == first
    learner._CACHED.clear()
    assert learner.learner_id() == first                   # a reload reads the same id back
    learner._CACHED.clear()
    (tmp_path / "readonly").write_text("")                 # a file where the folder should be
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "readonly"))
    assert learner.learner_id() == learner._fallback()


class LoopsOnInspection:
    """Not a function or class: any attribute lookup on it (even __class__) loops."""

    @property
    def __class__(self):
        while True:
            pass

    def __getattr__(self, name):
        while True:
            pass

    def __call__(self, *args):
        return 0


@pytest.mark.timeout(30)
def test_inspecting_a_submission_runs_none_of_its_code_in_the_kernel():
    ex = exercise("kv_bytes_per_token")
    ex.time_limit_s = 1.0
    started = time.monotonic()
    result = ex.check(LoopsOnInspection())
    assert time.monotonic() - started < 5.0 and not result.passed


def test_a_failing_sequence_keeps_only_the_expected_steps_it_showed():
    result = exercise("first_fit_allocator").check(FirstFitThatNeverFrees)
    shown = result.failure.expected
    assert shown[-1] != result.failure.got[len(shown) - 1]          # it ends at the first wrong step
    assert len(shown) < len(exercise("first_fit_allocator").expected_values()[result.failure.index])


def kv_grows_until_stopped(*args):
    import mmap
    blocks = []
    while True:                               # 32 MiB of address space per 0.1 s: at most 480 MiB in 1.5 s
        blocks.append(mmap.mmap(-1, 32 * 2 ** 20))
        time.sleep(0.1)


@pytest.mark.timeout(60)
def test_a_blow_up_stopped_by_the_clock_is_still_reported_as_memory():
    ex = exercise("kv_bytes_per_token")
    ex.time_limit_s, ex.memory_limit_mb = 1.5, 512
    result = ex.check(kv_grows_until_stopped)
    assert result.failure.kind == "memory", result.message
    assert "MiB" in result.message and "循环" not in result.message


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


def kv_raises_unprintable(*args):
    raise Unprintable()


def test_an_exception_whose_message_raises_is_still_reported_at_its_type():
    result = exercise("kv_bytes_per_token").check(kv_raises_unprintable)
    assert result.failure.kind == "error" and result.failure.error.type_name == "Unprintable"


def kv_leaves_a_process_behind(*args):
    import subprocess
    return subprocess.Popen(["sleep", "60"]).pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False


def test_a_learner_process_is_refused_while_checking():
    result = exercise("kv_bytes_per_token").check(kv_leaves_a_process_behind)
    assert result.failure.kind == "guarded" and "不能启动新进程" in result.message


def kv_reports_its_parent(*args):
    return os.getppid()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_the_checked_code_runs_in_a_grandchild_whose_parent_leads_its_own_session():
    result = exercise("kv_bytes_per_token").check(kv_reports_its_parent)
    parent = result.failure.got
    assert parent != os.getpid()
    assert not _alive(parent)                   # the session leader is gone with the check


@pytest.mark.timeout(30)
def test_the_checked_code_cannot_write_into_the_kernels_own_pipes():
    # A kernel's channels (its ZMQ sockets, a test runner's pipes) are inherited through the fork:
    # the checked grandchild closes its copies, so nothing the learner writes reaches them.
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    written = []

    def kv_writes_to_the_kernel(*args, _fd=write_end):
        try:
            os.write(_fd, b"garbage")
            written.append(True)
        except OSError:
            pass
        return 0

    try:
        ex = exercise("kv_bytes_per_token")
        result = ex.check(kv_writes_to_the_kernel)
        assert not result.passed
        with pytest.raises(BlockingIOError):
            os.read(read_end, 64)                 # empty: the write never reached the kernel's pipe
    finally:
        os.close(read_end)
        os.close(write_end)
