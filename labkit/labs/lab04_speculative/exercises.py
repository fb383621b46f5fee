"""Lab 04 exercises: the verify step of speculative decoding, greedy and sampled.

The sampled variant is checked two ways: small cases whose distributions are one-hot, so the
answer does not depend on random draws, and a statistical check that the first output token is
distributed as the target p (the guarantee of Leviathan et al. 2023, Theorem 1), from 10,000
seeded trials, within total-variation distance 0.04. A correct verifier lands near 0.007 (sampling
noise); accepting every draft gives 0.4 on the first case and resampling from p instead of the
residual gives 0.14 — both fail.
"""

from __future__ import annotations

import random
import secrets
from pathlib import Path

from labkit.assess.bank import ExerciseText
from labkit.assess.checks import FROM_REFERENCE, Check, call_check, same_sequence
from labkit.assess.exercise import Exercise
from labkit.i18n import t

# Each exercise's title, task and hints: data a teacher edits, beside this file.
TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"),
                    ("greedy_verify", "rejection_verify", "expected_tokens_per_step", "best_k", "ngram_propose"))

STAT_TRIALS = 10_000
STAT_MAX_TV = 0.04
RANDOM_CASES = 3        # hidden cases drawn afresh for every exercise built: a table of the named cases fails


def _hidden_rng() -> random.Random:
    """A generator no feedback can predict: each exercise (each ``exercise(name)``) draws new hidden inputs."""
    return random.Random(secrets.randbits(64))


_HIDDEN_NOTE = {"zh": "随机隐藏用例（不显示期望值）", "en": "random hidden case (expected value not shown)"}


def _diagnose_greedy(expected, got, _check) -> int | None:
    if not isinstance(got, (list, tuple)):
        return None
    got = list(got)
    if got == expected[:-1] or len(got) < len(expected):
        return 0                                        # the target's own token is missing
    return 1                                            # kept going after the first mismatch


def greedy_verify_exercise() -> Exercise:
    cases = [
        (([5, 7, 9], [5, 7, 9, 2]), {"zh": "全部接受 + bonus", "en": "all accepted + bonus"}),
        (([5, 7, 9], [4, 7, 9, 2]), {"zh": "第一个就不一致", "en": "first draft rejected"}),
        (([5, 7, 9], [5, 7, 1, 2]), {"zh": "中间不一致", "en": "mismatch in the middle"}),
        (([5, 8, 9], [5, 7, 9, 2]), {"zh": "之后再一致也不算", "en": "a later match does not count"}),
        (([], [3]), {"zh": "没有草稿：只有目标模型的一个 token", "en": "no drafts: just the target's token"}),
        (([1, 1, 1, 1], [1, 1, 1, 1, 1]), {"zh": "重复 token", "en": "repeated tokens"}),
    ]
    return Exercise(
        **TEXT("greedy_verify"),
        checks=[call_check("greedy_verify", args, note, compare=same_sequence) for args, note in cases],
        reference="labkit.labs.lab04_speculative.solutions:greedy_verify",
        engine=["labkit.sample.rejection_sampler"], diagnose=_diagnose_greedy, lab="04",
    )


def _one_hot(index: int, size: int = 4) -> list[float]:
    return [1.0 if i == index else 0.0 for i in range(size)]


def _seeded_call(drafts, q, p, seed: int, note: dict) -> Check:
    call = f"rejection_verify({drafts}, q={q}, p={p}, rng)"
    return Check(label={lang: f"{call}  # {text}" for lang, text in note.items()},
                 run=lambda fn, _expected: fn(list(drafts), q, p, random.Random(seed)), compare=same_sequence)


def first_token_frequencies(fn, q: list[float], p: list[float], trials: int, seed: int) -> list[float]:
    """Draft x ~ q, verify with k = 1, count the first output token; frequencies over the vocabulary."""
    draft_rng, verify_rng, counts = random.Random(seed), random.Random(seed + 1), [0] * len(p)
    for _ in range(trials):
        x = draft_rng.choices(range(len(q)), weights=q)[0]
        counts[list(fn([x], [q], [p, _one_hot(0, len(p))], verify_rng))[0]] += 1
    return [c / trials for c in counts]


def total_variation(a: list[float], b: list[float]) -> float:
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b))


