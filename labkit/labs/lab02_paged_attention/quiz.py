"""Lab 02 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the formulas the lab uses (``solutions.slot_mapping``,
``sharing.cacheable_tokens``), never typed in.
"""

from __future__ import annotations

from labkit.assess import MultipleChoice, Numeric, Quiz
from labkit.labs.lab02_paged_attention.sharing import cacheable_tokens
from labkit.labs.lab02_paged_attention.solutions import slot_mapping


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def _page_table() -> MultipleChoice:
    return MultipleChoice(
        question=_t("在 PagedAttention 里，和操作系统的页表（page table）对应的是什么？",
                    "In PagedAttention, what plays the role of the OS page table?"),
        options=[_t("每个请求的块表（block table）：逻辑块号 → 物理块号", "Each request's block table: logical → physical block"),
                 _t("KV 池本身", "The KV pool itself"),
                 _t("前缀缓存的哈希表", "The prefix cache's hash table"),
                 _t("调度器的等待队列", "The scheduler's waiting queue")],
        answer=0,
        explanations=[_t("对：请求看到的是连续的位置（虚拟地址），块表把第 p // B 个逻辑块翻译成物理块。",
                         "Right: a request sees contiguous positions (virtual addresses); its table translates logical block p // B."),
                      _t("KV 池对应物理内存（页框的集合），不是页表。", "The pool is physical memory (the frames), not the table."),
                      _t("前缀缓存把内容映射到块（用于共享），不是地址翻译。", "The prefix cache maps content to blocks (for sharing), not addresses."),
                      _t("等待队列决定谁先运行，与地址翻译无关。", "The waiting queue orders requests; it translates nothing.")])


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


def _no_fault() -> MultipleChoice:
    return MultipleChoice(
        question=_t("请求的最后一个块写满了，下一个 token 要写到哪里？谁来安排？",
                    "A request's last block is full. Where does the next token go, and who arranges it?"),
        options=[_t("调度器在这一步开始前为它分配一个新块（计划好的，不是陷入）", "The scheduler allocates a new block before the step runs (planned, not trapped)"),
                 _t("注意力内核写越界时触发缺页中断，由操作系统分配", "The attention kernel faults on the write and the OS allocates"),
                 _t("请求在预留区里继续写", "The request keeps writing into its reservation"),
                 _t("这个请求必须被抢占", "The request must be preempted")],
        answer=0,
        explanations=[_t("对：这就是“按需调页”，但由调度器在运行前计划（KVCacheManager.allocate_slots）。",
                         "Right: demand paging, planned by the scheduler before the step (KVCacheManager.allocate_slots)."),
                      _t("类比在这里不成立：没有硬件陷入，也没有 TLB。", "The analogy stops here: no hardware trap, no TLB."),
                      _t("分页布局不预留；预留是连续布局的做法。", "Paged KV reserves nothing ahead; reservation is the contiguous layout."),
                      _t("只有池里没有空闲块时才会抢占。", "Only when the pool has no free block is anything preempted.")])


def _max_waste() -> Numeric:
    return Numeric(
        question=_t("块大小 16 时，分页布局里一个请求最多浪费多少个 token 槽位？", "With block size 16, how many token slots can one request waste at most under paged KV?"),
        answer=16 - 1, tol=0, unit=_t("个槽位", "slots"),
        hint=_t("只有最后一个块可能没填满。", "Only the last block can be partly empty."),
        explanation=_t("最后一块至少有 1 个 token，所以最多空 B − 1 = 15 个；本实验测得的最大尾部也不超过它。",
                       "The last block holds at least one token, so at most B − 1 = 15 are empty; the lab's measured "
                       "largest tail never exceeds it."))


def _what_removed() -> MultipleChoice:
    return MultipleChoice(
        question=_t("和按最大长度连续预留相比，分页布局消除了哪几种浪费？", "Compared with max-length contiguous reservation, which waste does paging remove?"),
        options=[_t("预留待用和外部碎片全部消除，内部碎片只剩最后一块的尾部", "Reserved-for-later and external fragmentation vanish; internal waste shrinks to the last block's tail"),
                 _t("只消除了外部碎片", "Only external fragmentation"),
                 _t("三种都完全消除，浪费为 0", "All three vanish; waste is exactly 0"),
                 _t("只是把浪费从 GPU 移到了 CPU", "It only moves the waste from GPU to CPU")],
        answer=0,
        explanations=[_t("对：按需分配就不必预留；块大小相同，任何空闲块都能用，就没有外部碎片。",
                         "Right: on-demand allocation reserves nothing; equal-size blocks make any free block usable."),
                      _t("按需分配也消除了预留，内部碎片也只剩最后一块的尾部。", "On-demand allocation also removes reservation, and shrinks internal waste."),
                      _t("最后一块的尾部仍然浪费（论文：vLLM 利用率 96.3%，不是 100%）。", "The last block's tail is still wasted (paper: 96.3 %, not 100 %)."),
                      _t("K/V 仍在同一个设备上；分页改变的是分配方式。", "K/V stay on the same device; paging changes how they are allocated.")])


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


