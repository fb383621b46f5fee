"""Lab 01 concept check: ten questions, every option explained (``labkit.assess``).

Multiple-choice questions are rows of data (``labkit.assess.bank``): each distractor names the
misconception it stands for.

Numeric answers are computed from the formula and the cited shapes here, never typed in, so a
question and the lab's own numbers cannot drift apart. Text is ``{"zh": ..., "en": ...}`` (``_t``)
so a quiz on screen follows ``labkit.set_language``.
"""

from __future__ import annotations

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import Row, on_own_result, render
from labkit.labs.lab01_kv_cache.measure import KVShape

LLAMA3_8B = KVShape("Llama-3-8B", 32, 8, 128, 2)       # config.json: 32 layers, 8 KV heads, head_dim 128
OPT_13B = KVShape("OPT-13B", 40, 40, 128, 2)           # Kwon et al. SOSP'23 §3
PAPER_KV_GIB = 12                                       # Kwon et al. Table 1: 12 GB for KV on one A100-40GB


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


ROWS = [
    Row("kv-what", ("KV 缓存（KV cache）里存的是什么？", "What does the KV cache hold?"), [
        ("每层每个 KV 头里，已处理 token 的键（K）和值（V）向量", "K and V vectors of processed tokens, per layer and KV head",
         "对：每层注意力都要读历史 token 的 K 和 V；它们算出来后不再变，所以可以存下复用。",
         "Right: every layer's attention reads the history's K and V; they never change once computed.", ""),
        ("每个已处理 token 的查询（Q）向量，以及它与历史 token 的注意力得分",
         "The query (Q) vector of every processed token, with its attention scores over the history",
         "Q 只在本 token 做查询时用一次，之后的 token 不再需要它；得分也随新查询而变，所以都不缓存。",
         "Q is used once, by its own token's query; scores change with every new query; neither is cached.",
         "Q and the scores are cached too"),
        ("上一步算出的注意力权重矩阵，下一步在它下面追加一行即可",
         "Last step's attention weight matrix, to which the next step appends one row",
         "注意力权重依赖当前的查询，每步都要对全部历史重新做 softmax，存了也没法复用。",
         "Attention weights depend on the current query and are re-normalised over the whole history each step.",
         "the attention matrix is reusable"),
        ("最后一层输出的隐藏状态，下一步从它接着算，跳过前面的各层",
         "The last layer's hidden states, so the next step can resume there and skip the earlier layers",
         "新 token 仍要走过每一层；每层都要读自己那层的历史 K/V，没有哪一层能跳过。",
         "A new token still passes through every layer, each reading its own layer's history K/V; none is skipped.",
         "the cache lets decode skip layers")]),
    Row("kv-why-reusable", ("为什么解码（decode）时可以复用历史 token 的 K/V，而不必重算？",
                            "Why can decode reuse the history's K/V instead of recomputing it?"), [
        ("因果注意力下，token i 的 K/V 只取决于 token 0..i，以后不会变",
         "With causal attention, token i's K/V depend on tokens 0..i only and never change later",
         "对：这正是缓存成立的前提（第 1 节比较了两种方式的贪心输出是否逐 token 相同）。",
         "Right: that is what makes caching exact (section 1 compares both ways' greedy outputs).", ""),
        ("推理时模型权重被冻结，所以前向过程中的任何中间结果都能原样复用",
         "Weights are frozen at inference, so any intermediate result of a forward pass can be reused as is",
         "权重不变还不够：若后面的 token 会影响前面的 K/V（双向注意力），缓存就失效了；而注意力输出这类中间结果每步都变。",
         "Frozen weights are not enough: with bidirectional attention later tokens would change earlier K/V, and "
         "results such as attention outputs change every step.",
         "frozen weights alone make caching valid"),
        ("K/V 本来就是近似值，重算也只会得到同样粗糙的结果，不如存下来",
         "K/V are approximations anyway; recomputing gives equally rough values, so keeping them is fine",
         "缓存是精确的，不是近似；重算得到的是同样的值（同一台机器、同样的数值路径）。",
         "The cache is exact, not an approximation; recomputing gives the same values.",
         "caching is an approximation"),
        ("后来的 token 会改动旧 token 的 K/V，但改动很小，忽略它几乎不影响输出",
         "Later tokens do change older tokens' K/V, but so little that ignoring it barely changes the output",
         "在因果注意力下后来的 token 根本不会改动旧的 K/V；缓存不丢任何精度。",
         "Under causal attention later tokens never change earlier K/V; caching loses nothing.",
         "the cache is a small-error shortcut")]),
    Row("kv-quadratic", ("不用 KV 缓存、每步把整个序列重新过一遍模型，从短提示生成 N 个 token，模型处理的 token 总数大约按什么增长？",
                         "Without a KV cache (re-running the whole sequence each step), how does the total number of "
                         "tokens processed grow when generating N tokens from a short prompt?"), [
        ("N", "N", "这是有缓存时的情形：每个新 token 只处理它自己。", "That is the cached case: each new token processes itself.",
         "recomputing costs what caching costs"),
        ("N log N", "N log N", "没有这样的结构；第 n 步要处理 n 个 token。", "No such structure; step n processes n tokens.",
         "only a little worse than linear"),
        ("N²", "N²", "对：1 + 2 + … + N ≈ N²/2，平方增长（见本实验的累计图）。",
         "Right: 1 + 2 + … + N ≈ N²/2, quadratic (see the running-total figure).", ""),
        ("2^N", "2^N", "增长没有那么快：每步只多处理一个 token。", "Not that fast: each step processes one more token.",
         "exponential blow-up")], answer=2, shuffle=False),
    Row("kv-internal", ("连续布局按 max_model_len = 2048 为每个请求预留。一个请求最终只用了 300 个槽位。"
                        "剩下的 1748 个槽位属于哪种浪费？",
                        "A contiguous layout reserves max_model_len = 2048 slots per request. A request ends up using "
                        "300. What kind of waste are the other 1748 slots?"), [
        ("内部碎片（internal fragmentation）", "internal fragmentation",
         "对：预留了却永远不会被这个请求填上的槽位，是预留区内部的浪费。",
         "Right: reserved slots the request never fills are waste inside its region.", ""),
        ("外部碎片（external fragmentation）", "external fragmentation",
         "外部碎片在预留区之间：空闲槽位总数够，但没有一段连续空洞放得下下一个请求。",
         "External fragmentation lies between regions: enough free in total, no hole long enough.",
         "any unused slot is external fragmentation"),
        ("预留待用（reserved for later）", "reserved for later",
         "“预留待用”指请求之后还会填上的槽位；这 1748 个永远不会被填。",
         "'Reserved for later' are slots the request will still fill; these 1748 never are.",
         "all reserved slots are 'reserved for later'"),
        ("不算浪费：请求一结束，这些槽位就还给池子了", "no waste: the slots go back to the pool when the request ends",
         "请求运行期间它们一直被占着，别的请求用不了——这就是浪费。",
         "While the request runs nobody else can use them; that is the waste.",
         "returned eventually means never wasted")]),
    Row("kv-external", ("下面哪种情况是外部碎片（external fragmentation）？", "Which situation is external fragmentation?"), [
        ("空闲共 3000 个槽位，却分成几个都短于 2048 的空洞，要 2048 个连续槽位的请求只能等",
         "3000 slots are free, in holes all shorter than 2048, so a request needing 2048 in a row waits",
         "对：总量够，但没有一段连续的够长。", "Right: enough in total, no single run long enough.", ""),
        ("一个请求预留了 2048 个槽位，最后只用了 500 个，其余 1548 个在它的预留区里一直空着",
         "A request reserved 2048 slots and used 500; the other 1548 stay empty inside its reservation throughout",
         "这是内部碎片（预留区之内）。", "That is internal fragmentation (inside the region).",
         "internal and external fragmentation are the same"),
        ("分页布局里一个请求的最后一个块只填了 3/16，剩下的 13 个槽位别的请求也用不了",
         "In a paged layout a request's last block is 3/16 full, and no other request can use its 13 empty slots",
         "这是分页布局唯一的浪费：最后一块的未填部分，属于内部浪费，最多 block_size − 1 个槽位。",
         "That is paged KV's only waste: the unfilled tail of the last block, at most block_size − 1 slots.",
         "paging has external fragmentation"),
        ("池里空闲槽位的总数已不足 2048 个，新请求只能排队，等别的请求结束再分配",
         "Fewer than 2048 slots are free in total, so the new request queues until others finish",
         "总量就不够，是容量不足，不是碎片：整理空洞也腾不出 2048 个。",
         "That is a plain shortage, not fragmentation: compacting the holes would not make 2048.",
         "any shortage is fragmentation")]),
    Row("kv-not-disposable", ("显存不够时，调度器抢占（preempt）一个正在生成的请求，释放它的 KV 块。之后会怎样？",
                              "Short of memory, the scheduler preempts a running request and frees its KV blocks. What next?"), [
        ("它重新排队；再调度时，提示和已生成的 token 全部重新预填充，输出不变",
         "It queues again; when rescheduled, its prompt and generated tokens are prefilled again; output unchanged",
         "对：KV 缓存不是别处数据的副本，丢了只能重算（第 5 节数出了多算的 token）。",
         "Right: the KV cache is not a copy of data kept elsewhere; dropped, it must be recomputed "
         "(section 5 counts the extra tokens).", ""),
        ("像 CPU 缓存未命中一样：下次用到时从主存把它的 K/V 重新读回来，几乎没有代价",
         "Like a CPU cache miss: the next use reads its K/V back from main memory, at almost no cost",
         "这正是本实验要纠正的误解：K/V 没有别处可读，只能用模型重算。",
         "That is the misreading this lab measures: there is nowhere to reload K/V from.",
         "the KV cache is a disposable copy"),
        ("已生成的 token 随 K/V 一起丢掉，请求从头重新生成，采样时输出可能与之前不同",
         "Its generated tokens are lost with the K/V; the request starts over and, when sampling, may differ",
         "已生成的 token 被保留（vLLM 的 recompute 抢占），贪心输出与不抢占时逐 token 相同。",
         "Generated tokens are kept (vLLM's recompute preemption); greedy output matches the run without preemption.",
         "preemption restarts the request"),
        ("它的 K/V 被原样换出到 CPU 内存，有空闲块时再换回来，不需要任何重算",
         "Its K/V are swapped out to CPU memory as they are and swapped back when blocks free up, no recompute",
         "题目说块被释放：本引擎（和 vLLM V1）用重算策略，K/V 被丢弃；换出是另一种策略，要额外的 CPU 内存和拷贝。",
         "The blocks are freed: this engine (like vLLM V1) recomputes and drops the K/V; swapping is another policy "
         "that needs CPU memory and copies.",
         "preemption always swaps")]),
]


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


