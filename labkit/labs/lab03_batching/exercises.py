"""Lab 03 exercises: one continuous-batching scheduling step under a token budget; static batching's
occupancy predicted from output lengths; (optional) preemption victims and the recompute they cost."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from pathlib import Path

from labkit.assess.bank import ExerciseText
from labkit.assess.checks import Check, call_check
from labkit.assess.exercise import Exercise
from labkit.i18n import t

# Each exercise's title, task and hints: data a teacher edits, beside this file.
TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"),
                    ("schedule_step", "static_occupancy", "preemption_victims"))


@dataclass(frozen=True)
class RequestState:
    """What the scheduler knows about a request (vLLM v1 names).

    ``num_tokens`` = prompt + output tokens so far; ``num_computed_tokens`` = how many of them
    already have K/V in the cache. The difference is what the request still needs computed:
    the whole prompt for a new request, 1 for a request in decode.
    """

    request_id: str
    num_tokens: int
    num_computed_tokens: int = 0


def _show(requests: list[RequestState]) -> str:
    return "[" + ", ".join(f"{r.request_id}({r.num_tokens}, {r.num_computed_tokens})" for r in requests) + "]"


def step_check(note: dict, running: list[RequestState], waiting: list[RequestState],
               max_num_batched_tokens: int, max_num_seqs: int, reveal: bool = True) -> Check:
    call = (f"schedule_step(running={_show(running)}, waiting={_show(waiting)}, "
            f"max_num_batched_tokens={max_num_batched_tokens}, max_num_seqs={max_num_seqs})")
    needs = {r.request_id: r.num_tokens - r.num_computed_tokens for r in running + waiting}
    admissible = {r.request_id for r in running} | {r.request_id for r in waiting[:max(0, max_num_seqs - len(running))]}
    return Check(label={lang: f"{call}  # {text}" for lang, text in note.items()},
                 run=lambda fn, _expected: fn(list(running), list(waiting), max_num_batched_tokens, max_num_seqs),
                 compare=_same_schedule, explain=lambda e, g: _explain(g, max_num_batched_tokens), reveal=reveal,
                 diagnose=lambda e, g: _diagnose_step(g, needs, admissible, max_num_batched_tokens))


def _scheduled(got) -> dict | None:
    """The non-zero entries: the task lets a request that gets 0 tokens be left out or given 0."""
    if not isinstance(got, dict):
        return None
    return {k: v for k, v in got.items() if v != 0}


def _same_schedule(got, expected) -> bool:
    return _scheduled(got) == expected


def _counts(got) -> dict | None:
    got = _scheduled(got)
    if got is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in got.values()):
        return None
    return got


def _explain(got, budget: int) -> str:
    counts = _counts(got)
    if counts is None:
        return t("请返回一个字典 {request_id: token 数（int）}。", "Return a dict {request_id: number of tokens (an int)}.")
    if sum(counts.values()) > budget:
        return t(f"调度的 token 总数 {sum(counts.values())} 超过了 max_num_batched_tokens = {budget}。",
                 f"{sum(counts.values())} tokens were scheduled, more than max_num_batched_tokens = {budget}.")
    return ""


def _diagnose_step(got, needs: dict, admissible: set, budget: int) -> int | None:
    """Which hint fits, from the case's own inputs: needs per request, who may run, the budget."""
    counts = _counts(got)
    if counts is None:
        return None
    if any(n > needs.get(k, n) for k, n in counts.items()):
        return 0                                        # more than the request still needs
    if sum(counts.values()) > budget:
        return 1                                        # the budget is not counted down
    if set(counts) - admissible:
        return 2                                        # admitted past max_num_seqs
    return 1


