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

from labkit.assess.checks import Check, call_check
from labkit.assess.exercise import Exercise
from labkit.i18n import t

STAT_TRIALS = 10_000
STAT_MAX_TV = 0.04


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
        name="greedy_verify",
        title={"zh": "练习：贪心验证（speculative decoding）", "en": "Exercise: greedy verification (speculative decoding)"},
        task={"zh": "实现 greedy_verify(draft_token_ids, target_token_ids)：target_token_ids 有 k+1 个（目标模型在每个位置的 argmax）。"
                    "从头接受与目标一致的草稿 token，在第一个不一致处放入目标的 token 并停止；全部一致时再加上第 k+1 个（bonus）。",
              "en": "Write greedy_verify(draft_token_ids, target_token_ids); target_token_ids has k+1 entries (the target's argmax "
                    "at each position). Accept drafts from the start while they equal the target's; at the first mismatch "
                    "append the target's token and stop; if all match, append the (k+1)-th (bonus)."},
        checks=[call_check("greedy_verify", args, note) for args, note in cases],
        reference="labkit.labs.lab04_speculative.solutions:greedy_verify",
        hints=[{"zh": "结果总有 1 到 k+1 个 token：被接受的草稿，加上目标模型的一个 token。",
                "en": "The result always has 1 to k+1 tokens: the accepted drafts plus one token of the target's."},
               {"zh": "循环 zip(draft_token_ids, target_token_ids)，不一致就 break；最后 append target_token_ids[len(output)]。",
                "en": "Loop over zip(draft_token_ids, target_token_ids), break on a mismatch; then append target_token_ids[len(output)]."}],
    )


def _one_hot(index: int, size: int = 4) -> list[float]:
    return [1.0 if i == index else 0.0 for i in range(size)]


def _seeded_call(drafts, q, p, seed: int, note: dict) -> Check:
    call = f"rejection_verify({drafts}, q={q}, p={p}, rng)"
    return Check(label={lang: f"{call}  # {text}" for lang, text in note.items()},
                 run=lambda fn, _expected: fn(list(drafts), q, p, random.Random(seed)))


def first_token_frequencies(fn, q: list[float], p: list[float], trials: int, seed: int) -> list[float]:
    """Draft x ~ q, verify with k = 1, count the first output token; frequencies over the vocabulary."""
    draft_rng, verify_rng, counts = random.Random(seed), random.Random(seed + 1), [0] * len(p)
    for _ in range(trials):
        x = draft_rng.choices(range(len(q)), weights=q)[0]
        counts[fn([x], [q], [p, _one_hot(0, len(p))], verify_rng)[0]] += 1
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
        name="rejection_verify",
        title={"zh": "练习：拒绝采样验证（speculative sampling）", "en": "Exercise: rejection-sampling verification (speculative sampling)"},
        task={"zh": "实现 rejection_verify(draft_token_ids, draft_probs, target_probs, rng)。draft_probs 有 k 行（q），target_probs 有 k+1 行（p）。"
                    "在位置 i 以概率 min(1, p_i(x)/q_i(x)) 接受草稿 x；第一次拒绝时从 normalize(max(0, p_i - q_i)) 采样一个 token 并停止；"
                    "全部接受则再从 p_k 采样 bonus。随机数只用 rng（random.Random）。",
              "en": "Write rejection_verify(draft_token_ids, draft_probs, target_probs, rng). draft_probs has k rows (q), "
                    "target_probs k+1 rows (p). At position i accept draft x with probability min(1, p_i(x)/q_i(x)); at the "
                    "first rejection sample one token from normalize(max(0, p_i - q_i)) and stop; if all are accepted, "
                    "sample a bonus token from p_k. Use only rng (a random.Random) for randomness."},
        checks=checks,
        reference="labkit.labs.lab04_speculative.solutions:rejection_verify",
        hints=[{"zh": "接受检验：rng.random() < min(1, p[x] / q[x])。",
                "en": "The acceptance test: rng.random() < min(1, p[x] / q[x])."},
               {"zh": "按权重采样：rng.choices(range(len(w)), weights=w)[0]，权重不必归一化。",
                "en": "Sampling by weights: rng.choices(range(len(w)), weights=w)[0]; weights need not sum to 1."},
               {"zh": "拒绝时的权重是 [max(0, p_i - q_i) for p_i, q_i in zip(p, q)]；加入这个 token 后立刻 return。",
                "en": "On rejection the weights are [max(0, pi - qi) for pi, qi in zip(p, q)]; append that token and return at once."}],
    )
