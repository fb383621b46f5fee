"""Lab 03 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from the lab's own formulas (``solutions``), never typed in, so a
question and the lab cannot drift apart. Text is ``{"zh": ..., "en": ...}``.
"""

from __future__ import annotations

from labkit.assess import MultipleChoice, Numeric, Quiz
from labkit.labs.lab03_batching.solutions import static_decode_occupancy

_OCC_LENS, _OCC_SEQS = [33, 5, 5, 5], 4          # one long request, three short, one batch


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def _static_rule() -> MultipleChoice:
    return MultipleChoice(
        question=_t("静态（请求级）批处理（static batching）里，一批请求什么时候结束？", "In static (request-level) batching, when does a batch end?"),
        options=[_t("批里最长的请求结束时；先结束的请求的槽位一直空着", "When its longest request ends; finished requests' slots sit idle"),
                 _t("每个请求结束时立刻换上一个新请求", "Each finished request is replaced at once by a new one"),
                 _t("固定跑 max_tokens 步，不管请求是否结束", "After exactly max_tokens steps, finished or not")],
        answer=0,
        explanations=[_t("对：这就是它的空转槽位（本实验时间线里的灰格）。", "Right: those are its idle slots (grey in the timeline)."),
                      _t("这是连续（迭代级）批处理（Orca, OSDI'22）。", "That is continuous (iteration-level) batching (Orca, OSDI'22)."),
                      _t("批里最长的请求一结束整批就结束；没人需要的步不会跑。", "The batch ends with its longest request; no step runs for nobody.")])


def _v1_rule() -> MultipleChoice:
    return MultipleChoice(
        question=_t("vLLM v1 的调度规则为什么能把分块预填充、解码和投机验证统一成一种机制？",
                    "Why does vLLM v1's rule make chunked prefill, decode and speculative verification one mechanism?"),
        options=[_t("每个请求的 num_computed_tokens 追赶它的 token 数；调度器每步只决定每个请求这步算几个 token（受 token 预算限制）",
                    "Each request's num_computed_tokens catches up to its token count; each step the scheduler only decides how many tokens each request computes (under a token budget)"),
                 _t("因为预填充和解码用同一个 CUDA kernel", "Because prefill and decode use the same CUDA kernel"),
                 _t("因为 v1 不再区分请求", "Because v1 no longer tells requests apart")],
        answer=0,
        explanations=[_t("对：新请求差整个提示（分块则差一块），解码差 1 个，验证差 1 + k 个——都是“还差几个”。",
                         "Right: a new request lacks its prompt (a chunk at a time), a decode lacks 1, a verification 1 + k: all 'how many are missing'."),
                      _t("kernel 是实现细节；统一来自调度的记账方式。", "Kernels are an implementation detail; the unification is in the bookkeeping."),
                      _t("请求当然还是分开记账的：每个请求有自己的 num_computed_tokens。", "Requests are still tracked one by one, each with its num_computed_tokens.")])


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


def _ceiling() -> MultipleChoice:
    return MultipleChoice(
        question=_t("离线轨迹上，连续批处理的吞吐提升有一个上限（若每步耗时相同）。它是？",
                    "On an offline trace, continuous batching's throughput gain has a ceiling (if every step cost the same). Which?"),
        options=[_t("静态步数 ÷ 连续步数；而连续步数不少于最长请求的长度", "Static steps / continuous steps; and continuous needs at least as many steps as the longest request"),
                 _t("max_num_seqs 倍", "max_num_seqs times"),
                 _t("没有上限", "There is none")],
        answer=0,
        explanations=[_t("对：真实设备上满批的一步更贵一些，所以实测倍数低于这个上限。", "Right: on a real device a fuller step costs a bit more, so the measured ratio stays under it."),
                      _t("静态批处理也用满 max_num_seqs 个槽位开始；差别只在空转的槽位。", "Static batching also starts with max_num_seqs slots; the difference is only the idle ones."),
                      _t("再好的调度也得等最长的请求一个 token 一个 token 地生成完。", "No schedule beats the longest request generating token by token.")])


