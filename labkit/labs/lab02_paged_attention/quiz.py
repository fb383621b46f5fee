"""Lab 02 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the formulas the lab uses (``solutions.slot_mapping``,
``sharing.cacheable_tokens``), never typed in.
"""

from __future__ import annotations

from labkit.assess import Numeric, Quiz, WhichFigure
from labkit.assess.bank import Row, render
from labkit.labs.lab02_paged_attention.sharing import cacheable_tokens
from labkit.labs.lab02_paged_attention.solutions import slot_mapping


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


ROWS = [
    Row("pa-page-table", ("在 PagedAttention 里，和操作系统的页表（page table）对应的是什么？",
                          "In PagedAttention, what plays the role of the OS page table?"), [
        ("每个请求的块表（block table）：逻辑块号 → 物理块号", "Each request's block table: logical → physical block",
         "对：请求看到的是连续的位置（虚拟地址），块表把第 p // B 个逻辑块翻译成物理块。",
         "Right: a request sees contiguous positions (virtual addresses); its table translates logical block p // B.", ""),
        ("KV 池本身：所有物理块按编号排成的一整块显存，块号就是地址",
         "The KV pool itself: all physical blocks laid out by number in one buffer, the number being the address",
         "KV 池对应物理内存（页框的集合），不是页表；翻译要靠每个请求自己的表。",
         "The pool is physical memory (the frames), not the table; translation needs each request's own table.",
         "the pool is the page table"),
        ("前缀缓存的哈希表：从 token 内容查到存放它们 K/V 的物理块",
         "The prefix cache's hash table: from token content to the physical block holding their K/V",
         "前缀缓存把内容映射到块（用于共享），不做位置到槽位的地址翻译。",
         "The prefix cache maps content to blocks (for sharing); it does not translate positions to slots.",
         "content lookup is address translation"),
        ("调度器的等待队列", "The scheduler's waiting queue",
         "等待队列决定谁先运行，与地址翻译无关。", "The waiting queue orders requests; it translates nothing.",
         "scheduling order is paging")]),
    Row("pa-no-fault", ("请求的最后一个块写满了，下一个 token 要写到哪里？谁来安排？",
                        "A request's last block is full. Where does the next token go, and who arranges it?"), [
        ("调度器在这一步开始前给它分配一个新块：事先计划，不是陷入",
         "The scheduler gives it a new block before the step runs: planned, not trapped",
         "对：这就是“按需调页”，但由调度器在运行前计划（KVCacheManager.allocate_slots）。",
         "Right: demand paging, planned by the scheduler before the step (KVCacheManager.allocate_slots).", ""),
        ("注意力内核写到块外时触发缺页中断，由操作系统（或驱动）分配一个新页",
         "The attention kernel writes past the block, a page fault fires, and the OS (or driver) maps a new page",
         "类比在这里不成立：没有硬件陷入，也没有 TLB；内核只写调度器给的槽位。",
         "The analogy stops here: no hardware trap and no TLB; the kernel writes only the slots it was given.",
         "paging is driven by hardware faults"),
        ("它接着写进自己预先预留好的那段连续区域，直到 max_model_len",
         "It keeps writing into the contiguous region it reserved up front, up to max_model_len",
         "分页布局不预留；预留是连续布局的做法。", "Paged KV reserves nothing ahead; reservation is the contiguous layout.",
         "paged KV still reserves"),
        ("这个请求必须先被抢占，等它的块全部释放后再重新分配更大的一段",
         "The request must be preempted first and get a larger run once all its blocks are freed",
         "只有池里没有空闲块时才会抢占；块不必连续，所以不用“更大的一段”。",
         "Only when the pool has no free block is anything preempted; blocks need not be contiguous.",
         "growing needs a contiguous reallocation")]),
    Row("pa-what-removed", ("和按最大长度连续预留相比，分页布局消除了哪几种浪费？",
                            "Compared with max-length contiguous reservation, which waste does paging remove?"), [
        ("预留待用和外部碎片都没了，内部浪费只剩最后一块的尾部",
         "Reserved-for-later and external waste vanish; internal waste is only the last block's tail",
         "对：按需分配就不必预留；块大小相同，任何空闲块都能用，就没有外部碎片。",
         "Right: on-demand allocation reserves nothing; equal-size blocks make any free block usable.", ""),
        ("只消除了外部碎片；预留和内部碎片照旧，只是被切成了块",
         "Only external fragmentation; reservation and internal waste remain, just cut into blocks",
         "按需分配也消除了预留，内部碎片也只剩最后一块的尾部。",
         "On-demand allocation also removes reservation and shrinks internal waste to the last block.",
         "paging only fixes external fragmentation"),
        ("三种浪费全部消除，每个槽位都存着 K/V，利用率正好 100%",
         "All three vanish: every slot holds K/V and utilisation is exactly 100 %",
         "最后一块的尾部仍然浪费（论文：vLLM 利用率 96.3%，不是 100%）。",
         "The last block's tail is still wasted (paper: 96.3 %, not 100 %).",
         "paging wastes nothing"),
        ("分页让注意力读得更快，所以同样的显存里吞吐更高，浪费本身不变",
         "Paging makes attention read faster, so throughput rises in the same memory; the waste is unchanged",
         "不对：分页是内存管理，注意力反而多了一步按块表寻址、从分散的块里取数据（论文的 CUDA 内核因此慢 20–26%；"
         "本机量出的结果见第 7 节）；吞吐变高是因为浪费少了、同时能放下更多请求。",
         "No: paging manages memory; attention gains a step, looking up the block table and reading scattered blocks (the "
         "paper's CUDA kernel is 20–26 % slower for it; section 7 shows what this CPU measured); throughput rises because "
         "less waste fits more requests at once.",
         "paging speeds up attention")]),
    Row("pa-chained-hash", ("前缀缓存里，为什么一个块的键要把父块的键串进去：hash((父块的键, 本块的 token))？",
                            "Why does a block's prefix-cache key chain its parent's key: hash((parent key, block tokens))?"), [
        ("块里的 K/V 取决于它之前的所有 token；只有整个前缀相同，K/V 才相同",
         "A block's K/V depend on every earlier token; only an equal whole prefix gives equal K/V",
         "对：注意力让每个位置的 K/V 依赖全部前文；链式键保证命中意味着整个前缀一致。",
         "Right: attention makes each position's K/V depend on all earlier text; the chain makes a hit mean the whole "
         "prefix matches.", ""),
        ("只是为了让哈希更难碰撞；只比较本块的 token 在语义上其实也完全正确",
         "Only to make hash collisions rarer; comparing the block's own tokens alone would be just as correct",
         "链式结构的主要目的是正确性：只比较本块内容会把不同前文下的块错当成相同。",
         "It is about correctness: comparing the block alone would confuse blocks under different prefixes.",
         "chaining is only about collisions"),
        ("为了让还没填满的最后一块也能进入缓存，被下一个请求直接复用",
         "So that the partly filled last block can enter the cache and be reused by the next request",
         "只有满块才进缓存；部分填满的块还在写。", "Only full blocks are cached; a partial block is still being written.",
         "partial blocks are cached"),
        ("为了让不同请求里出现的相同句子共享同一份 K/V，不管它前面是什么",
         "So that an equal sentence in different requests shares one copy of K/V, whatever came before it",
         "这正是会出错的情况：前文不同，K/V 就不同。", "That would be wrong: a different prefix means different K/V.",
         "K/V depend only on the block's own tokens")]),
    Row("pa-block-size", ("把块大小从 16 调到 128，会怎样？", "What happens if the block size goes from 16 to 128?"), [
        ("尾部浪费变大、能命中的整块变少；内核每块读得更顺",
         "More tail waste, fewer whole-block hits; the kernel reads each block more smoothly",
         "对：这就是论文选 16 的权衡（本实验第 6 节同一次运行里量了浪费、注意力时间和命中率）。",
         "Right: the trade-off behind the paper's 16 (section 6 measured waste, attention time and hits in one run).", ""),
        ("浪费变小：块数少了八倍，块表和每块的记账开销也随之减少",
         "Less waste: eight times fewer blocks, so less block-table and per-block bookkeeping",
         "块更少，但每块的尾部更大：每个请求最多浪费 B − 1 个槽位。",
         "Fewer blocks, but each tail is bigger: up to B − 1 slots per request.",
         "fewer blocks means less waste"),
        ("前缀命中率变高：一个块装的 token 多了，一次命中就省下更多计算",
         "The prefix hit rate rises: each block holds more tokens, so one hit saves more compute",
         "只有满块才能命中；块越大，一段共享前缀里满块越少（前缀短于 B 时为 0）。",
         "Only full blocks hit; larger blocks leave fewer full ones in a shared prefix (none if it is shorter than B).",
         "bigger blocks hit more"),
        ("没有可测的影响", "No measurable effect",
         "第 6 节的表给出了变化：浪费、命中和注意力时间都随块大小而变。",
         "Section 6's table shows the change: waste, hits and attention time all move with the block size.",
         "block size is a free parameter")]),
    Row("pa-preemption", ("池里没有空闲块时，vLLM 怎么办？本实验的引擎呢？",
                          "With no free block left, what does vLLM do? And this lab's engine?"), [
        ("抢占请求：论文和 V0 可换出到 CPU 或重算，V1 与本引擎只丢弃后重算",
         "Preempt: the paper and V0 swap to CPU or recompute; V1 and this engine only recompute",
         "对：论文 §4.5 比较了换出（swapping）与重算两种恢复方式；vLLM V1 只保留了重算，本引擎也一样。",
         "Right: the paper's §4.5 compares swapping and recomputation; vLLM V1 kept only recomputation, "
         "and so does this engine.", ""),
        ("两者都让新来的请求直接失败并返回错误，运行中的请求不受任何影响",
         "Both fail newly arriving requests with an error; running requests are not touched at all",
         "请求不会失败，只是晚一点完成；而且运行中的请求自己也在要新块。",
         "Requests do not fail; they finish later; and running requests themselves need new blocks.",
         "out of blocks means errors"),
        ("两者都像操作系统一样把最久没用的 KV 块写到磁盘的交换分区里",
         "Both write the least recently used KV blocks to a swap partition on disk, as an OS would",
         "论文的换出目标是 CPU 内存，不是磁盘；而且按请求整体换出，不是按块做 LRU。",
         "The paper swaps to CPU memory, not disk, and whole requests at a time, not LRU blocks.",
         "the analogy holds all the way to disk swap"),
        ("两者都让所有请求原地等待，直到某个请求结束释放出块，从不抢占",
         "Both make every request wait in place until one finishes and frees blocks, never preempting",
         "所有运行中的请求都在等块时会死锁，所以必须抢占一个。",
         "If every running request waited for a block they would deadlock; one must be preempted.",
         "waiting is always safe")]),
    Row("pa-indirection", ("和读连续 K/V 的注意力相比，分页注意力多做了什么？它可能付出的代价从哪里来？",
                           "Compared with attention over contiguous K/V, what extra does paged attention do? Where does "
                           "any cost it pays come from?"), [
        ("每个位置先查块表算出槽位，再从分散的块里收集 K/V",
         "Each position is looked up in the block table and K/V are gathered from scattered blocks",
         "对：论文的 CUDA 内核比 FasterTransformer 慢 20–26%（图 18a）；这台机器上是否更慢、慢多少，看第 7 节同一内核两边对比的测量——"
         "它可能在论文的范围之内，也可能在外，甚至测不出差别，取决于内核和机器。",
         "Right: the paper's CUDA kernel is 20–26 % slower than FasterTransformer's (Fig. 18a); whether and how much slower it "
         "is on this machine is section 7's measurement with the same kernel on both sides, inside or outside the paper's "
         "range or not measurably different, depending on kernel and machine.", ""),
        ("分页布局下注意力要多算浮点运算：每个块都要单独做一次 softmax 再合并",
         "Paging adds floating-point work: every block gets its own softmax, merged afterwards",
         "注意力本身的运算量一样，多出来的是寻址和搬数据。",
         "The attention arithmetic is the same; the extra is addressing and moving data.",
         "paging changes the arithmetic"),
        ("分页的输出略有不同，要再修正", "Paged output differs and needs a correction",
         "输出相同（第 7、8 节都检查了）。", "The output is the same (sections 7 and 8 check it).",
         "paging is approximate"),
        ("块表放在 CPU 上，每一步都要把整张表从主机拷贝到加速器上",
         "Block tables live on the CPU and are copied to the accelerator in full every step",
         "块表很小（每块一个整数），拷贝代价可以忽略；分页多做的是按块表寻址、收集分散的 K/V。",
         "Block tables are tiny (one integer per block); what paging adds is addressing through the table and gathering "
         "scattered K/V.",
         "the table copy is the cost")]),
]


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
    page_table, no_fault, what_removed, chained_hash, block_size, preemption, indirection = render(ROWS)
    return [page_table, _slot(), no_fault, _max_waste(), what_removed, _prefix_tokens(), chained_hash,
            _fork_blocks(), block_size, preemption, indirection]


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
