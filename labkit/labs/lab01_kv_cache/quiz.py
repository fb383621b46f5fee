"""Lab 01 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed from the formula and the cited shapes here, never typed in, so a
question and the lab's own numbers cannot drift apart. Text is ``{"zh": ..., "en": ...}`` (``_t``)
so a quiz on screen follows ``labkit.set_language``.
"""

from __future__ import annotations

from labkit.assess import MultipleChoice, Numeric, Quiz
from labkit.labs.lab01_kv_cache.measure import KVShape

LLAMA3_8B = KVShape("Llama-3-8B", 32, 8, 128, 2)       # config.json: 32 layers, 8 KV heads, head_dim 128
OPT_13B = KVShape("OPT-13B", 40, 40, 128, 2)           # Kwon et al. SOSP'23 §3
PAPER_KV_GIB = 12                                       # Kwon et al. Table 1: 12 GB for KV on one A100-40GB


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def _what_is_cached() -> MultipleChoice:
    return MultipleChoice(
        question=_t("KV 缓存（KV cache）里存的是什么？", "What does the KV cache hold?"),
        options=[_t("每一层、每个 KV 头上，每个已处理 token 的键（K）和值（V）向量",
                    "The K and V vectors of every processed token, in every layer and KV head"),
                 _t("每个已处理 token 的查询（Q）向量", "The query (Q) vector of every processed token"),
                 _t("上一步的注意力权重矩阵", "Last step's attention weight matrix"),
                 _t("最后一层输出的 logits", "The logits of the last layer")],
        answer=0,
        explanations=[
            _t("对：每层注意力都要读历史 token 的 K 和 V；它们算出来后不再变，所以可以存下复用。",
               "Right: every layer's attention reads the history's K and V; they never change once computed."),
            _t("Q 只在本 token 做查询时用一次，之后的 token 不再需要它，所以不缓存。",
               "Q is used once, by its own token's query; later tokens never need it, so it is not cached."),
            _t("注意力权重依赖当前的查询，每步都不同，存了也没法复用。",
               "Attention weights depend on the current query and change every step; nothing to reuse."),
            _t("logits 只用来选下一个 token，与后续 token 的注意力计算无关。",
               "Logits only pick the next token; later attention does not use them.")])


def _why_reusable() -> MultipleChoice:
    return MultipleChoice(
        question=_t("为什么解码（decode）时可以复用历史 token 的 K/V，而不必重算？",
                    "Why can decode reuse the history's K/V instead of recomputing it?"),
        options=[_t("因果注意力下，第 i 个 token 的 K/V 只依赖第 0..i 个 token，后来的 token 不会改变它",
                    "With causal attention, token i's K/V depend only on tokens 0..i; later tokens never change them"),
                 _t("因为模型权重在解码时被冻结", "Because the weights are frozen during decode"),
                 _t("因为 K/V 是近似值，重算也不会更准", "Because K/V are approximations; recomputing would not help")],
        answer=0,
        explanations=[
            _t("对：这正是缓存成立的前提（第 1 节比较了两种方式的贪心输出是否逐 token 相同）。",
               "Right: that is what makes caching exact (section 1 compares both ways' greedy outputs)."),
            _t("推理时权重本来就不变，但仅此不够：若后面的 token 会影响前面的 K/V（双向注意力），缓存就失效了。",
               "Weights never change at inference, but that is not enough: with bidirectional attention, later "
               "tokens would change earlier K/V."),
            _t("缓存是精确的，不是近似；重算得到的是同样的值。",
               "The cache is exact, not an approximation; recomputing gives the same values.")])


def _quadratic() -> MultipleChoice:
    return MultipleChoice(
        question=_t("不用 KV 缓存、每步把整个序列重新过一遍模型，从短提示生成 N 个 token，模型处理的 token 总数大约按什么增长？",
                    "Without a KV cache (re-running the whole sequence each step), how does the total number of "
                    "tokens processed grow when generating N tokens from a short prompt?"),
        options=["N", "N log N", "N²", "2^N"],
        answer=2,
        explanations=[
            _t("这是有缓存时的情形：每个新 token 只处理它自己。", "That is the cached case: each new token processes itself."),
            _t("没有这样的结构；第 n 步要处理 n 个 token。", "No such structure; step n processes n tokens."),
            _t("对：1 + 2 + … + N ≈ N²/2，平方增长（见本实验的累计图）。",
               "Right: 1 + 2 + … + N ≈ N²/2, quadratic (see the running-total figure)."),
            _t("增长没有那么快：每步只多处理一个 token。", "Not that fast: each step processes one more token.")])


