"""Lab 03 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the lab's own formulas (``solutions``), never typed in, so a
question and the lab cannot drift apart. Text is ``{"zh": ..., "en": ...}``.
"""

from __future__ import annotations

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import Row, render
from labkit.labs.lab03_batching.solutions import static_decode_occupancy

_OCC_LENS, _OCC_SEQS = [33, 5, 5, 5], 4          # one long request, three short, one batch


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


ROWS = [
    Row("bt-static-rule", ("静态（请求级）批处理（static batching）里，一批请求什么时候结束？",
                           "In static (request-level) batching, when does a batch end?"), [
        ("批里最长的请求结束时；先结束的请求的槽位一直空着",
         "When its longest request ends; finished slots sit idle",
         "对：这就是它的空转槽位（本实验时间线里的灰格）。", "Right: those are its idle slots (grey in the timeline).", ""),
        ("每个请求一结束，就立刻从队列里换上一个新请求接着跑",
         "Each request that finishes is replaced at once by a new one from the queue",
         "这是连续（迭代级）批处理（Orca, OSDI'22）。", "That is continuous (iteration-level) batching (Orca, OSDI'22).",
         "static batching refills slots"),
        ("固定跑满 max_tokens 步，不管批里的请求是否已经结束",
         "After exactly max_tokens steps, whether or not its requests have finished",
         "批里最长的请求一结束整批就结束；没人需要的步不会跑。",
         "The batch ends with its longest request; no step runs for nobody.",
         "batches run a fixed number of steps"),
        ("批里过半的请求结束时，剩下的请求被拆到下一批继续",
         "When half its requests finish; the rest move on into the next batch",
         "静态批处理不拆批：剩下的请求留在原批里跑完，空出的槽位闲着。",
         "Static batching never splits a batch: the rest finish in place while freed slots idle.",
         "batches are rebalanced")]),
    Row("bt-v1-rule", ("vLLM v1 的调度规则为什么能把分块预填充、解码和投机验证统一成一种机制？",
                       "Why does vLLM v1's rule make chunked prefill, decode and speculative verification one mechanism?"), [
        ("每步只决定每个请求算几个 token，让 num_computed_tokens 追上 token 数",
         "Each step only decides how many tokens each request computes, so num_computed_tokens catches up",
         "对：新请求差整个提示（分块则差一块），解码差 1 个，验证差 1 + k 个——都是“还差几个”。",
         "Right: a new request lacks its prompt (a chunk at a time), a decode lacks 1, a verification 1 + k: all "
         "'how many are missing'.", ""),
        ("因为在 v1 里预填充、解码和投机验证调用的是同一个注意力内核（kernel），调度器因此不必再区分它们",
         "Because prefill, decode and verification call the same attention kernel in v1, so the scheduler need not tell them apart",
         "内核是实现细节；统一来自调度的记账方式。", "Kernels are an implementation detail; the unification is in the bookkeeping.",
         "the kernel is what unifies"),
        ("因为 v1 不再区分请求，而是把所有请求的 token 拼成一个序列一起算",
         "Because v1 no longer tells requests apart and runs all their tokens as one sequence",
         "请求当然还是分开记账的：每个请求有自己的 num_computed_tokens 和块表。",
         "Requests are still tracked one by one, each with its num_computed_tokens and block table.",
         "requests are merged"),
        ("因为 v1 先把所有预填充做完，再统一解码，所以两种阶段从不同时出现在一步里",
         "Because v1 finishes every prefill before any decode, so the two phases never share a step",
         "正相反：一步里可以同时有预填充块、解码和验证，这正是统一的好处。",
         "The opposite: one step may hold prefill chunks, decodes and verifications together.",
         "phases are separated")]),
    Row("bt-ceiling", ("离线轨迹上，连续批处理的吞吐提升有一个上限（若每步耗时相同）。它是？",
                       "On an offline trace, continuous batching's throughput gain has a ceiling (if every step cost the same). Which?"), [
        ("静态步数 ÷ 连续步数；连续步数不少于最长请求的长度",
         "Static steps / continuous steps, which are at least the longest request's length",
         "对：这个上限只在每步耗时相同时成立；真实设备上满批的一步更贵一些，实测倍数一般在它之下（测量噪声也可能让它超出：第 3.1 节由测量生成的句子会说这次是否如此）。",
         "Right: the ceiling holds only if every step costs the same; on a real device a fuller step costs a bit more, so "
         "a measured ratio is usually below it (noise can push one above: section 3.1's measured sentence says whether this run did).", ""),
        ("max_num_seqs 倍：每个槽位每一步都能一直有活干", "max_num_seqs times: every slot is always busy",
         "静态批处理也用满 max_num_seqs 个槽位开始；差别只在空转的槽位。",
         "Static batching also starts with max_num_seqs slots; the difference is only the idle ones.",
         "the gain scales with the batch size"),
        ("没有上限：请求越多、长度越不均，倍数就可以一直涨上去",
         "There is none: with more requests and more uneven lengths the ratio can keep growing",
         "再好的调度也得等最长的请求一个 token 一个 token 地生成完。",
         "No schedule beats the longest request generating token by token.",
         "unbounded gain"),
        ("2 倍：连续批处理平均只能把空转槽位减少一半",
         "2x: continuous batching on average halves the idle slots",
         "没有这样的固定倍数；它取决于长度分布（第 3 节按轨迹算出了上限）。",
         "There is no fixed factor; it depends on the length distribution (section 3 computes it per trace).",
         "a fixed rule of thumb")]),
    Row("bt-memory-bound", ("在 GPU 上，解码的批从 1 增到 32，一步的时间通常远没有变成 32 倍（本机是否如此，看第 5 节的测量）。原因是？",
                            "On a GPU, growing a decode batch from 1 to 32 usually makes a step take far less than 32x as long (whether this machine does, see section 5's measurement). Why?"), [
        ("解码是访存受限：每步都读一遍全部权重，由整批分摊",
         "Decode is memory-bound: each step reads all weights once, shared by the whole batch",
         "对：直到算术量赶上读权重的时间（拐点），加请求几乎不加时间。",
         "Right: until the arithmetic catches up with the weight reads (the knee), more requests cost little.", ""),
        ("批越大，调度器越会把每个请求的注意力截短，让一步算得更少",
         "A larger batch makes the scheduler truncate each request's attention, so a step computes less",
         "每个请求的上下文不因批大小而变；注意力一个不少。",
         "A request's context does not depend on the batch size; attention is complete.",
         "batching truncates attention"),
        ("设备会识别批里内容相同的请求，只算一次，再把结果复制给其他请求",
         "The device spots identical requests in a batch, computes them once and copies the result",
         "没有这种事：每个请求都要各自计算。", "No such thing: every request is computed.",
         "batching deduplicates"),
        ("解码是算力受限：批越大，矩阵乘法越能用满算力，所以几乎不变慢",
         "Decode is compute-bound: a larger batch fills the arithmetic units better, so it barely slows down",
         "半对半错：批大确实让矩阵乘更满，但小批解码的瓶颈是读权重（访存），不是算力；算力用满之后（拐点后）时间就随批增长。",
         "Half true: a larger batch does fill the units, but small-batch decode is bound by reading weights, not "
         "arithmetic; once compute saturates (past the knee) time grows with the batch.",
         "decode is compute-bound")]),
    Row("bt-chunked", ("别人正在解码时来了一个很长的提示。分块预填充（chunked prefill）主要改善了什么、代价是什么？",
                       "A long prompt arrives while others decode. What does chunked prefill mainly improve, and at what cost?"), [
        ("解码者的 ITL 尾延迟（P99）变小；长提示自己的 TTFT 变长一些",
         "The decoders' ITL tail (P99) shrinks; the long prompt's own TTFT grows a little",
         "对：每步 token 数有上限，没有哪一步长到拖住所有人；长提示则要多走几步才出首 token。这台机器上两者各变了多少"
         "（也可能在噪声之内），看第 6 节由测量生成的结论。",
         "Right: the token budget keeps every step short enough not to stall everyone; the long prompt takes a few more "
         "steps to its first token. How much each changed on this machine (perhaps within noise) is section 6's "
         "measured conclusion.", ""),
        ("总计算量减少一半：每一块只需关注它前面的一小段提示", "The total compute halves: each chunk attends only to a short stretch before it",
         "要算的 token 一个不少，只是分到了几步里。", "Every token is still computed, only spread over several steps.",
         "chunking saves compute"),
        ("长提示的 TTFT 变短，而正在解码的请求完全不受影响，两边都赚",
         "The long prompt's TTFT shrinks and the decoding requests are not affected at all: both sides win",
         "不对：长提示分几步算完，首 token 要多等几步；换来的是解码者不被一大步拖住。",
         "No: the prompt takes several steps, so its first token waits a few more steps; in exchange decoders are not stalled.",
         "chunking is a free win"),
        ("整体吞吐翻倍：分块后每步的 token 数变少，所以每步都更快更省",
         "Overall throughput doubles: steps carry fewer tokens, so each is quicker and cheaper",
         "每步更短，但步数更多，总 token 数不变；吞吐大致不变，改善的是延迟的尾部。",
         "Steps are shorter but more numerous, the same tokens in total; throughput is about the same, the tail latency improves.",
         "chunking raises throughput")]),
    Row("bt-goodput", ("goodput 和吞吐（throughput）有什么不同？", "How does goodput differ from throughput?"), [
        ("goodput 只数同时满足 TTFT 和 TPOT 目标的请求（每秒）",
         "Goodput counts only the requests per second that met both the TTFT and the TPOT objective",
         "对：过载时吞吐还在涨，goodput 却会掉下来——这才是用户感受到的服务能力。",
         "Right: under overload throughput may still rise while goodput falls; that is the capacity users feel.", ""),
        ("goodput 按输出 token/s 计，吞吐按请求/s 计，两者只差一个单位换算",
         "Goodput is in output tokens/s and throughput in requests/s; they differ only by a unit conversion",
         "单位不是区别所在；区别是是否达标。", "Units are not the difference; meeting the objectives is.",
         "a unit difference"),
        ("两者相同，只是名字不同", "They are the same thing under two names",
         "静态批处理在低负载下就可能吞吐不低、goodput 很低（TTFT 太长）。",
         "Static batching can have fair throughput and poor goodput (long TTFT).",
         "goodput is a synonym"),
        ("goodput 去掉了出错的请求，其余和吞吐完全一样",
         "Goodput leaves out the failed requests and is otherwise the same as throughput",
         "吞吐本来就只算完成的请求；goodput 还要求它们达到延迟目标。",
         "Throughput already counts completed requests only; goodput also requires the latency objectives.",
         "goodput only removes errors")]),
    Row("bt-misreading", ("误解 3：“连续批处理是免费的”。并发很高时先饱和的往往是什么？",
                          "Misreading 3: 'continuous batching is free'. At high concurrency, what often saturates first?"), [
        ("调度器的 CPU 时间：每步都遍历运行中的请求，而加速器的一步只有几毫秒",
         "The scheduler's CPU time: it walks every running request each step, while a device step takes a few ms",
         "对：vLLM v0.6.0 之前，Llama 3 8B / H100 上调度 + 输入准备占 29%、GPU 只忙 38%（vLLM 博客 2024-09-05）。",
         "Right: before vLLM v0.6.0, on Llama 3 8B / H100 scheduling + input prep took 29% and the GPU was busy 38% "
         "(vLLM blog 2024-09-05).", ""),
        ("GPU 的显存带宽", "The GPU's memory bandwidth",
         "带宽决定加速器的一步多长；CPU 跟不上时 GPU 在等，带宽用不满。",
         "Bandwidth sets the accelerator step; when the CPU lags, the GPU waits and bandwidth goes unused.",
         "the device is always the bottleneck"),
        ("网络带宽：接收请求、流式返回 token 的收发开销，比模型计算本身还要慢", "Network bandwidth: receiving requests and streaming tokens back take longer than the model computation itself",
         "本实验的引擎在进程内运行，没有网络；饱和点在调度器。",
         "This lab's engine runs in-process with no network; the scheduler saturates.",
         "the network saturates first"),
        ("KV 缓存的容量：请求一多，块就不够用", "KV cache capacity: with many requests blocks run out",
         "容量不够会抢占，是另一种瓶颈；7.1 节固定了容量，量的是每步的 CPU 时间如何随并发增长。",
         "Running out of blocks causes preemption, a different limit; section 7.1 fixes capacity and measures how CPU "
         "time per step grows with concurrency.",
         "memory is the only cost")]),
    Row("bt-overlap", ("异步 / 重叠调度（async / overlap scheduling）做了什么，为什么输出不变？",
                       "What does async / overlap scheduling do, and why is the output unchanged?"), [
        ("加速器算第 N 步时，CPU 先调度第 N+1 步；token 不变，只是时间重叠",
         "While the accelerator computes step N, the CPU schedules N+1; same tokens, overlapped time",
         "对：一步的时间从 CPU + GPU 变成约 max(CPU, GPU)（SGLang 的零开销调度器约 1.1 倍吞吐）。",
         "Right: a step goes from CPU + GPU to about max(CPU, GPU) (SGLang's zero-overhead scheduler: ~1.1x throughput).", ""),
        ("每步跳过一部分请求的调度，下一步再补上，平均下来输出不变",
         "It skips scheduling some requests each step and catches up next step, so on average output is the same",
         "每个请求每步都照常调度；跳过会改变时序，也可能改变输出。",
         "Every request is still scheduled each step; skipping would change timing and possibly output.",
         "overlap drops work"),
        ("把调度器整个搬到 GPU 上运行，从而省掉每一步 CPU 与 GPU 之间的同步等待",
         "It moves the whole scheduler onto the GPU, removing CPU-GPU synchronisation",
         "调度仍在 CPU 上；它只是和 GPU 的计算并行。", "Scheduling stays on the CPU; it runs alongside the GPU.",
         "scheduling moves to the device"),
        ("它把下一步的 token 先猜出来，猜错再回滚，所以输出在验证后不变",
         "It guesses the next step's tokens first and rolls back on a miss, so output is unchanged after checking",
         "那是投机解码；重叠调度不猜 token，它只提前做下一步的记账（第 N+1 步要用的 token 在第 N 步结束时才填进去）。",
         "That is speculative decoding; overlap scheduling guesses no tokens, it only does step N+1's bookkeeping early "
         "(the tokens it needs are filled in when step N finishes).",
         "overlap is speculation")]),
    Row("bt-preemption", ("连续批处理在显存紧张时抢占一个请求（重算策略）。代价体现在哪里？",
                          "Continuous batching preempts a request under memory pressure (recompute). Where does it cost?"), [
        ("丢掉的 K/V 要重算，它和后面的请求延迟变大；输出不变",
         "Dropped K/V are recomputed and it and later requests wait longer; output unchanged",
         "对：第 8 节量出了抢占次数、丢掉的 token 和增加的端到端延迟（实验 01 第 5 节在真实模型上也量过）。",
         "Right: section 8 counts preemptions, lost tokens and the added latency (lab 01 section 5 did it on the real model).", ""),
        ("被抢占的请求要从头重新采样，所以它的输出会和不抢占时不一样",
         "The preempted request samples again from scratch, so its output differs from the run without preemption",
         "已生成的 token 被保留，贪心输出逐 token 相同。", "Generated tokens are kept; greedy output matches token for token.",
         "preemption changes the output"),
        ("没有代价：块只是被换到 CPU 内存，之后原样换回来",
         "No cost: the blocks just move to CPU memory and come back as they were",
         "那是交换（swap）策略，不是重算；本引擎用重算。而且交换也有代价（拷贝与 CPU 内存）。",
         "That is swapping, not recompute; this engine recomputes. Swapping costs too (copies and CPU memory).",
         "preemption is free"),
        ("只有被抢占的那个请求变慢，其他请求因为多出了块反而都更快",
         "Only the preempted request slows down; the others all get faster thanks to the freed blocks",
         "重算要占用后面步的 token 预算，其他请求也会被拖慢；释放的块只是让它们能继续跑。",
         "Recomputation takes later steps' token budget, slowing others too; the freed blocks only let them go on.",
         "the cost is local to the victim")]),
]


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
    static_rule, v1_rule, ceiling, memory_bound, chunked, goodput, misreading, overlap, preemption = render(ROWS)
    return [static_rule, v1_rule, _occupancy_numeric(), ceiling, memory_bound, chunked, goodput,
            misreading, overlap, preemption]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：批处理", "Concept check: batching"), lab="03")