def _memory_bound() -> MultipleChoice:
    return MultipleChoice(
        question=_t("为什么解码批处理得好：批从 1 增到 32，一步的时间远没有变成 32 倍？",
                    "Why does decode batch well: from batch 1 to 32 a step takes far less than 32x as long?"),
        options=[_t("解码是访存受限（memory-bound）：每步都要把全部权重读一遍，这份读取由整批分摊",
                    "Decode is memory-bound: every step reads all the weights once, and the whole batch shares that read"),
                 _t("因为批越大，每个请求的注意力越短", "Because a larger batch shortens each request's attention"),
                 _t("因为 CPU/GPU 会自动跳过重复的请求", "Because the device skips duplicate requests")],
        answer=0,
        explanations=[_t("对：直到算术量赶上读权重的时间（拐点），加请求几乎不加时间。", "Right: until the arithmetic catches up with the weight reads (the knee), more requests cost little."),
                      _t("每个请求的上下文不因批大小而变。", "A request's context does not depend on the batch size."),
                      _t("没有这种事：每个请求都要各自计算。", "No such thing: every request is computed.")])


def _chunked() -> MultipleChoice:
    return MultipleChoice(
        question=_t("别人正在解码时来了一个很长的提示。分块预填充（chunked prefill）主要改善了什么、代价是什么？",
                    "A long prompt arrives while others decode. What does chunked prefill mainly improve, and at what cost?"),
        options=[_t("解码者的 ITL 尾延迟（P99）变小；长提示自己的 TTFT 变长一些",
                    "The decoders' ITL tail (P99) shrinks; the long prompt's own TTFT grows a little"),
                 _t("总计算量减少一半", "The total compute halves"),
                 _t("长提示的 TTFT 变短，解码者不受影响", "The long prompt's TTFT shrinks and decoders are unaffected")],
        answer=0,
        explanations=[_t("对：每步 token 数有上限，没有哪一步长到拖住所有人（第 6 节实测）。", "Right: no step grows long enough to stall everyone (section 6 measures it)."),
                      _t("要算的 token 一个不少，只是分到了几步里。", "Every token is still computed, only spread over several steps."),
                      _t("正相反：长提示分几步算完，首 token 晚一些。", "The opposite: the prompt takes several steps, so its first token comes later.")])


def _goodput() -> MultipleChoice:
    return MultipleChoice(
        question=_t("goodput 和吞吐（throughput）有什么不同？", "How does goodput differ from throughput?"),
        options=[_t("goodput 只数同时满足 TTFT 和 TPOT 目标的请求（每秒）", "Goodput counts only requests (per second) that met both the TTFT and the TPOT objective"),
                 _t("goodput 是输出 token/s，吞吐是请求/s", "Goodput is output tokens/s, throughput requests/s"),
                 _t("两者相同，只是名字不同", "They are the same")],
        answer=0,
        explanations=[_t("对：过载时吞吐还在涨，goodput 却会掉下来——这才是用户感受到的服务能力。",
                         "Right: under overload throughput may still rise while goodput falls; that is the capacity users feel."),
                      _t("单位不是区别所在；区别是是否达标。", "Units are not the difference; meeting the objectives is."),
                      _t("静态批处理在低负载下就可能吞吐不低、goodput 很低（TTFT 太长）。", "Static batching can have fair throughput and poor goodput (long TTFT).")])