def _llama3_bytes() -> Numeric:
    s = LLAMA3_8B
    return Numeric(
        question=_t(f"Llama-3-8B：{s.num_layers} 层、{s.num_kv_heads} 个 KV 头（GQA）、head_dim {s.head_dim}、"
                    "bf16（2 字节）。每个 token 的 KV 缓存是多少字节？",
                    f"Llama-3-8B: {s.num_layers} layers, {s.num_kv_heads} KV heads (GQA), head_dim {s.head_dim}, "
                    "bf16 (2 bytes). KV cache bytes per token?"),
        answer=s.bytes_per_token, unit=_t("字节", "bytes"),
        hint=_t("2（K 和 V）× 层数 × KV 头数 × head_dim × 每个数的字节数。",
                "2 (K and V) × layers × KV heads × head_dim × bytes per number."),
        explanation=_t(f"{s.formula()} = {s.bytes_per_token // 1024} KiB。",
                       f"{s.formula()} = {s.bytes_per_token // 1024} KiB."))


def _gqa_saving() -> Numeric:
    return Numeric(
        question=_t("SmolLM2-135M 有 9 个查询头、3 个 KV 头（分组查询注意力，GQA）。和每个查询头都有自己 K/V 的"
                    "多头注意力（MHA）相比，它的 KV 缓存小几倍？",
                    "SmolLM2-135M has 9 query heads and 3 KV heads (grouped-query attention, GQA). How many times "
                    "smaller is its KV cache than with one K/V per query head (MHA)?"),
        answer=3, tol=0.01, unit=_t("倍", "×"),
        hint=_t("KV 缓存与 KV 头数成正比，与查询头数无关。", "KV bytes scale with the number of KV heads, not query heads."),
        explanation=_t("9 / 3 = 3 倍。Llama-3-8B 是 32 / 8 = 4 倍。", "9 / 3 = 3×. Llama-3-8B: 32 / 8 = 4×."))


def _paper_slots() -> Numeric:
    slots = PAPER_KV_GIB * 2**30 / OPT_13B.bytes_per_token
    return Numeric(
        question=_t(f"vLLM 论文（Kwon et al. SOSP'23，表 1）：一块 A100-40GB 上，13B 模型留给 KV 缓存 {PAPER_KV_GIB} GB。"
                    f"按 OPT-13B 每 token {OPT_13B.bytes_per_token:,} 字节，最多能存多少个 token 的 KV？（单位：千个 token）",
                    f"vLLM paper (Kwon et al. SOSP'23, Table 1): on one A100-40GB a 13B model has {PAPER_KV_GIB} GB "
                    f"for the KV cache. At {OPT_13B.bytes_per_token:,} bytes per OPT-13B token, how many tokens fit? "
                    "(thousands)"),
        answer=round(slots / 1000, 1), rel_tol=0.08, unit=_t("千 token", "thousand tokens"),
        hint=_t("显存字节数 ÷ 每 token 字节数。论文把 GB 按 2^30 字节算。",
                "Memory bytes ÷ bytes per token. The paper counts a GB as 2^30 bytes."),
        explanation=_t(f"12 × 2^30 ÷ 819,200 ≈ {slots:,.0f}，论文表 1 写 15.7K。按 12 × 10^9 算约 14.6K，也算对。",
                       f"12 × 2^30 ÷ 819,200 ≈ {slots:,.0f}; the paper's Table 1 says 15.7K. With 12 × 10^9 you get "
                       "about 14.6K, also accepted."))


def _request_gb() -> Numeric:
    total = 2048 * OPT_13B.bytes_per_token
    return Numeric(
        question=_t("一个 2048 token 的 OPT-13B（fp16）请求，KV 缓存约多少 GB？",
                    "How many GB of KV cache does one 2048-token OPT-13B (fp16) request hold?"),
        answer=round(total / 1e9, 2), rel_tol=0.08, unit="GB",
        hint=_t("2048 × 每 token 字节数（2 × 40 × 40 × 128 × 2）。", "2048 × bytes per token (2 × 40 × 40 × 128 × 2)."),
        explanation=_t(f"2048 × 819,200 = {total:,} 字节 ≈ {total / 1e9:.2f} GB（{total / 2**30:.2f} GiB）；"
                       "vLLM 论文 §3 写作约 1.6 GB。",
                       f"2048 × 819,200 = {total:,} bytes ≈ {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB); "
                       "the vLLM paper (§3) says about 1.6 GB."))