R = RequestState
_STEP_CASES = [
    ({"zh": "全部在解码：每个请求 1 个 token", "en": "all decoding: one token each"},
     [R("a", 10, 9), R("b", 7, 6)], [], 16, 8),
    ({"zh": "新请求的整个 prompt 一次放得下", "en": "a new prompt fits the budget at once"},
     [R("a", 10, 9)], [R("b", 5)], 16, 8),
    ({"zh": "长 prompt 按预算分块预填充", "en": "a long prompt is prefilled in a chunk"},
     [R("a", 10, 9)], [R("b", 40)], 16, 8),
    ({"zh": "先来先服务：预算用完就停", "en": "first come first served until the budget runs out"},
     [], [R("a", 6), R("b", 6), R("c", 6)], 16, 8),
    ({"zh": "max_num_seqs 限制了新接纳的请求数", "en": "max_num_seqs caps admissions"},
     [R("a", 10, 9), R("b", 10, 9)], [R("c", 3), R("d", 3)], 64, 3),
    ({"zh": "运行中的分块预填充优先", "en": "a running chunked prefill goes first"},
     [R("a", 50, 16)], [R("b", 4)], 16, 8),
    ({"zh": "前缀命中：只算未缓存的部分", "en": "prefix hit: only the uncached part is computed"},
     [], [R("a", 20, 16), R("b", 8)], 8, 8),
    ({"zh": "预算正好用完", "en": "the budget is used exactly"},
     [R("a", 4, 3)], [R("b", 3), R("c", 9)], 4, 8),
]