def _chained_hash() -> MultipleChoice:
    return MultipleChoice(
        question=_t("前缀缓存里，为什么一个块的键要把父块的键串进去：hash((父块的键, 本块的 token))？",
                    "Why does a block's prefix-cache key chain its parent's key: hash((parent key, block tokens))?"),
        options=[_t("因为块里的 K/V 取决于它之前的所有 token；只有整个前缀相同，K/V 才相同", "A block's K/V depend on every earlier token; only an equal whole prefix gives equal K/V"),
                 _t("为了让哈希更难碰撞，和语义无关", "Only to make collisions rarer; no semantic reason"),
                 _t("为了让部分填满的块也能被缓存", "So that partly filled blocks can be cached too"),
                 _t("为了让不同请求的相同句子共享 K/V，不管前文", "So equal sentences share K/V whatever came before")],
        answer=0,
        explanations=[_t("对：注意力让每个位置的 K/V 依赖全部前文；链式键保证命中意味着整个前缀一致。",
                         "Right: attention makes each position's K/V depend on all earlier text; the chain makes a hit mean the whole prefix matches."),
                      _t("链式结构的主要目的是正确性：只比较本块内容会把不同前文下的块错当成相同。",
                         "It is about correctness: comparing the block alone would confuse blocks under different prefixes."),
                      _t("只有满块才进缓存；部分填满的块还在写。", "Only full blocks are cached; a partial block is still being written."),
                      _t("这正是会出错的情况：前文不同，K/V 就不同。", "That would be wrong: a different prefix means different K/V.")])


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


def _block_size() -> MultipleChoice:
    return MultipleChoice(
        question=_t("把块大小从 16 调到 128，会怎样？", "What happens if the block size goes from 16 to 128?"),
        options=[_t("最后一块的浪费变大，前缀缓存能命中的整块变少；GPU 内核每块读得更顺", "More tail waste and fewer whole-block prefix hits; the GPU kernel reads each block more efficiently"),
                 _t("浪费变小，因为块更少", "Less waste, as there are fewer blocks"),
                 _t("没有任何影响", "Nothing changes"),
                 _t("前缀命中率变高", "The prefix hit rate rises")],
        answer=0,
        explanations=[_t("对：这就是论文选 16 的权衡（本实验第 6 节同一次运行里量了浪费、注意力时间和命中率）。",
                         "Right: the trade-off behind the paper's 16 (section 6 measured waste, attention time and hits in one run)."),
                      _t("块更少，但每块的尾部更大：每个请求最多浪费 B − 1 个槽位。", "Fewer blocks, but each tail is bigger: up to B − 1 slots per request."),
                      _t("第 6 节的表给出了变化。", "Section 6's table shows the change."),
                      _t("只有满块才能命中；块越大，一段共享前缀里满块越少（前缀短于 B 时为 0）。",
                         "Only full blocks hit; larger blocks leave fewer full ones in a shared prefix (none if it is shorter than B).")])


def _preemption() -> MultipleChoice:
    return MultipleChoice(
        question=_t("池里没有空闲块时，vLLM 怎么办？本实验的引擎呢？", "With no free block left, what does vLLM do? And this lab's engine?"),
        options=[_t("vLLM 抢占请求：换出到 CPU 内存或丢弃后重算；本引擎丢弃后重算", "vLLM preempts: swap to CPU memory, or drop and recompute; this engine drops and recomputes"),
                 _t("两者都让请求失败", "Both fail the request"),
                 _t("两者都把 KV 写到磁盘", "Both write KV to disk"),
                 _t("两者都等待，直到有块被释放，不抢占", "Both wait for a free block, preempting nothing")],
        answer=0,
        explanations=[_t("对：这是类比里的“换出”（swapping）；论文 §4.5 比较了两种恢复方式。",
                         "Right: the analogy's swapping; the paper's §4.5 compares both recovery methods."),
                      _t("请求不会失败，只是晚一点完成。", "Requests do not fail; they finish later."),
                      _t("论文的换出目标是 CPU 内存，不是磁盘。", "The paper swaps to CPU memory, not disk."),
                      _t("所有运行中的请求都在等块时会死锁，所以必须抢占一个。", "If every running request waited for a block they would deadlock; one must be preempted.")])


def _indirection() -> MultipleChoice:
    return MultipleChoice(
        question=_t("分页注意力比读连续 K/V 的注意力慢，代价从哪里来？", "Paged attention is slower than attention over contiguous K/V. Where does the cost come from?"),
        options=[_t("每个位置先查块表算槽位，再从分散的块里收集 K/V", "Each position is translated through the block table and K/V are gathered from scattered blocks"),
                 _t("分页布局要算更多的浮点运算", "Paging does more floating-point work"),
                 _t("分页的输出不同，需要额外修正", "Paged output differs and needs correcting"),
                 _t("没有代价", "There is no cost")],
        answer=0,
        explanations=[_t("对：论文的 CUDA 内核慢 20–26%；本实验的 CPU 路径把 K/V 先复制出来，代价更大（第 7 节）。",
                         "Right: the paper's CUDA kernel is 20–26 % slower; our CPU path copies K/V out first and pays more (section 7)."),
                      _t("注意力本身的运算量一样，多出来的是寻址和搬数据。", "The attention arithmetic is the same; the extra is addressing and moving data."),
                      _t("输出相同（第 7、8 节都检查了）。", "The output is the same (sections 7 and 8 check it)."),
                      _t("第 7 节量出了代价。", "Section 7 measured it.")])


def questions() -> list:
    return [_page_table(), _slot(), _no_fault(), _max_waste(), _what_removed(), _prefix_tokens(), _chained_hash(),
            _fork_blocks(), _block_size(), _preemption(), _indirection()]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：PagedAttention", "Concept check: PagedAttention"))