def _distribution_check(q: list[float], p: list[float], note: dict) -> Check:
    label = {lang: f"{STAT_TRIALS} × rejection_verify([x ~ q], q={q}, p={p}): {text}" for lang, text in note.items()}
    return Check(label=label,
                 run=lambda fn, _expected: first_token_frequencies(fn, q, p, STAT_TRIALS, seed=7),
                 expected=p,
                 compare=lambda got, expected: total_variation(got, expected) <= STAT_MAX_TV,
                 explain=lambda expected, got: t(
                     f"输出分布与 p 的总变差距离为 {total_variation(got, expected):.3f}（允许 {STAT_MAX_TV}）。",
                     f"Total-variation distance from p is {total_variation(got, expected):.3f} (allowed {STAT_MAX_TV})."))


def rejection_verify_exercise() -> Exercise:
    uniform = [0.25, 0.25, 0.25, 0.25]
    checks = [
        _seeded_call([1, 2], [uniform, uniform], [uniform, uniform, _one_hot(3)], 0,
                     {"zh": "p = q：全部接受，bonus 来自 p[k]", "en": "p = q: all accepted, bonus from p[k]"}),
        _seeded_call([0], [[0.5, 0.5, 0, 0]], [[0, 0.5, 0.5, 0], _one_hot(1)], 0,
                     {"zh": "p(x) = 0：必拒绝，从 max(0, p - q) 重采样", "en": "p(x) = 0: always rejected, resample from max(0, p - q)"}),
        _seeded_call([1, 3], [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]], [[0, 1.0, 0, 0], [0, 0, 1.0, 0], _one_hot(0)], 0,
                     {"zh": "第一个必接受，第二个必拒绝", "en": "first surely accepted, second surely rejected"}),
        _seeded_call([], [], [_one_hot(2)], 0, {"zh": "没有草稿：只采样 bonus", "en": "no drafts: only the bonus token"}),
        _distribution_check([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4],
                            {"zh": "第一个输出 token 应服从 p", "en": "the first output token must follow p"}),
        _distribution_check([0.7, 0.1, 0.0, 0.2], [0.25, 0.25, 0.5, 0.0],
                            {"zh": "草稿从不提出的 token 只能来自残差分布", "en": "a token the draft never proposes comes only from the residual"}),
    ]
    return Exercise(
        **TEXT("rejection_verify"),
        checks=checks,
        reference="labkit.labs.lab04_speculative.solutions:rejection_verify",
        engine=["labkit.sample.rejection_sampler", "labkit.sample.sampler"], lab="04",
        diagnose=lambda expected, got, check: 2 if check.expected is not FROM_REFERENCE else None,
    )


# ----------------------------------------------------------------------------- Leviathan's formulas

def _close(got, expected) -> bool:
    return isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - expected) <= 1e-6 * max(1.0, abs(expected))


def _explain_tokens(expected, got) -> str:
    if isinstance(got, (int, float)) and abs(got + 1 - expected) < 1e-6:
        return t("少了 1：即使第一个草稿就被拒绝，这一步也会产出目标模型的 1 个 token（i = 0 那一项）。",
                 "Off by one: even when the first draft is rejected the step emits the target's own token (the i = 0 term).")
    return ""


def _random_alpha_k() -> list[tuple[float, int]]:
    rng = _hidden_rng()
    return [(round(rng.uniform(0.05, 0.97), 3), rng.randint(1, 12)) for _ in range(RANDOM_CASES)]


def _random_alpha_c() -> list[tuple[float, float]]:
    rng = _hidden_rng()
    return [(round(rng.uniform(0.3, 0.97), 3), round(rng.uniform(0.0, 0.4), 3)) for _ in range(RANDOM_CASES)]


def _random_token_ids() -> list[tuple[list[int], int, int]]:
    """Sequences that repeat pieces of themselves (so a match usually exists), with random k and n."""
    rng = _hidden_rng()
    out = []
    for _ in range(RANDOM_CASES):
        base = [rng.randint(0, 9) for _ in range(rng.randint(6, 14))]
        seq = base + base[rng.randint(0, 3):rng.randint(4, len(base))]
        out.append((seq, rng.randint(1, 5), rng.randint(1, 3)))
    return out