def _internal() -> MultipleChoice:
    return MultipleChoice(
        question=_t("连续布局按 max_model_len = 2048 为每个请求预留。一个请求最终只用了 300 个槽位。"
                    "剩下的 1748 个槽位属于哪种浪费？",
                    "A contiguous layout reserves max_model_len = 2048 slots per request. A request ends up using "
                    "300. What kind of waste are the other 1748 slots?"),
        options=[_t("内部碎片（internal fragmentation）", "internal fragmentation"),
                 _t("外部碎片（external fragmentation）", "external fragmentation"),
                 _t("预留待用（reserved for later）", "reserved for later"),
                 _t("不算浪费：请求结束后会归还", "no waste: they are returned when the request ends")],
        answer=0,
        explanations=[
            _t("对：预留了却永远不会被这个请求填上的槽位，是预留区内部的浪费。",
               "Right: reserved slots the request never fills are waste inside its region."),
            _t("外部碎片在预留区之间：空闲槽位总数够，但没有一段连续空洞放得下下一个请求。",
               "External fragmentation lies between regions: enough free in total, no hole long enough."),
            _t("“预留待用”指请求之后还会填上的槽位；这 1748 个永远不会被填。",
               "'Reserved for later' are slots the request will still fill; these 1748 never are."),
            _t("请求运行期间它们一直被占着，别的请求用不了——这就是浪费。",
               "While the request runs nobody else can use them; that is the waste.")])


def _external() -> MultipleChoice:
    return MultipleChoice(
        question=_t("下面哪种情况是外部碎片（external fragmentation）？", "Which situation is external fragmentation?"),
        options=[_t("空闲槽位共 3000 个，但分散成几个小于 2048 的空洞，一个需要 2048 个连续槽位的请求只能等待",
                    "3000 slots are free, in holes all shorter than 2048, so a request needing 2048 contiguous "
                    "slots waits"),
                 _t("一个请求预留了 2048 个槽位，只用了 500 个", "A request reserved 2048 slots and used 500"),
                 _t("分页布局里最后一个块只填了 3/16", "In a paged layout the last block is 3/16 full")],
        answer=0,
        explanations=[
            _t("对：总量够，但没有一段连续的够长。", "Right: enough in total, no single run long enough."),
            _t("这是内部碎片（预留区之内）。", "That is internal fragmentation (inside the region)."),
            _t("这是分页布局唯一的浪费：最后一块的未填部分，属于内部浪费，最多 block_size − 1 个槽位。",
               "That is paged KV's only waste: the unfilled tail of the last block, at most block_size − 1 slots.")])


def _not_disposable() -> MultipleChoice:
    return MultipleChoice(
        question=_t("显存不够时，调度器抢占（preempt）一个正在生成的请求，释放它的 KV 块。之后会怎样？",
                    "Short of memory, the scheduler preempts a running request and frees its KV blocks. What next?"),
        options=[_t("它重新排队；再被调度时，要把提示和已生成的 token 全部重新预填充一遍，输出不变",
                    "It queues again; when rescheduled its prompt and generated tokens are all prefilled again; "
                    "the output is unchanged"),
                 _t("像 CPU 缓存未命中一样，只需从内存重新读回，几乎没有代价",
                    "Like a CPU cache miss: reload from memory, nearly free"),
                 _t("已生成的 token 丢失，请求从头重新生成，输出可能不同",
                    "The generated tokens are lost; the request starts over and may produce a different output")],
        answer=0,
        explanations=[
            _t("对：KV 缓存不是别处数据的副本，丢了只能重算（本实验量出了多算的 token 数和时间）。",
               "Right: the KV cache is not a copy of data kept elsewhere; dropped, it must be recomputed "
               "(this lab measured the extra tokens and time)."),
            _t("这正是本实验要纠正的误解：K/V 没有别处可读，只能用模型重算。",
               "That is the misreading this lab measures: there is nowhere to reload K/V from."),
            _t("已生成的 token 被保留（vLLM 的 recompute 抢占），贪心输出与不抢占时逐 token 相同。",
               "Generated tokens are kept (vLLM's recompute preemption); greedy output matches the run "
               "without preemption.")])


def questions() -> list:
    return [_what_is_cached(), _why_reusable(), _quadratic(), _llama3_bytes(), _gqa_saving(), _paper_slots(),
            _request_gb(), _internal(), _external(), _not_disposable()]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：KV 缓存与碎片", "Concept check: KV cache and fragmentation"))
