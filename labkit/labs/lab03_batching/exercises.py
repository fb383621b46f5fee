"""Lab 03 exercise: one continuous-batching scheduling step under a token budget."""

from __future__ import annotations

import random
from dataclasses import dataclass

from labkit.assess.checks import Check
from labkit.assess.exercise import Exercise
from labkit.i18n import t


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
               max_num_batched_tokens: int, max_num_seqs: int) -> Check:
    call = (f"schedule_step(running={_show(running)}, waiting={_show(waiting)}, "
            f"max_num_batched_tokens={max_num_batched_tokens}, max_num_seqs={max_num_seqs})")
    return Check(label={lang: f"{call}  # {text}" for lang, text in note.items()},
                 run=lambda fn, _expected: fn(list(running), list(waiting), max_num_batched_tokens, max_num_seqs),
                 explain=_explain)


def _explain(expected, got) -> str:
    if isinstance(got, dict) and isinstance(expected, dict) and sum(got.values()) > sum(expected.values()):
        return t("调度的 token 总数超过了 max_num_batched_tokens。", "More tokens were scheduled than max_num_batched_tokens allows.")
    return ""


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
    return note, running, waiting, rng.choice([8, 16, 32, 64]), seqs


def schedule_step_exercise() -> Exercise:
    cases = _STEP_CASES + [_random_step_case(s) for s in range(12)]
    return Exercise(
        name="schedule_step",
        title={"zh": "练习：连续批处理的一步调度", "en": "Exercise: one continuous-batching scheduler step"},
        task={"zh": "实现 schedule_step(running, waiting, max_num_batched_tokens, max_num_seqs)，返回 {request_id: 本步计算的 token 数}。"
                    "先按顺序服务 running，再按先来先服务接纳 waiting；每个请求得到 min(仍需计算的 token 数, 剩余预算)。"
                    "预算为 0，或 len(running) + 新接纳数 达到 max_num_seqs 时，停止接纳。不要修改输入。",
              "en": "Write schedule_step(running, waiting, max_num_batched_tokens, max_num_seqs) returning "
                    "{request_id: tokens computed this step}. Serve running requests in order, then admit waiting ones "
                    "first come first served; each gets min(tokens it still needs, budget left). Stop admitting when "
                    "the budget is 0 or len(running) + admitted reaches max_num_seqs. Do not modify the inputs."},
        checks=[step_check(*case) for case in cases],
        reference="labkit.labs.lab03_batching.solutions:schedule_step",
        hints=[{"zh": "一个请求仍需计算的 token 数是 num_tokens - num_computed_tokens（解码时为 1）。",
                "en": "A request still needs num_tokens - num_computed_tokens tokens (1 while decoding)."},
               {"zh": "用一个变量 budget 从 max_num_batched_tokens 往下减；两个 for 循环：先 running，再 waiting。",
                "en": "Count a budget down from max_num_batched_tokens; two for loops: running first, then waiting."},
               {"zh": "waiting 的循环里，budget == 0 或 len(running) + admitted >= max_num_seqs 时 break。",
                "en": "In the waiting loop, break when budget == 0 or len(running) + admitted >= max_num_seqs."}],
    )
