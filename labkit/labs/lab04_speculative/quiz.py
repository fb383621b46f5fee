"""Lab 04 concept check: ten questions on speculative decoding, every option explained.

Numeric answers are computed here from ``labkit.spec_decode.theory`` (never typed in), so the
quiz and the lab's formulas cannot drift apart. Text is ``{"zh": ..., "en": ...}``.

The multiple-choice questions are data, ``quiz.toml`` beside this module: a teacher edits their text
there, and ``labkit.assess.bank`` checks and loads the file. What must be computed stays here and
``questions()`` places it after the question it follows.
"""

from __future__ import annotations

from pathlib import Path

from labkit.assess import Numeric, Ordering, Quiz
from labkit.assess.bank import from_file, on_own_result
from labkit.spec_decode.theory import expected_speedup, expected_tokens_per_step, optimal_k

BANK = Path(__file__).with_name("quiz.toml")     # the multiple-choice questions, as data


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}



def _expected_tokens() -> Numeric:
    alpha, k = 0.8, 4
    value = expected_tokens_per_step(alpha, k)
    return Numeric(
        question=_t(f"α = {alpha}、k = {k}：每次验证步期望产出多少个 token？", f"α = {alpha}, k = {k}: expected tokens per verification step?"),
        answer=round(value, 2), tol=0.01, unit="token",
        hint=_t("(1 − α^(k+1)) / (1 − α) = 1 + α + … + α^k。", "(1 − α^(k+1)) / (1 − α) = 1 + α + … + α^k."),
        explanation=_t(f"1 + 0.8 + 0.64 + 0.512 + 0.4096 = {value:.2f}（Leviathan 等 2023，式 (1)）。",
                       f"1 + 0.8 + 0.64 + 0.512 + 0.4096 = {value:.2f} (Leviathan et al. 2023, Eq. 1)."))


def _speedup() -> Numeric:
    alpha, k, c = 0.8, 4, 0.1
    value = expected_speedup(alpha, k, c)
    return Numeric(
        question=_t(f"同上（α = {alpha}、k = {k}），草稿一步的耗时是目标一步的 c = {c}。按 Leviathan 公式，加速比是多少？",
                    f"As above (α = {alpha}, k = {k}); a draft step costs c = {c} target steps. Leviathan's speed-up?"),
        answer=round(value, 2), tol=0.02, unit="×",
        hint=_t("期望 token 数 / (k·c + 1)。", "expected tokens / (k·c + 1)."),
        explanation=_t(f"{expected_tokens_per_step(alpha, k):.2f} / (4 × 0.1 + 1) = {value:.2f}（定理 3.8）。注意它假设验证 k+1 个 token "
                       "只花一个普通步——本实验在 CPU 上量出这不成立。",
                       f"{expected_tokens_per_step(alpha, k):.2f} / (4 × 0.1 + 1) = {value:.2f} (Theorem 3.8). It assumes "
                       "verifying k+1 tokens costs one plain step, which this lab measures to be false on a CPU."))


def _best_k() -> Numeric:
    alpha, c = 0.6, 0.2
    k = optimal_k(alpha, c)
    return Numeric(
        question=_t(f"α = {alpha}、c = {c}：按 Leviathan 公式，最优的 k 是多少？（0 表示不投机）",
                    f"α = {alpha}, c = {c}: by Leviathan's formula, which k is best? (0 = do not speculate)"),
        answer=k, tol=0, unit="",
        hint=_t("对 k = 0, 1, 2, … 逐个算 (1 + α + … + α^k) / (k·c + 1)。", "Compute (1 + α + … + α^k) / (k·c + 1) for k = 0, 1, 2, …"),
        explanation=_t(f"k = 0…4 的加速比：{', '.join(f'{expected_speedup(alpha, j, c):.3f}' for j in range(5))}；最大在 k = {k}。"
                       "α 不高、草稿又不便宜时，多起草只是多花钱。",
                       f"Speed-ups for k = 0..4: {', '.join(f'{expected_speedup(alpha, j, c):.3f}' for j in range(5))}; "
                       f"the largest is at k = {k}. With a modest α and a costly draft, more drafts only cost more."))


OWN_STEP_COST = 1.5      # a stated "if", not a measurement: the question is about reading the learner's own τ