def _own_request_mib(bytes_per_token: float) -> Numeric:
    """On the learner's own measurement (section 3's prediction, measured from the engine's tensors)."""
    tokens = 2048
    mib = bytes_per_token * tokens / 2**20
    return Numeric(
        question=_t(f"你这次运行从引擎的真实张量量出：SmolLM2-135M 每个 token 的 KV 缓存是 {bytes_per_token:,.0f} 字节。"
                    f"一个 {tokens} token 的请求要多少 MiB？",
                    f"Your run measured from the engine's tensors: {bytes_per_token:,.0f} KV bytes per SmolLM2-135M "
                    f"token. How many MiB does a {tokens}-token request hold?"),
        answer=round(mib, 2), rel_tol=0.02, unit="MiB", id="kv-own-request-mib",
        hint=_t("token 数 × 每 token 字节数，再除以 2^20。", "tokens × bytes per token, divided by 2^20."),
        explanation=_t(f"{tokens} × {bytes_per_token:,.0f} ÷ 2^20 ≈ {mib:.2f} MiB。",
                       f"{tokens} × {bytes_per_token:,.0f} ÷ 2^20 ≈ {mib:.2f} MiB."))


def questions() -> list:
    what, why, quadratic, internal, external, not_disposable = render(ROWS)
    return [what, why, quadratic, _llama3_bytes(), _gqa_saving(), _paper_slots(), _request_gb(),
            *on_own_result("01", "kv-bytes-per-token", _own_request_mib), internal, external, not_disposable]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：KV 缓存与碎片", "Concept check: KV cache and fragmentation"), lab="01")
