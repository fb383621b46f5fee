"""Lab 02 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the formulas the lab uses (``solutions.slot_mapping``,
``sharing.cacheable_tokens``), never typed in.

The multiple-choice questions are data, ``quiz.toml`` beside this module: a teacher edits their text
there, and ``labkit.assess.bank`` checks and loads the file. What must be computed stays here and
``questions()`` places it after the question it follows.
"""

from __future__ import annotations

from pathlib import Path

from labkit.assess import Numeric, Quiz, WhichFigure
from labkit.assess.bank import from_file
from labkit.labs.lab02_paged_attention.sharing import cacheable_tokens
from labkit.labs.lab02_paged_attention.solutions import slot_mapping

BANK = Path(__file__).with_name("quiz.toml")     # the multiple-choice questions, as data


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}



def _slot() -> Numeric:
    table, pos, bs = [7, 2, 9], 40, 16
    return Numeric(
        question=_t(f"块大小 B = {bs}，一个请求的块表是 {table}。它的第 {pos} 个 token（从 0 数）的 K/V 在 KV 池的第几个槽位？",
                    f"Block size B = {bs}, a request's block table is {table}. Which pool slot holds the K/V of its "
                    f"token at position {pos} (counting from 0)?"),
        answer=slot_mapping([table], [0], [pos], bs)[0], tol=0,
        hint=_t("slot = block_table[p // B] * B + p % B。", "slot = block_table[p // B] * B + p % B."),
        explanation=_t("40 // 16 = 2，查表得物理块 9；偏移 40 % 16 = 8；9 × 16 + 8 = 152。",
                       "40 // 16 = 2 → physical block 9; offset 40 % 16 = 8; 9 × 16 + 8 = 152."))


def _max_waste() -> Numeric:
    return Numeric(
        question=_t("块大小 16 时，分页布局里一个请求最多浪费多少个 token 槽位？", "With block size 16, how many token slots can one request waste at most under paged KV?"),
        answer=16 - 1, tol=0, unit=_t("个槽位", "slots"),
        hint=_t("只有最后一个块可能没填满。", "Only the last block can be partly empty."),
        explanation=_t("最后一块至少有 1 个 token，所以最多空 B − 1 = 15 个；本实验测得的最大尾部也不超过它。",
                       "The last block holds at least one token, so at most B − 1 = 15 are empty; the lab's measured "
                       "largest tail never exceeds it."))


def _prefix_tokens() -> Numeric:
    prompt, bs = 48, 16
    return Numeric(
        question=_t(f"块大小 {bs}。一个 {prompt} 个 token 的提示之前完整算过、都还在前缀缓存里。再来一次同样的提示，最多有多少个 token 可以直接命中？",
                    f"Block size {bs}. A {prompt}-token prompt was computed before and is fully cached. Sent again, how many "
                    "of its tokens can come from the cache at most?"),
        answer=cacheable_tokens(prompt, bs), tol=0, unit=_t("个 token", "tokens"),
        hint=_t("提示的最后一个 token 一定要重算（要它的 logits 来采样第一个输出）；命中以整块为单位。",
                "The prompt's last token is always recomputed (its logits pick the first output); hits come in whole blocks."),
        explanation=_t("最后一个 token 在第 3 块里，所以只能命中前 2 块 = 32 个 token，第 3 块整块重算。",
                       "The last token is in block 3, so only the first 2 blocks (32 tokens) hit; block 3 is recomputed."))


