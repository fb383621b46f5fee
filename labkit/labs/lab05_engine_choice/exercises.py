"""Lab 05 exercises: goodput and P99 TPOT from a ``labkit bench`` result file, and picking a
configuration for a budget and an objective from the table the learner measured.

Both take the learner's own data when given (``result_path``, ``table``): the expected values come
from the reference solution run on that same data, never from a typed-in answer.
"""

from __future__ import annotations

import json
import random
import secrets
from pathlib import Path

from labkit.assess.bank import ExerciseText
from labkit.assess.checks import Check
from labkit.assess.exercise import Exercise

# Each exercise's title, task and hints: data a teacher edits, beside this file.
TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"),
                    ("goodput_p99", "pick_config"))

_REQ = ("success", "ttft_s", "e2el_s", "output_tokens")


def _close(got, expected, rel: float = 1e-6) -> bool:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    for g, e in zip(got, expected):
        if e is None or g is None:
            if g is not e:
                return False
        elif not isinstance(g, (int, float)) or abs(g - e) > rel * max(1.0, abs(e)):
            return False
    return True


def _case(label: dict, args: tuple, reveal: bool = True, hint: int | None = None) -> Check:
    return Check(label=label, run=lambda fn, _e: fn(*args), compare=_close, reveal=reveal, hint=hint)


def _diagnose_goodput(expected, got, _check) -> int | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return None
    goodput_right = _close((got[0], expected[1]), expected)
    return 2 if goodput_right else 0


def _r(ok: bool, ttft: float, e2el: float, n: int) -> dict:
    return {"success": ok, "ttft_s": ttft, "e2el_s": e2el, "output_tokens": n}


_HAND = [
    ({"zh": "三个请求，一个 TTFT 超标", "en": "three requests, one misses TTFT"},
     ([_r(True, 0.1, 1.1, 11), _r(True, 0.3, 1.3, 11), _r(True, 0.1, 2.1, 11)], 4.0, 200.0, 150.0)),
    ({"zh": "失败的请求不算", "en": "failed requests do not count"},
     ([_r(True, 0.1, 0.5, 5), _r(False, 0.0, 0.0, 0)], 2.0, 500.0, 500.0)),
    ({"zh": "只有 1 个输出 token：没有 TPOT，但满足 TPOT 目标", "en": "one output token: no TPOT, but meets the TPOT objective"},
     ([_r(True, 0.05, 0.05, 1)], 1.0, 100.0, 10.0)),
    ({"zh": "P99 在两个值之间插值", "en": "P99 interpolates between two values"},
     ([_r(True, 0.0, 0.1 * (i + 1) + 0.0, 2) for i in range(10)], 5.0, 1000.0, 550.0)),
]


def _file_requests(path: str | Path) -> tuple[list[dict], float]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [{k: r[k] for k in _REQ} for r in data["requests"]], float(data["metrics"]["duration_s"])


def goodput_exercise(result_path: str | Path | None = None, ttft_ms: float = 2000.0,
                     tpot_ms: float = 300.0) -> Exercise:
    checks = [_case(label, args, hint=1 if "one output token" in label["en"] else None) for label, args in _HAND]
    if result_path is not None:
        reqs, duration = _file_requests(result_path)
        name = Path(result_path).name
        checks.append(_case({"zh": f"你的结果文件 {name}，目标 TTFT ≤ {ttft_ms:g} ms、TPOT ≤ {tpot_ms:g} ms",
                             "en": f"your result file {name}, objectives TTFT ≤ {ttft_ms:g} ms, TPOT ≤ {tpot_ms:g} ms"},
                            (reqs, duration, ttft_ms, tpot_ms), reveal=False))
    return Exercise(
        **TEXT("goodput_p99"),
        checks=checks,
        reference="labkit.labs.lab05_engine_choice.solutions:goodput_and_p99_tpot",
        engine=["labkit.serve_bench.client_metrics", "labkit.metrics:percentile"], diagnose=_diagnose_goodput, lab="05",
    )


def _t(*rows) -> list[dict]:
    return [{"variant": v, "tokens_per_cpu_s": x, "tpot_p99_ms": p, "memory_mib": m} for v, x, p, m in rows]


_HAND_TABLE = _t(("baseline", 30.0, 400.0, 540.0), ("bf16", 27.0, 450.0, 270.0), ("ngram", 33.0, 900.0, 540.0),
                 ("contiguous", 25.0, 700.0, 630.0))


def _budgets(table: list[dict]) -> list[tuple[float, float]]:
    """Budgets that cut the learner's table in different places: every memory and TPOT value seen."""
    mems = sorted({r["memory_mib"] for r in table})
    tpots = sorted({r["tpot_p99_ms"] for r in table if r["tpot_p99_ms"] is not None})
    if not mems or not tpots:
        return []
    return [(mems[0], tpots[-1]), (mems[-1], tpots[0]), (mems[-1], tpots[len(tpots) // 2]), (mems[0] - 1, tpots[-1])]


def _random_cases(n: int = 3) -> list[tuple[list[dict], float, float]]:
    """Tables and budgets drawn afresh for every exercise built, so answers copied from feedback cannot pass;
    variant names and values are shuffled, and one row may lack a TPOT."""
    rng = random.Random(secrets.randbits(64))
    names = ["baseline", "bf16", "ngram", "draft", "contiguous", "static", "prefix", "int4"]
    out = []
    for _ in range(n):
        rows = [(v, round(rng.uniform(5, 40), 2), None if rng.random() < 0.15 else round(rng.uniform(100, 1500), 1),
                 round(rng.uniform(200, 700), 1)) for v in rng.sample(names, rng.randint(3, 7))]
        table = _t(*rows)
        mems = sorted(r["memory_mib"] for r in table)
        tpots = sorted(r["tpot_p99_ms"] for r in table if r["tpot_p99_ms"] is not None) or [500.0]
        out.append((table, rng.choice(mems), rng.choice(tpots)))
    return out


def pick_config_exercise(table: list[dict] | None = None) -> Exercise:
    cases = [(_HAND_TABLE, 600.0, 500.0), (_HAND_TABLE, 300.0, 1000.0), (_HAND_TABLE, 100.0, 1000.0),
             (_HAND_TABLE, 1000.0, 1000.0), (_HAND_TABLE, 540.0, 400.0)]      # the last: both limits met exactly
    cases += [(table, m, p) for m, p in _budgets(table or [])]
    checks = [Check(label={"zh": f"预算 {m:g} MiB，TPOT P99 ≤ {p:g} ms" + ("（你的表）" if tab is table else ""),
                           "en": f"budget {m:g} MiB, TPOT P99 ≤ {p:g} ms" + (" (your table)" if tab is table else "")},
                    run=lambda fn, _e, a=(tab, m, p): fn(*a)) for tab, m, p in cases]
    checks += [Check(label={"zh": f"随机隐藏用例 {i + 1}：{len(tab)} 行的表，预算 {m:g} MiB，TPOT P99 ≤ {p:g} ms（不显示期望值）",
                            "en": f"random hidden case {i + 1}: a {len(tab)}-row table, budget {m:g} MiB, TPOT P99 ≤ {p:g} ms "
                                  "(expected value not shown)"},
                     run=lambda fn, _e, a=(tab, m, p): fn(*a), reveal=False)
               for i, (tab, m, p) in enumerate(_random_cases())]
    return Exercise(
        **TEXT("pick_config"),
        checks=checks,
        reference="labkit.labs.lab05_engine_choice.solutions:pick_config",
        diagnose=lambda expected, got, _c: 0 if (got is None) != (expected is None) else 1, lab="05",
    )
