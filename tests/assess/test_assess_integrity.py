"""Passing without solving fails, kindly: the engine's own answer functions, reloading or exec-ing
the solutions, a subprocess, ctypes, and signalling the kernel; random hidden cases keep their
expected values to themselves."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import os
import signal
import subprocess
import sys

import pytest

from labkit import set_language
from labkit.kv.kv_cache_manager import hash_block
from labkit.labs.exercises import EXERCISES, exercise
from labkit.labs.lab03_batching.exercises import _OCCUPANCY_CASES
from labkit.replay import static_decode_occupancy
from labkit.serve_bench.client_metrics import compute_metrics
from labkit.spec_decode.theory import expected_tokens_per_step
from tests.assess.test_assess_exercises import BlocksByDeque, FirstFitByMarks, occupancy_loop, step_literal


@pytest.fixture(autouse=True)
def chinese(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    set_language("zh")


def occupancy_from_the_engine(output_lens, max_num_seqs):
    return static_decode_occupancy(output_lens, max_num_seqs)


def hashes_from_the_engine(token_ids, block_size):
    keys = []
    for i in range(len(token_ids) // block_size):
        keys.append(hash_block(keys[-1] if keys else None, tuple(token_ids[i * block_size:(i + 1) * block_size])))
    return keys


def goodput_from_the_engine(requests, duration_s, ttft_ms, tpot_ms):
    return compute_metrics(requests, duration_s)


@pytest.mark.parametrize("name, answer", [
    ("expected_tokens_per_step", expected_tokens_per_step),
    ("static_occupancy", occupancy_from_the_engine),
    ("prefix_hash", hashes_from_the_engine),
    ("goodput_p99", goodput_from_the_engine),
])
def test_the_engines_own_function_for_the_answer_is_unavailable_while_checking(name, answer):
    result = exercise(name).check(answer)
    assert not result.passed and result.failure.kind == "reference"
    assert "引擎里直接算出答案的函数" in result.message


def via_reload(alpha, k):
    import labkit.labs.lab04_speculative.solutions as solutions
    return importlib.reload(solutions).expected_tokens_per_step(alpha, k)


def via_exec_of_the_file(alpha, k):
    import labkit.labs.lab04_speculative.solutions as solutions
    namespace: dict = {}
    with open(solutions.__file__, encoding="utf-8") as source:
        exec(source.read(), namespace)
    return namespace["expected_tokens_per_step"](alpha, k)


def via_a_fresh_module(alpha, k):
    import labkit.labs.lab04_speculative.solutions as solutions
    spec = importlib.util.spec_from_file_location("copy_of_solutions", solutions.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected_tokens_per_step(alpha, k)


def via_the_engines_source(alpha, k):
    import labkit.spec_decode.theory as theory
    namespace: dict = {}
    exec(inspect.getsource(theory), namespace)
    return namespace["expected_tokens_per_step"](alpha, k)


def via_a_fresh_import(alpha, k):
    sys.modules.pop("labkit.labs.lab04_speculative.solutions", None)
    return importlib.import_module("labkit.labs.lab04_speculative.solutions").expected_tokens_per_step(alpha, k)


def via_the_loader(alpha, k):
    import labkit.labs.lab04_speculative.solutions as solutions
    namespace: dict = {}
    exec(solutions.__loader__.get_code(solutions.__name__), namespace)
    return namespace["expected_tokens_per_step"](alpha, k)


def via_a_subprocess(alpha, k):
    code = f"from labkit.labs.lab04_speculative.solutions import expected_tokens_per_step as f; print(f({alpha}, {k}))"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)


def via_os_system(alpha, k):
    return os.system("true")


def via_ctypes(alpha, k):
    return ctypes.CDLL(None).getpid()


@pytest.mark.parametrize("route", [via_reload, via_exec_of_the_file, via_a_fresh_module, via_a_fresh_import,
                                   via_the_loader, via_a_subprocess, via_os_system, via_ctypes])
def test_no_route_to_the_solutions_source_passes(route):
    result = exercise("expected_tokens_per_step").check(route)
    assert not result.passed and result.failure.kind == "guarded", result.message
    assert "检查时" in result.message and "自己的代码" in result.message


def test_the_engines_source_cannot_be_read_back_either():
    inspect.getsource(expected_tokens_per_step)          # in the kernel: the lines are cached, and still refused
    result = exercise("expected_tokens_per_step").check(via_the_engines_source)
    assert not result.passed and result.failure.kind in ("guarded", "error")


def kills_its_parent(alpha, k):
    os.kill(os.getppid(), signal.SIGTERM)
    return sum(alpha ** i for i in range(k + 1))


def kills_the_kernel_by_pid(alpha, k, kernel=os.getpid()):
    os.kill(kernel, signal.SIGTERM)
    return sum(alpha ** i for i in range(k + 1))


@pytest.mark.parametrize("answer", [kills_its_parent, kills_the_kernel_by_pid])
def test_a_submitted_function_cannot_signal_the_kernel(answer):
    result = exercise("expected_tokens_per_step").check(answer)
    assert result.failure.kind == "guarded" and "发信号" in result.message
    assert exercise("expected_tokens_per_step").check(lambda a, k: sum(a ** i for i in range(k + 1))).passed


def step_wrong_on_random_cases(running, waiting, max_num_batched_tokens, max_num_seqs):
    out = step_literal(running, waiting, max_num_batched_tokens, max_num_seqs)
    random_case = any(r.request_id[0] in "rw" and r.request_id[1:].isdigit() for r in list(running) + list(waiting))
    return {**out, "extra": 1} if random_case else out


_NAMED_OCCUPANCY = {(tuple(lens), seqs) for (lens, seqs), _note in _OCCUPANCY_CASES}


def occupancy_wrong_on_random_cases(output_lens, max_num_seqs):
    value = occupancy_loop(output_lens, max_num_seqs)
    return value if (tuple(output_lens), max_num_seqs) in _NAMED_OCCUPANCY else value + 1.0


class BlocksWrongAtSix(BlocksByDeque):           # the random sequences use BlockAllocator(6)
    def __init__(self, num_blocks):
        super().__init__(num_blocks)
        self.off = 100 if num_blocks == 6 else 0

    def allocate(self):
        block = super().allocate()
        return None if block is None else block + self.off

    def _real(self, block):
        return block - self.off

    def share(self, block):
        super().share(self._real(block))

    def free(self, block):
        super().free(self._real(block))

    def copy_on_write(self, block):
        new = super().copy_on_write(self._real(block))
        return None if new is None else new + self.off

    def ref_count(self, block):
        return super().ref_count(self._real(block))


class FirstFitWrongAt32(FirstFitByMarks):        # the random sequences use FirstFitAllocator(32)
    def __init__(self, num_slots):
        super().__init__(num_slots)
        self.off = 1000 if num_slots == 32 else 0

    def allocate(self, size):
        start = super().allocate(size)
        return None if start is None else start + self.off

    def free(self, start):
        super().free(start - self.off)


@pytest.mark.parametrize("name, wrong", [("schedule_step", step_wrong_on_random_cases),
                                         ("static_occupancy", occupancy_wrong_on_random_cases),
                                         ("block_allocator", BlocksWrongAtSix),
                                         ("first_fit_allocator", FirstFitWrongAt32)])
def test_random_hidden_cases_say_what_is_wrong_but_not_the_expected_value(name, wrong):
    ex = exercise(name)
    first_random = next(i for i, c in enumerate(ex.checks) if not c.reveal)
    assert all(c.reveal for c in ex.checks[:first_random])          # the named teaching cases come first
    result = ex.check(wrong)
    assert not result.passed and result.failure.index == first_random and result.failure.hidden, result.message
    assert result.failure.expected is None and "不显示期望值" in result.message
    assert "期望" not in result.message.replace("不显示期望值", "")
    assert result.failure.difference


def test_every_exercise_records_its_attempts_in_the_lab_summary(tmp_path):
    from labkit.report.results import read_summary
    ex = exercise("expected_tokens_per_step")
    ex.check(lambda a, k: 0.0)
    ex.check(lambda a, k: sum(a ** i for i in range(k + 1)))
    entry = read_summary("04")["exercises"]["expected_tokens_per_step"]
    assert entry["attempts"] == 2 and entry["passed"] and entry["passed_at_attempt"] == 2
    assert all(exercise(name).lab for name in EXERCISES)