def _own_speedup(tokens_per_step: float) -> Numeric:
    """On the learner's own run (section 2's prediction ``ngram-tokens-per-step``): speed-up from τ."""
    answer = tokens_per_step / OWN_STEP_COST
    return Numeric(
        question=_t(f"你在第 2 节测得：n-gram、k = 4、抄写式编辑，每个解码步平均产出 {tokens_per_step:.2f} 个 token。"
                    f"如果一个投机步的耗时是普通解码步的 {OWN_STEP_COST} 倍，端到端的加速比约是多少？",
                    f"In section 2 you measured: n-gram, k = 4, copy-style edits, {tokens_per_step:.2f} tokens per decode "
                    f"step on average. If a speculative step takes {OWN_STEP_COST}× a plain decode step, what is the "
                    "end-to-end speed-up, roughly?"),
        answer=round(answer, 2), rel_tol=0.03, unit=_t("倍", "×"), id="sd-own-speedup",
        hint=_t("普通解码每步 1 个 token；加速比 = 每步产出的 token 数 ÷ 每步的相对代价。",
                "Plain decoding yields 1 token per step; speed-up = tokens per step ÷ the step's relative cost."),
        explanation=_t(f"{tokens_per_step:.2f} ÷ {OWN_STEP_COST} ≈ {answer:.2f}：多产出的 token 先要付清每步多花的时间。",
                       f"{tokens_per_step:.2f} ÷ {OWN_STEP_COST} ≈ {answer:.2f}: the extra tokens must first pay for "
                       "the costlier step."))


def questions() -> list:
    return from_file(BANK, after={"sd-rejection-rule": [
        _expected_tokens(), _speedup(), _best_k(), *on_own_result("04", "ngram-tokens-per-step", _own_speedup)]})


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：投机解码", "Concept check: speculative decoding"), lab="04")


# ----------------------------------------------------------------------------- checks inside the lab's sections

def step_order() -> Ordering:
    """The order of what happens in one speculative decoding step of this engine."""
    return Ordering(
        question=_t("把投机解码一步里发生的事排成先后顺序（用 ▲ ▼ 移动，再检查）：",
                    "Put what happens in one speculative decoding step in order (move with ▲ ▼, then check):"),
        items=[
            _t("提议者（n-gram 或草稿模型）起草 k 个 token", "The proposer (n-gram or draft model) drafts k tokens"),
            _t("目标模型一次前向处理“最后一个 token + k 个草稿”，得到 k + 1 个位置的分布，并把它们的 K/V 写进缓存",
               "The target model runs one forward pass over the last token plus the k drafts: k + 1 distributions, "
               "their K/V written to the cache"),
            _t("从第一个草稿起逐个比较，接受到第一个不一致为止（采样器的 `_verify`）",
               "Compare the drafts one by one from the first, accepting up to the first mismatch (the sampler's `_verify`)"),
            _t("在第一个不一致处放上目标模型自己的 token（全部接受时再多给一个 bonus token）",
               "At the first mismatch, emit the target model's own token (if all are accepted, one bonus token)"),
            _t("调度器把 `num_computed_tokens` 减回“接受的草稿 + 1”：被拒草稿写进缓存的 K/V 作废（回滚）",
               "The scheduler sets `num_computed_tokens` back to accepted drafts + 1: the rejected drafts' K/V is dropped "
               "(rolled back)"),
        ],
        reasons=[
            _t("一切从草稿开始：目标模型这一步要验证的就是它们。", "Everything starts from the drafts: they are what the step verifies."),
            _t("目标模型这次前向的输入就是草稿：没有草稿，前向只能算一个位置，那就是普通解码。"
               "（目标模型并不先自己生成、再让草稿来对答案。）",
               "The drafts are the forward pass's input: without them it computes one position, which is plain decoding. "
               "(The target does not generate first and let the drafts check against it.)"),
            _t("比较要用目标模型在每个位置给出的分布（贪心时是 argmax），它们来自那次前向：前向之前无从比较。",
               "Comparing needs the target's distribution at each position (its argmax when greedy), which comes from "
               "that forward pass: nothing can be compared before it."),
            _t("修正 token 放在第一个不一致的位置上：要先比较出这个位置，才知道放在哪里、前面接受了几个草稿。",
               "The correction goes at the first mismatch: the comparison must find that position first."),
            _t("回滚多少取决于接受了几个草稿，要等比较和修正结束才知道；被拒草稿的 K/V 是前向时写进去的，所以回滚一定在最后。",
               "How much to roll back depends on how many drafts were accepted, known only after comparing; the rejected "
               "drafts' K/V was written by the forward pass, so the rollback comes last."),
        ],
        explanation=_t("每步至少产出 1 个 token（修正或 bonus），最多 k + 1 个；因为每个输出 token 都经目标模型的分布认可，输出与普通解码相同。",
                       "Each step yields at least 1 token (the correction or the bonus) and at most k + 1; every token "
                       "output is the target's own choice, so the output equals plain decoding."),
        id="sd-step-order")


def section_checks() -> list:
    """The questions this lab asks inside its sections (shown by their own cells, not in ``quiz()``)."""
    return [step_order()]


def step_order_check() -> Quiz:
    return Quiz([step_order()], title=_t("排序：投机解码的一步", "Order: one speculative decoding step"), lab="04",
                id="sd-step-order")
