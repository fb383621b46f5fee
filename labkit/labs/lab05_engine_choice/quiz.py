"""Lab 05 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from cited rows (``facts``), never typed in.

The multiple-choice questions are data, ``quiz.toml`` beside this module: a teacher edits their text
there, and ``labkit.assess.bank`` checks and loads the file. What must be computed stays here and
``questions()`` places it after the question it follows.
"""

from __future__ import annotations

from pathlib import Path

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import from_file
from labkit.labs.lab05_engine_choice.facts import PUBLISHED, cost_per_million_tokens

EXAMPLE_PRICE = 2.0            # $/GPU-hour in the numeric question: an example, not a fact
COST_REL_TOL = 0.05            # the answer rounded to two decimals (0.02 for 0.0193) is right too
_TRT_H100 = next(p for p in PUBLISHED if p.engine == "TensorRT-LLM" and p.version == "v0.17" and "H100" in p.hardware)

BANK = Path(__file__).with_name("quiz.toml")     # the multiple-choice questions, as data


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}



def _cost() -> Numeric:
    usd = cost_per_million_tokens(_TRT_H100.value, EXAMPLE_PRICE)
    return Numeric(question=_t(f"TensorRT-LLM 公布 Llama-3.1-8B FP8 单卡 H100 {_TRT_H100.shown} tok/s。GPU 按 {EXAMPLE_PRICE:g} 美元/小时（示例价格），每百万输出 token 多少美元？",
                               f"TensorRT-LLM publishes {_TRT_H100.shown} tok/s for Llama-3.1-8B FP8 on one H100. At {EXAMPLE_PRICE:g} $/hour (example price), how many dollars per million output tokens?"),
                   answer=usd, rel_tol=COST_REL_TOL, unit=_t("美元", "$"),
                   hint=_t("每小时产出 tok/s × 3600 个 token；价格除以它，再乘 10^6。", "An hour yields tok/s × 3600 tokens; divide the price by that and multiply by 10^6."),
                   explanation=_t(f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.4f} 美元"
                                  f"（相差 {COST_REL_TOL:.0%} 以内都算对，所以 {usd:.3f} 和 {usd:.2f} 都对）。"
                                  "这是吞吐上限下的理想成本：真实服务有空闲、SLO 与峰谷。",
                                  f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.4f} $ (within "
                                  f"{COST_REL_TOL:.0%} counts, so {usd:.3f} and {usd:.2f} are both right). That is the ideal at "
                                  "peak throughput; real services idle, keep SLOs and see peaks."))


def questions() -> list:
    return from_file(BANK, after={"ec-disagree": [_cost()]})


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：如何选择推理引擎", "Concept check: choosing an inference engine"), lab="05")
