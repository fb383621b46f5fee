"""Lab 02, section 1: what PagedAttention takes from operating-system paging, and where it stops.

Kwon et al. (SOSP'23, §4) build the KV cache like virtual memory: a request sees its tokens as one
contiguous sequence of positions (its "virtual address space"), while their K/V live in fixed-size
blocks anywhere in the pool, found through a per-request block table::

    token position p  ──►  logical block p // B, offset p % B
                                  │ block_table
                                  ▼
    physical slot  =  block_table[p // B] * B + p % B
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.i18n import t
from labkit.report.tables import Table


@dataclass(frozen=True)
class Pair:
    os_zh: str
    os_en: str
    kv_zh: str
    kv_en: str
    where: str          # the labkit code that does it

    def row(self) -> list[str]:
        return [t(self.os_zh, self.os_en), t(self.kv_zh, self.kv_en), self.where]


ANALOGY = (
    Pair("页（page）", "page", "KV 块（KV block）：B 个 token 的 K/V", "KV block: the K/V of B tokens",
         "EngineConfig.block_size"),
    Pair("页表（page table）", "page table", "块表（block table）：逻辑块 → 物理块", "block table: logical → physical block",
         "KVCacheManager.block_tables"),
    Pair("物理页框（physical frame）", "physical frame", "物理块（physical block）：KV 池里的一块", "physical block in the KV pool",
         "BlockPool.blocks"),
    Pair("虚拟地址（virtual address）", "virtual address", "token 在请求里的位置（position）", "a token's position in its request",
         "num_computed_tokens"),
    Pair("按需调页（demand paging）", "demand paging", "请求的最后一块写满时才分配下一块", "a block is allocated when the last one fills",
         "KVCacheManager.allocate_slots"),
    Pair("共享页；fork 后写时复制（copy-on-write）", "shared pages; copy-on-write after fork",
         "共享前缀块；并行采样的写时复制", "shared prefix blocks; copy-on-write for parallel samples",
         "BlockPool.share, KVCacheManager.fork"),
    Pair("换出（swapping）", "swapping",
         "抢占（preemption）：论文和 vLLM V0 可以把 K/V 换出到 CPU 内存（也可以重算）；vLLM V1 和本引擎只重算",
         "preemption: the paper and vLLM V0 could swap K/V out to CPU memory (or recompute); vLLM V1 and labkit "
         "only recompute", "ContinuousScheduler._preempt"),
)

LIMITS = (
    ("没有 TLB：没有硬件缓存地址翻译；注意力内核每步自己读块表。",
      "No TLB: no hardware caches the translation; the attention kernel reads the block table every step."),
    ("没有“缺页中断”：分配新块由调度器在这一步开始前计划好，而不是访问时被硬件陷入（trap）。",
      "No page fault: the scheduler plans each new block before the step runs; nothing is trapped on access."),
    ("页大小由硬件定下几档（x86-64：4 KB，大页 2 MB 和 1 GB），一个系统里可以混用；块大小是每个引擎的一个参数"
     "（vLLM 默认 16 个 token），整个 KV 池只用一种，要在浪费和内核效率之间权衡。",
      "Page sizes are a few fixed hardware sizes (x86-64: 4 KB, huge pages of 2 MB and 1 GB), mixed within one "
      "system; the block size is one engine knob for the whole KV pool (vLLM: 16 tokens), traded between waste "
      "and kernel efficiency."),
    ("换出的页以后能原样换回；vLLM V1 和本引擎抢占时直接丢掉 K/V，之后重算（只有论文和 V0 会换出到 CPU）。",
      "A swapped page comes back as it was; vLLM V1 and labkit drop the K/V on preemption and recompute them later "
      "(only the paper and V0 swapped to CPU)."),
)


def analogy_table() -> Table:
    return Table([t("操作系统分页", "OS paging"), t("PagedAttention", "PagedAttention"), t("labkit 里", "in labkit")],
                 [pair.row() for pair in ANALOGY],
                 caption=t("类比（Kwon et al. SOSP'23 §4）", "The analogy (Kwon et al. SOSP'23 §4)"))


def limits_table() -> Table:
    return Table([t("类比在哪里不成立", "Where the analogy stops")], [[t(*limit)] for limit in LIMITS])


def address_rows(block_table: list[int], positions: list[int], block_size: int) -> list[list[int]]:
    """[position, logical block, offset, physical block, slot] for each position (the translation)."""
    rows = []
    for p in positions:
        logical, offset = divmod(p, block_size)
        physical = block_table[logical]
        rows.append([p, logical, offset, physical, physical * block_size + offset])
    return rows


def address_table(block_table: list[int], positions: list[int], block_size: int) -> Table:
    return Table([t("位置 p", "position p"), "p // B", "p % B", t("物理块 block_table[p // B]", "physical block"),
                  t("槽位 slot", "slot")], address_rows(block_table, positions, block_size),
                 caption=t(f"地址翻译：block_table = {block_table}，B = {block_size}",
                           f"Address translation: block_table = {block_table}, B = {block_size}"))