def _misreading() -> MultipleChoice:
    return MultipleChoice(
        question=_t("误解 3：“连续批处理是免费的”。并发很高时先饱和的往往是什么？",
                    "Misreading 3: 'continuous batching is free'. At high concurrency, what often saturates first?"),
        options=[_t("调度器的 CPU 时间：它每步都要遍历运行中的请求，而加速器的一步只有几毫秒",
                    "The scheduler's CPU time: it walks the running requests every step, while an accelerator step lasts a few ms"),
                 _t("GPU 的显存带宽", "The GPU's memory bandwidth"),
                 _t("网络带宽", "Network bandwidth")],
        answer=0,
        explanations=[_t("对：vLLM v0.6.0 之前，Llama 3 8B / H100 上调度 + 输入准备占 29%、GPU 只忙 38%（vLLM 博客 2024-09-05）。",
                         "Right: before vLLM v0.6.0, on Llama 3 8B / H100 scheduling + input prep took 29% and the GPU was busy 38% (vLLM blog 2024-09-05)."),
                      _t("带宽决定加速器的一步多长；CPU 跟不上时 GPU 在等，带宽用不满。", "Bandwidth sets the accelerator step; when the CPU lags, the GPU waits and bandwidth goes unused."),
                      _t("本实验的引擎在进程内运行，没有网络；饱和点在调度器。", "This lab's engine runs in-process with no network; the scheduler saturates.")])


def _overlap() -> MultipleChoice:
    return MultipleChoice(
        question=_t("异步 / 重叠调度（async / overlap scheduling）做了什么，为什么输出不变？",
                    "What does async / overlap scheduling do, and why is the output unchanged?"),
        options=[_t("在加速器算第 N 步时，CPU 先把第 N+1 步调度好；token 和顺序不变，只是 CPU 和加速器的时间重叠",
                    "While the accelerator computes step N, the CPU schedules step N+1; tokens and their order are the same, only CPU and accelerator time overlap"),
                 _t("跳过一部分请求的调度，换来更快的步", "It skips scheduling some requests for faster steps"),
                 _t("把调度放到 GPU 上做", "It moves scheduling onto the GPU")],
        answer=0,
        explanations=[_t("对：一步的时间从 CPU + GPU 变成约 max(CPU, GPU)（SGLang 的零开销调度器约 1.1 倍吞吐）。",
                         "Right: a step goes from CPU + GPU to about max(CPU, GPU) (SGLang's zero-overhead scheduler: ~1.1x throughput)."),
                      _t("每个请求每步都照常调度；跳过会改变输出。", "Every request is still scheduled each step; skipping would change output."),
                      _t("调度仍在 CPU 上；它只是和 GPU 的计算并行。", "Scheduling stays on the CPU; it runs alongside the GPU.")])


def _preemption() -> MultipleChoice:
    return MultipleChoice(
        question=_t("连续批处理在显存紧张时抢占一个请求（重算策略）。代价体现在哪里？",
                    "Continuous batching preempts a request under memory pressure (recompute). Where does it cost?"),
        options=[_t("丢掉的 K/V 要重算（多算的 token），该请求和排在后面的请求延迟变大；输出不变",
                    "Dropped K/V must be recomputed (extra tokens), and that request and those behind it wait longer; output unchanged"),
                 _t("被抢占的请求输出会变", "The preempted request's output changes"),
                 _t("没有代价：块只是被换到 CPU 内存", "None: blocks just move to CPU memory")],
        answer=0,
        explanations=[_t("对：第 8 节量出了抢占次数、丢掉的 token 和增加的端到端延迟（实验 01 第 5 节在真实模型上也量过）。",
                         "Right: section 8 counts preemptions, lost tokens and the added latency (lab 01 section 5 did it on the real model)."),
                      _t("已生成的 token 被保留，贪心输出逐 token 相同。", "Generated tokens are kept; greedy output matches token for token."),
                      _t("那是交换（swap）策略，不是重算；本引擎用重算。", "That is swapping, not recompute; this engine recomputes.")])


def questions() -> list:
    return [_static_rule(), _v1_rule(), _occupancy_numeric(), _ceiling(), _memory_bound(), _chunked(), _goodput(),
            _misreading(), _overlap(), _preemption()]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：批处理", "Concept check: batching"))