def _random_step_case(seed: int) -> tuple:
    rng = random.Random(seed)
    running = [R(f"r{i}", n, n - (1 if rng.random() < 0.7 else rng.randint(2, n))) for i in range(rng.randint(0, 5))
               for n in [rng.randint(2, 60)]]
    waiting = [R(f"w{i}", n, rng.choice([0, 0, n // 2])) for i in range(rng.randint(0, 5)) for n in [rng.randint(2, 60)]]
    seqs = max(len(running), 1) + rng.randint(0, 3)
    note = {"zh": f"随机情形 {seed}", "en": f"random case {seed}"}
    return note, running, waiting, rng.choice([8, 16, 32, 64]), seqs, False


def schedule_step_exercise() -> Exercise:
    cases = _STEP_CASES + [_random_step_case(s) for s in range(12)]
    return Exercise(
        **TEXT("schedule_step"),
        checks=[step_check(*case) for case in cases],
        reference="labkit.labs.lab03_batching.solutions:schedule_step",
        lab="03",
    )


# ---------------------------------------------------------------------------------- static occupancy

def _close(expected, got) -> bool:
    return isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - expected) <= 1e-6 * max(1, abs(expected))


def _explain_occupancy(expected, got) -> str:
    if isinstance(got, (int, float)) and 0 < got <= 1 and expected > 1:
        return t("返回百分数（0–100），不是 0–1 之间的比例。", "Return a percentage (0-100), not a fraction in 0-1.")
    return ""


_OCCUPANCY_CASES = [
    (([4, 4, 4, 4], 4), {"zh": "长度相同：没有空转", "en": "equal lengths: no idle slot"}),
    (([2, 9], 2), {"zh": "一个短请求陪一个长请求", "en": "a short request beside a long one"}),
    (([9, 2, 2, 2], 4), {"zh": "一个长请求拖住整批", "en": "one long request holds the batch"}),
    (([5, 5, 5], 4), {"zh": "最后一批不满：空槽也算", "en": "a batch short of max_num_seqs: empty slots count"}),
    (([3, 7, 3, 7, 2, 2], 2), {"zh": "按到达顺序分批", "en": "batches in arrival order"}),
    (([1, 1, 1], 2), {"zh": "都只有 1 个 token：没有解码步", "en": "one token each: no decode step"}),
    (([64, 3, 3, 3, 3, 3, 3, 3], 8), {"zh": "长尾：一个请求比别的长 20 倍", "en": "a heavy tail: one request 20x longer"}),
]


def _random_occupancy_case(seed: int) -> tuple:
    rng = random.Random(1000 + seed)
    lens = [max(1, int(rng.lognormvariate(3, 1))) for _ in range(rng.randint(1, 40))]
    return (lens, rng.choice([1, 2, 4, 8, 16])), {"zh": f"随机长尾情形 {seed}", "en": f"random heavy-tailed case {seed}"}, True


def _batches(output_lens: list[int], max_num_seqs: int) -> list[list[int]]:
    return [output_lens[i:i + max_num_seqs] for i in range(0, len(output_lens), max_num_seqs)]


def _typical_occupancy_slips(output_lens: list[int], max_num_seqs: int) -> dict[int, float]:
    """What the usual mistakes return on this input, by the hint that addresses each."""
    batches = [b for b in _batches(output_lens, max_num_seqs) if max(b) > 1]
    ratios = [sum(o - 1 for o in b) / (max_num_seqs * (max(b) - 1)) for b in batches]
    busy = sum(o - 1 for b in batches for o in b)
    short_total = sum(len(b) * (max(b) - 1) for b in batches)
    return {1: 100.0 * sum(ratios) / len(ratios) if ratios else 0.0,          # mean of per-batch ratios
            2: 100.0 * busy / short_total if short_total else 0.0}             # the short batch's empty slots left out


def _diagnose_occupancy(args: tuple, expected, got) -> int | None:
    if not isinstance(got, (int, float)) or isinstance(got, bool) or (0 < got <= 1 < expected):
        return None                                     # the fraction slip has its own note
    for hint, value in _typical_occupancy_slips(*args).items():
        if abs(value - expected) > 1e-6 and abs(got - value) <= 1e-6 * max(1.0, value):
            return hint
    return 0


def static_occupancy_exercise() -> Exercise:
    cases = [(*case, False) for case in _OCCUPANCY_CASES] + [_random_occupancy_case(s) for s in range(10)]
    return Exercise(
        **TEXT("static_occupancy"),
        checks=[call_check("static_decode_occupancy", args, note, compare=_close, explain=_explain_occupancy,
                           reveal=not random_case, diagnose=functools.partial(_diagnose_occupancy, args))
                for args, note, random_case in cases],
        reference="labkit.labs.lab03_batching.solutions:static_decode_occupancy",
        engine=["labkit.replay:static_decode_occupancy"], lab="03",
    )


# ---------------------------------------------------------------------------------- preemption victims

_VICTIM_CASES = [
    (([("a", 40, 3), ("b", 30, 2), ("c", 20, 2)], 1, 2), {"zh": "空闲块不够：抢占最后接纳的一个", "en": "short of blocks: preempt the last admitted"}),
    (([("a", 40, 3), ("b", 30, 2), ("c", 20, 1)], 0, 2), {"zh": "一个不够，再抢一个", "en": "one victim is not enough"}),
    (([("a", 40, 3), ("b", 30, 2)], 2, 2), {"zh": "够用：不抢占", "en": "enough free: nobody is preempted"}),
    (([("a", 16, 1)], 0, 5), {"zh": "全抢光也不够：全部抢占", "en": "even all of them are not enough: preempt all"}),
    (([("x", 100, 7), ("y", 5, 1), ("z", 64, 4)], 3, 5), {"zh": "已算 token 多的请求排在前面也不优先", "en": "admission order, not size, decides"}),
]


def _victims_parts(got) -> tuple[list, object] | None:
    if isinstance(got, (list, tuple)) and len(got) == 2 and isinstance(got[0], (list, tuple)):
        return list(got[0]), got[1]
    return None


def _same_victims(got, expected) -> bool:
    parts = _victims_parts(got)
    return parts is not None and parts[0] == list(expected[0]) and parts[1] == expected[1]


def _explain_victims(expected, got) -> str:
    parts = _victims_parts(got)
    if parts is None:
        return t("请返回一对 (被抢占的 id 列表, 重算 token 总数)。", "Return a pair (list of victim ids, total tokens to recompute).")
    victims, recompute = parts
    if sorted(victims) == sorted(expected[0]) and victims != list(expected[0]):
        return t("被抢占的请求对了，但顺序不对：按抢占的先后排列。", "The right victims, in the wrong order: list them as preempted.")
    if victims == list(expected[0]) and recompute != expected[1]:
        return t("被抢占的请求对了，重算的 token 数不对。", "The victims are right; the recompute count is not.")
    return ""


def _diagnose_victims(expected, got, _check) -> int | None:
    parts = _victims_parts(got)
    if parts is None:
        return None
    return 1 if parts[0] == list(expected[0]) else 0


def preemption_victims_exercise() -> Exercise:
    return Exercise(
        **TEXT("preemption_victims"),
        checks=[call_check("preemption_victims", args, note, compare=_same_victims, explain=_explain_victims)
                for args, note in _VICTIM_CASES],
        reference="labkit.labs.lab03_batching.solutions:preemption_victims",
        diagnose=_diagnose_victims, lab="03",
    )
