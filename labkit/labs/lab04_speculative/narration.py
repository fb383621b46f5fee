"""What lab 04 prints about §2 (the live demo), §6 (lossless) and §7 (TPOT vs ITL), rendered from
their records alone (``records.live_record`` / ``lossless_record`` / ``latency_record``): the sentences,
the table rows, the figure title and the outcomes they decide (``claims``). The lab's cells print these
narrations (``lines``) of the record they just saved, so a record made on another CPU renders the same way.
"""

from __future__ import annotations

from labkit.i18n import t
from labkit.labs.common.records import Narration, SectionRecord
from labkit.labs.lab04_speculative import records as R
from labkit.labs.lab04_speculative import views as V
from labkit.labs.lab04_speculative.live import KINDS, summarize
from labkit.labs.lab04_speculative.live_view import kind_label, summary_line


def lines(n: Narration) -> None:
    """Print a narration's sentences, one a line (what a lab cell shows)."""
    for line in n.sentences:
        print(line)


# ----------------------------------------------------------------------------- §2 the live demo

def live_title(rec: SectionRecord) -> str:
    v = rec.values
    ratio = rec.verdict("tokens_per_step").ratio
    return t(f"现场：{V.method_label(v['method'])}，k = {v['k']}，{V.workload_label(v['workload'])}——每个解码步 {ratio:.2f} 个 token",
             f"Live: {V.method_label(v['method'])}, k = {v['k']}, {V.workload_label(v['workload'])}: {ratio:.2f} tokens per decode step")


def live_narration(rec: SectionRecord) -> Narration:
    steps = R.live_from_record(rec)
    s = summarize(steps)
    v = rec.verdict("tokens_per_step")
    verdict = v.sentence(
        greater=("每个解码步平均产出 {ratio} 个 token，普通解码是 1 个：被接受的草稿让一步多产出了 token",
                 "Each decode step emitted {ratio} tokens on average against plain decoding's one: accepted drafts "
                 "made a step emit more"),
        same=("每个解码步只产出 1 个 token（{ratio}）：这次没有一个草稿被接受，和普通解码一样",
              "Each decode step emitted one token ({ratio}): no draft was accepted this time, as in plain decoding"),
        less=("每个解码步不到 1 个 token（{ratio}）：这不应发生", "Under one token per decode step ({ratio}): this cannot happen"),
        unit="")
    rows = tuple((kind_label(k), s.counts[k]) for k in KINDS)
    rows += tuple((t(f"草稿位置 {i} 的接受率", f"acceptance at draft position {i}"), f"{100 * r:.0f}%")
                  for i, r in enumerate(s.per_position))
    return Narration(sentences=(summary_line(steps), verdict, t("计数，不计时：机器忙不忙，这些数都一样。",
                                                                 "Counted, not timed: a busy machine gives the same counts.")),
                     rows=rows, title=live_title(rec),
                     claims={"live_more_than_one_token_per_step": f"{v.direction}|{v.confidence}"})


# ----------------------------------------------------------------------------- §6 lossless

def greedy_narration(rec: SectionRecord) -> Narration:
    groups = {t(*R.GREEDY_GROUPS[g]): rows for g, rows in R.greedy_from_record(rec).items()}
    same, total = V.identical_summary([r for rows in groups.values() for r in rows])
    rows = tuple((name, "{}/{}".format(*V.identical_summary(rs))) for name, rs in groups.items())
    return Narration(sentences=(V.identical_sentence(groups),), rows=rows,
                     title=t(f"贪心输出与普通贪心逐 token 相同：{same}/{total} 次投机运行",
                             f"Greedy output equal to plain greedy: {same}/{total} speculative runs"),
                     claims={"greedy_identical": "all" if same == total else "not all"})


def sampling_narration(rec: SectionRecord) -> Narration:
    test, labels = R.sampling_from_record(rec)
    return Narration(sentences=(V.test_verdict(test),), rows=tuple(V.histogram_rows(test, labels)),
                     title=V.histogram_title(test),
                     claims={"sampling_differs": "yes" if test.p_value < V.SIGNIFICANCE else "no evidence"})


def sampling_figure(rec: SectionRecord):
    return V.histogram_figure(*R.sampling_from_record(rec))


# ----------------------------------------------------------------------------- §7 TPOT and ITL

def latency_table(rec: SectionRecord):
    return V.latency_table(*R.latency_from_record(rec))



def latency_narration(rec: SectionRecord) -> Narration:
    plain, spec = R.latency_from_record(rec)
    v = rec.verdict("itl_over_tpot")
    table = latency_table(rec)
    clock = (t("表里的毫秒数是墙钟时间，测量时机器正忙，它们被拉长了、不要拿两行的毫秒数判断谁用时短；ITL 均值 / TPOT 是计数之比，不受影响。",
               "The table's milliseconds are wall clock measured while the machine was busy: they are stretched, so do "
               "not read the two rows' milliseconds for which engine takes less time; mean ITL / TPOT is a ratio of counts and is not affected.")
             if rec.busy else
             t("表里的毫秒数是一次运行的墙钟时间（没有多轮），只用来看 TPOT 与 ITL 的关系，不用来判断普通与投机谁用时短——那是第 3、4 节的多轮测量。",
               "The table's milliseconds are one run's wall clock (no rounds): read them for how TPOT and ITL relate, not "
               "for which engine takes less time; sections 3 and 4 measure that in rounds."))
    return Narration(sentences=(V.latency_verdict(spec), clock), rows=tuple(tuple(r) for r in table.rows),
                     title=V.latency_title(spec), claims={"itl_exceeds_tpot": f"{v.direction}|{v.confidence}"})
