"""Lab 03 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the lab's own formulas (``solutions``), never typed in, so a
question and the lab cannot drift apart. Text is ``{"zh": ..., "en": ...}``.

The multiple-choice questions are data, ``quiz.toml`` beside this module: a teacher edits their text
there, and ``labkit.assess.bank`` checks and loads the file. What must be computed stays here and
``questions()`` places it after the question it follows.
"""

from __future__ import annotations

from pathlib import Path

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import from_file
from labkit.labs.lab03_batching.solutions import static_decode_occupancy

_OCC_LENS, _OCC_SEQS = [33, 5, 5, 5], 4          # one long request, three short, one batch

BANK = Path(__file__).with_name("quiz.toml")     # the multiple-choice questions, as data


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}



def _occupancy_numeric() -> Numeric:
    answer = static_decode_occupancy(_OCC_LENS, _OCC_SEQS)
    return Numeric(
        question=_t(f"一批 {_OCC_SEQS} 个请求，输出长度 {_OCC_LENS}（第一个 token 来自预填充）。静态批处理的解码步里，批占用率是百分之几？",
                    f"One static batch of {_OCC_SEQS} requests with output lengths {_OCC_LENS} (the first token comes from "
                    "prefill). What is the decode-step occupancy, in percent?"),
        answer=answer, tol=0.5, unit="%",
        hint=_t("忙碌槽位·步 = Σ(o_i − 1)；全部槽位·步 = 4 × (max o_i − 1)。", "Busy slot-steps = Σ(o_i − 1); all = 4 × (max o_i − 1)."),
        explanation=_t(f"(32 + 4 + 4 + 4) / (4 × 32) = {answer:.1f}%：一个长请求让三个槽位空转了大部分时间。",
                       f"(32 + 4 + 4 + 4) / (4 × 32) = {answer:.1f}%: one long request leaves three slots idle most of the time."))


def questions() -> list:
    return from_file(BANK, after={"bt-v1-rule": [_occupancy_numeric()]})


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：批处理", "Concept check: batching"), lab="03")