def _fork_blocks() -> Numeric:
    return Numeric(
        question=_t("块大小 16，提示 40 个 token，并行采样 n = 4。刚 fork 完（还没生成第二个 token）时，四个序列一共占用多少个物理块？",
                    "Block size 16, a 40-token prompt, parallel sampling n = 4. Right after the fork (before the second "
                    "token), how many physical blocks do the four sequences hold in total?"),
        answer=-(-40 // 16), tol=0, unit=_t("块", "blocks"),
        hint=_t("四个块表都指向同一批提示块。", "All four block tables point at the same prompt blocks."),
        explanation=_t("ceil(40/16) = 3 个块，引用数都是 4；不共享要 12 块。第一次写入第 3 块（只填了 8 个槽位）时，前三个写入者各复制一次。",
                       "ceil(40/16) = 3 blocks, each with ref count 4; without sharing 12. The first writes into block 3 "
                       "(8 slots filled) copy it, once per writer but the last."))


def questions() -> list:
    return from_file(BANK, after={"pa-page-table": [_slot()], "pa-no-fault": [_max_waste()],
                                  "pa-what-removed": [_prefix_tokens()], "pa-chained-hash": [_fork_blocks()]})


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：PagedAttention", "Concept check: PagedAttention"), lab="02")


# ----------------------------------------------------------------------------- checks inside the lab's sections

def fragmentation_figure() -> WhichFigure:
    """Which pool map shows external fragmentation? Three layouts replayed on the simulated engine
    (``pool_maps``); the explanations quote each map's own counts."""
    from labkit.labs.lab02_paged_attention import pool_maps as pm

    exact, max_len, paged = (pm.pool_map(layout) for layout in pm.LAYOUTS)
    holes = exact.holes()
    return WhichFigure(
        question=_t("三张图是同一条轨迹、同一个 384 槽位的 KV 池在某一步的样子（模拟引擎）：每格一个槽位，颜色是持有它的请求，"
                    "深色 = 存有 K/V，浅色 = 被请求占着但还没存，白色 = 空闲。哪一张出现了外部碎片（external fragmentation）？",
                    "The same trace in the same 384-slot KV pool at one step (simulated engine): one cell per slot, coloured "
                    "by the request holding it, dark = holds K/V, light = held but empty, white = free. Which one shows "
                    "external fragmentation?"),
        figures=[pm.slot_figure(exact), pm.slot_figure(max_len), pm.slot_figure(paged)],
        answer=0,
        explanations=[
            _t(f"对：空闲 {exact.free_slots} 个槽位，比队首请求要的 {exact.waiting_need} 个多，可它们散成 {len(holes)} 段，"
               f"最大的一段只有 {max(holes)} 个。连续布局要一整段，所以它只能等：空闲够、却用不上，这就是外部碎片。",
               f"Right: {exact.free_slots} slots are free, more than the {exact.waiting_need} the head of the queue needs, "
               f"but they lie in {len(holes)} holes, the largest {max(holes)} slots. A contiguous layout needs one run, "
               "so it waits: enough is free, none of it usable. That is external fragmentation."),
            _t(f"浅色的一大片（{max_len.reserved_empty} 个槽位被占着却没存 K/V）是按最大长度预留的浪费，在请求自己的区域里面："
               "内部碎片和“为以后预留”。池子里没有空闲的洞可言——外部碎片说的是区域之间的空闲。",
               f"The wide light areas ({max_len.reserved_empty} slots held without K/V) are waste inside each request's own "
               "region from max-length reservation: internal fragmentation and reserved-for-later. There is no free hole "
               "at all; external fragmentation is free space between regions."),
            _t(f"同一个请求的块散在池子各处（{paged.scattered()} 个请求的块不连续），但分页本来就不要求连续，散开不是碎片。"
               f"这里只剩 {paged.free_slots} 个空闲槽位，不够队首请求的 {paged.waiting_need} 个：它等的是内存不够，不是碎片。",
               f"A request's blocks lie all over the pool ({paged.scattered()} requests hold non-consecutive blocks), but "
               f"paging never needs them consecutive: scattered is not fragmented. Only {paged.free_slots} slots are free, "
               f"fewer than the {paged.waiting_need} the head needs: it waits for memory, not because of fragmentation."),
        ],
        misconceptions=["", "reserved-but-empty slots are external fragmentation",
                        "scattered blocks mean the pool is fragmented"],
        id="pa-which-map-external")


def section_checks() -> list:
    """The questions this lab asks inside its sections (shown by their own cells, not in ``quiz()``)."""
    return [fragmentation_figure()]


def fragmentation_check() -> Quiz:
    return Quiz([fragmentation_figure()], title=_t("读图：外部碎片在哪里", "Read the maps: where is the external fragmentation"),
                lab="02", id="pa-which-map")