def expected_tokens_exercise() -> Exercise:
    cases = [((0.0, 4), "α = 0"), ((0.5, 1), "α = 0.5, k = 1"), ((0.8, 4), "α = 0.8, k = 4"),
             ((0.6, 8), "α = 0.6, k = 8"), ((1.0, 5), {"zh": "α = 1：不能除以 0", "en": "α = 1: no division by zero"}),
             ((0.3, 0), {"zh": "k = 0：不投机", "en": "k = 0: no speculation"})]
    return Exercise(
        **TEXT("expected_tokens_per_step"),
        checks=[call_check("expected_tokens_per_step", args, note, compare=_close, explain=_explain_tokens)
                for args, note in cases] + [call_check("expected_tokens_per_step", args, _HIDDEN_NOTE, compare=_close,
                                                       reveal=False) for args in _random_alpha_k()],
        reference="labkit.labs.lab04_speculative.solutions:expected_tokens_per_step",
        engine=["labkit.spec_decode.theory"], lab="04",
        diagnose=lambda expected, got, _c: 0 if isinstance(got, (int, float)) and abs(got + 1 - expected) < 1e-6 else 1,
    )


def best_k_exercise() -> Exercise:
    cases = [((0.8, 0.05), "α = 0.8, c = 0.05"), ((0.9, 0.0), {"zh": "c = 0（n-gram）：越大越好，到 k_max 为止",
                                                              "en": "c = 0 (n-gram): larger is better, up to k_max"}),
             ((0.5, 0.2), "α = 0.5, c = 0.2"), ((0.3, 0.5), {"zh": "α < c：不投机最好（k = 0）", "en": "α < c: best not to speculate (k = 0)"}),
             ((0.6, 0.1), "α = 0.6, c = 0.1"), ((0.95, 0.02), "α = 0.95, c = 0.02")]
    return Exercise(
        **TEXT("best_k"),
        checks=[call_check("best_k", args, note) for args, note in cases]
               + [call_check("best_k", args, _HIDDEN_NOTE, reveal=False) for args in _random_alpha_c()],
        reference="labkit.labs.lab04_speculative.solutions:best_k",
        engine=["labkit.spec_decode.theory"], lab="04",
        diagnose=lambda expected, got, _c: 1 if expected == 0 or got == 0 else 0,
    )


# ----------------------------------------------------------------------------- optional: prompt lookup

def _diagnose_ngram(expected, got, _check) -> int | None:
    if not isinstance(got, (list, tuple)):
        return None
    if not got or not expected or len(got) == len(expected):
        return 0                                        # searched the wrong places (or took the wrong match)
    return 1                                            # how many tokens to propose


def ngram_propose_exercise() -> Exercise:
    cases = [(([1, 2, 3, 4, 5, 1, 2], 3, 2), {"zh": "后缀 [1, 2] 之前出现过，后面跟着 3 4 5", "en": "suffix [1, 2] seen before, followed by 3 4 5"}),
             (([1, 2, 3, 9, 1, 2, 7, 1, 2], 2, 2), {"zh": "出现多次：取最近的一次", "en": "several matches: take the most recent"}),
             (([5, 6, 7, 8], 2, 2), {"zh": "没有匹配：返回 []", "en": "no match: return []"}),
             (([1, 2, 3, 1, 2], 5, 2), {"zh": "后面不足 k 个 token：有几个给几个", "en": "fewer than k tokens follow: return what there is"}),
             (([4, 4, 4, 4], 2, 3), {"zh": "重叠的匹配也算", "en": "overlapping matches count"}),
             (([3, 1, 2], 2, 3), {"zh": "序列不比 n 长：返回 []", "en": "sequence not longer than n: return []"})]
    return Exercise(
        **TEXT("ngram_propose"),
        checks=[call_check("ngram_propose", args, note, compare=same_sequence) for args, note in cases]
               + [call_check("ngram_propose", args, _HIDDEN_NOTE, compare=same_sequence, reveal=False)
                  for args in _random_token_ids()],
        reference="labkit.labs.lab04_speculative.solutions:ngram_propose",
        engine=["labkit.spec_decode.ngram"], lab="04",
        diagnose=_diagnose_ngram,
    )
