"""Lab 05 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from cited rows (``facts``), never typed in."""

from __future__ import annotations

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import Row, render
from labkit.labs.lab05_engine_choice.facts import PUBLISHED, cost_per_million_tokens

EXAMPLE_PRICE = 2.0            # $/GPU-hour in the numeric question: an example, not a fact
COST_REL_TOL = 0.05            # the answer rounded to two decimals (0.02 for 0.0193) is right too
_TRT_H100 = next(p for p in PUBLISHED if p.engine == "TensorRT-LLM" and p.version == "v0.17" and "H100" in p.hardware)


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


ROWS = [
    Row("ec-v1-why", ("vLLM 为什么要做 V1 重写、把调度放进独立的引擎核心进程？",
                      "Why did vLLM rewrite itself as V1, with scheduling in its own engine-core process?"), [
        ("剖析显示 API 服务器和调度的 CPU 开销占了大半时间，GPU 在等 CPU",
         "Profiles showed API-server and scheduling CPU overhead took most of the time; the GPU waited",
         "对：v0.6.0 之前 Llama-3-8B 在 H100 上 33% API 服务器、29% 调度、只有 38% 在 GPU。",
         "Right: before v0.6.0, Llama-3-8B on an H100 spent 33% in the API server, 29% scheduling, only 38% on the GPU.", ""),
        ("为了支持 AMD GPU 和其他加速器：旧架构把 CUDA 调用写死在调度器里",
         "To support AMD GPUs and other accelerators: the old design hard-wired CUDA calls into the scheduler",
         "硬件覆盖面与 V1 的动机无关；V0 已经支持 ROCm。", "Hardware coverage was not V1's motive; V0 already ran on ROCm.",
         "V1 is about hardware support"),
        ("因为 Python 不能直接调用 CUDA，必须把调度放进另一个用 C++ 写的进程",
         "Because Python cannot call CUDA, so scheduling had to move into a separate process written in C++",
         "PyTorch 本来就从 Python 调 CUDA；V1 的引擎核心仍是 Python，问题是 Python 端的开销相对于几毫秒的 GPU 步太大。",
         "PyTorch calls CUDA from Python all the time and V1's engine core is still Python; the problem was Python-side "
         "overhead next to a few-millisecond GPU step.",
         "Python cannot drive the GPU"),
        ("GPU 计算本身太慢，把调度移开是为了让 GPU 独占整台机器的内存带宽",
         "The GPU compute itself was too slow; moving the scheduler away gives the GPU the machine's memory bandwidth",
         "GPU 只忙了 38% 的时间：慢的是 CPU 端，不是 GPU；调度进程不会和 GPU 抢显存带宽。",
         "The GPU was busy only 38% of the time: the CPU side was slow, not the GPU; the scheduler does not compete "
         "for GPU memory bandwidth.",
         "the GPU was the bottleneck")]),
    Row("ec-converge", ("按本实验引用的 TensorRT-LLM 文档，它的执行后端是怎样演变的？",
                        "By the TensorRT-LLM documentation this lab cites, how did its execution backend evolve?"), [
        ("v0.17 起有 PyTorch 后端；1.4 文档里它是唯一后端，TensorRT 引擎后端已移除",
         "A PyTorch backend since v0.17; by the 1.4 docs it is the only one, the TensorRT engine backend removed",
         "对：两种哲学在靠拢——编译型引擎也改用 PyTorch，同时保留手写内核与量化配方。PyTorch 后端自 v0.17 可用、"
         "性能总览自 v0.19 用它；1.4 的架构文档写明它是唯一执行后端（data/reference/published-numbers.csv）。",
         "Right: the philosophies converge; the compiled engine moved to PyTorch while keeping its kernels and "
         "quantization recipes. The PyTorch backend exists since v0.17, the perf overview uses it since v0.19, and the "
         "1.4 architecture docs name it the sole execution backend (data/reference/published-numbers.csv).", ""),
        ("1.x 起只能用预先编译的 TensorRT 引擎，部署前必须先 build", "From 1.x only prebuilt TensorRT engines, built before deployment",
         "那是 0.x 的主要做法；之后改为 PyTorch 后端，不再需要 build 引擎。",
         "That was the main 0.x way; later the PyTorch backend needs no engine build.",
         "TensorRT-LLM always compiles engines"),
        ("1.0 起 PyTorch 成了唯一后端，TensorRT 引擎路径在同一版本里一起删掉了",
         "From 1.0 PyTorch became the only backend; the TensorRT engine path was deleted in that same release",
         "半对：方向对，版本没有依据。引用的文档只说：PyTorch 后端自 v0.17 可用，1.4 的架构文档称它为唯一执行后端，"
         "TensorRT 引擎后端的移除另有一页说明（tensorrt-backend-removal）；1.0 时 TensorRT 引擎路径仍作为旧（legacy）后端存在，"
         "并不是在 1.0 一起删掉的。",
         "Half right: the direction is right, the version has no support. The cited docs say only that the PyTorch "
         "backend exists since v0.17 and that the 1.4 architecture docs call it the sole execution backend; the "
         "TensorRT engine backend's removal has its own page (tensorrt-backend-removal). At 1.0 the engine path was "
         "still there as a legacy backend, not deleted in that release.",
         "the switch happened at once in 1.0"),
        ("改用 JAX 编译执行，以便同时支持 TPU 和 GPU", "It moved to JAX compilation so as to run on TPUs and GPUs alike",
         "TensorRT-LLM 与 JAX 无关，只面向 NVIDIA GPU。", "TensorRT-LLM has nothing to do with JAX and targets NVIDIA GPUs only.",
         "compiled engines mean XLA")]),
    Row("ec-disagree", ("两篇公开测评对 vLLM 与 TensorRT-LLM 谁更快结论相反。最可能的原因是？",
                        "Two published benchmarks disagree on whether vLLM or TensorRT-LLM is faster. Most likely why?"), [
        ("默认参数、版本和负载（输入/输出长度、并发）不同", "Different defaults, versions and workloads (lengths, concurrency)",
         "对：vLLM v0.6.0 博客附录里，8B 在单卡 A100 上 TensorRT-LLM 吞吐最高，在 H100 上 vLLM 在解码为主的负载上最高、"
         "预填充为主时更低；GPUStack 在 H100 上按默认设置测 gpt-oss-120b，vLLM 6,095 tok/s 对 TensorRT-LLM 2,140。"
         "（Llama-3.1-8B FP8 那几行只有 TensorRT-LLM 自己的数，排不出名次。）在自己的负载上测。",
         "Right: in the vLLM v0.6.0 blog appendix TensorRT-LLM had the highest 8B throughput on one A100, while on an H100 "
         "vLLM led on decode-heavy loads and trailed on prefill-heavy ones; GPUStack's default-settings run of gpt-oss-120b "
         "on an H100 gave vLLM 6,095 tok/s against TensorRT-LLM's 2,140. (The Llama-3.1-8B FP8 rows are TensorRT-LLM's "
         "own and rank nothing.) Measure your own workload.", ""),
        ("其中一篇测评是厂商做的，结果不可信，另一篇才是对的",
         "One of them was done by a vendor and cannot be trusted; the other one is right",
         "厂商测评要看清配置，但配置差异本身就足以解释相反的结论，不必假设谁错了。",
         "Read a vendor's set-up carefully, but configuration differences alone explain opposite results.",
         "one of them must be wrong"),
        ("GPU 的速度每次运行随机波动很大，两篇测评的差别主要是噪声",
         "GPU speed varies a lot from run to run; the two benchmarks differ mostly by noise",
         "硬件噪声远小于配置带来的差异（几个百分点对比几倍）。",
         "Hardware noise (a few percent) is far smaller than configuration effects (several times).",
         "benchmarks are noise"),
        ("两者其实一样快，差别全部来自测评用的客户端工具",
         "Both are equally fast; the whole difference comes from the client tool each used",
         "客户端的指标定义确实会变（如 ITL 与 TPOT），但同一客户端下排名也会随负载翻转。",
         "Client definitions do differ (ITL vs TPOT), but even with one client the ranking flips with the workload.",
         "engines do not differ")]),
    Row("ec-goodput", ("goodput 与吞吐的区别是？", "How does goodput differ from throughput?"), [
        ("goodput 只数同时满足所有延迟目标（TTFT、TPOT…）的请求", "Goodput counts only requests that meet every latency objective (TTFT, TPOT, …)",
         "对：吞吐高而 P99 超标的配置，goodput 可能很低（第 2 节的表）。",
         "Right: a high-throughput configuration that misses its P99 can have low goodput (section 2's table).", ""),
        ("goodput 是每秒输出的 token 数，吞吐是每秒完成的请求数，两者只差换算",
         "Goodput is output tokens per second and throughput completed requests per second; they differ by a conversion",
         "那是输出吞吐的另一种单位；区别在于是否达到延迟目标。",
         "That is throughput in another unit; the difference is meeting the latency objectives.",
         "a unit difference"),
        ("goodput 不计失败的请求，其余与吞吐完全相同", "Goodput just leaves out failed requests, otherwise the same",
         "吞吐本来就只计成功请求；goodput 还要求满足目标。",
         "Throughput already counts successful requests only; goodput also requires the objectives.",
         "goodput only removes errors"),
        ("goodput 是吞吐的 P99，而不是平均值", "Goodput is throughput's P99 rather than its mean",
         "goodput 不是分位数；它按每个请求是否达到所有目标来计数。",
         "Goodput is not a percentile; it counts each request that met all objectives.",
         "goodput is a percentile")]),
    Row("ec-workload", ("为什么“哪个优化最重要”取决于负载？", "Why does 'which optimisation matters most' depend on the workload?"), [
        ("一次一个请求时批处理类优化无事可做，投机和前缀缓存却直接缩短延迟",
         "With one request at a time batching has nothing to do, while speculation and prefix caching cut latency",
         "对：第 2 节用两个负载量出了不同的排序（或说明了本次没有量出差别）。",
         "Right: section 2 measured the ranking on two workloads (or said when this run showed no difference).", ""),
        ("各个优化是否起作用每次运行带有随机性，多跑几次取最好的一次就知道",
         "Whether an optimisation works varies randomly from run to run; rerun and keep the best run",
         "每个优化都有确定的机制；收益取决于负载是否触发它。",
         "Each optimisation has a definite mechanism; whether it pays depends on the workload triggering it.",
         "optimisations are random"),
        ("负载只改变绝对数字，从不改变各优化的先后排序", "The workload changes absolute numbers only, never the ranking",
         "静态批处理在并发 1 时与连续批处理等价，而在并发高、长度不一时差别很大：排序会变。",
         "Static equals continuous at concurrency 1 but differs widely under mixed lengths and high concurrency: rankings change.",
         "rankings are universal"),
        ("因为优化越多越好，负载只决定该先打开哪一个；最终都应全部打开",
         "Because more optimisations are always better; the workload only decides which to switch on first",
         "不是越多越好：投机在满批时可能变慢，4 位权重的预填充可能更慢；第 2 节的表按各轮的结论标出了这次每个开关在每个负载上是正是负。",
         "Not always better: speculation can slow down at full batch and 4-bit weights can prefill slower; section 2's "
         "table marks, from its rounds, which way each switch went on each workload this time.",
         "every optimisation helps everywhere")]),
    Row("ec-spec-batch", ("投机解码在高并发下常常收益变小甚至变慢，主要原因是？",
                          "Why does speculative decoding often gain less, or even slow down, at high concurrency?"), [
        ("批已用满算力，验证 k 个草稿的额外计算不再“免费”", "The batch already uses the compute; verifying k drafts is no longer free",
         "对：解码在小批时受带宽限制、算力有富余，投机解码正是利用这份富余。",
         "Right: small-batch decode is bandwidth-bound with spare compute, which speculation uses.", ""),
        ("高并发时草稿模型的接受率会明显下降，因为它要同时为很多请求起草",
         "At high concurrency the draft's acceptance rate drops, as it drafts for many requests at once",
         "接受率取决于草稿与目标是否一致，与并发无关；变的是代价。",
         "Acceptance depends on draft-target agreement, not on concurrency; the cost changes.",
         "concurrency lowers acceptance"),
        ("高并发时投机解码会改变输出，所以要关掉一部分验证", "At high concurrency speculation changes the output, so some verification is skipped",
         "正确实现的投机解码不改变输出分布（贪心时逐 token 相同），也从不跳过验证。",
         "Correct speculative decoding leaves the output distribution unchanged (token for token when greedy) and never skips verification.",
         "speculation is lossy under load"),
        ("草稿 token 要占 KV 槽位，高并发时显存不够，只能全部抢占",
         "Draft tokens need KV slots; at high concurrency memory runs out and everything is preempted",
         "草稿确实要额外的 KV 槽位，会更挤，但那是次要的；主因是满批时验证的计算不再免费。",
         "Drafts do need extra KV slots, but that is secondary; the main cause is that verification compute is no longer free.",
         "memory is the whole story")]),
    Row("ec-diagnose", ("/metrics 显示 kv_cache_usage_perc 长时间接近 1、num_preemptions_total 持续增长、排队数上升。最先该做什么？",
                        "/metrics shows kv_cache_usage_perc near 1 for long stretches, num_preemptions_total growing and the queue rising. What first?"), [
        ("KV 内存是瓶颈：给 KV 更多内存，或降低 max_num_seqs", "KV memory is the bottleneck: give KV more memory, or lower max_num_seqs",
         "对：抢占意味着重算，KV 内存不够时吞吐和 P99 都受损（第 5 节）；更小的权重精度、更多 GPU 都能腾出 KV 内存。",
         "Right: preemption means recomputation; short of KV memory, throughput and P99 suffer (section 5); lower weight "
         "precision or more GPUs free KV memory.", ""),
        ("调度器 CPU 是瓶颈：换一颗更快的 CPU，或打开异步调度", "The scheduler's CPU is the bottleneck: a faster CPU, or async scheduling",
         "那要看主机时间占比；这里的信号都指向内存。", "That needs the host-time share; these signals point at memory.",
         "every slowdown is the scheduler"),
        ("打开投机解码，让每一步多产出几个 token，队列自然就消化掉了",
         "Turn on speculative decoding so every step emits more tokens and the queue drains by itself",
         "投机解码还要额外的 KV 槽位给草稿 token，会更挤。", "Speculation needs extra KV slots for draft tokens: tighter still.",
         "speculation fixes throughput"),
        ("调高 max_num_seqs，让更多请求同时运行，排队数就会下降",
         "Raise max_num_seqs so more requests run at once and the queue shrinks",
         "正相反：内存已满，同时运行更多请求只会带来更多抢占。",
         "The opposite: memory is full, so running more requests at once means more preemption.",
         "more concurrency always helps")]),
    Row("ec-cpu-share", ("vLLM 的剖析发现，在 H100 上服务 8B 模型时，主机（调度、API）时间可能占每步的大半；"
                         "第 5 节在这台 CPU 上量出了 135M 模型的这个占比（见那里的表）。两者为什么可能相差很大？",
                         "vLLM's profiling found host (scheduling, API) time can be most of a step when an H100 serves an 8B "
                         "model; section 5 measured that share for the 135M model on this CPU (see its table). Why can the two "
                         "differ so much?"), [
        ("H100 上一步只有几毫秒，调度和 API 的 CPU 开销却没有跟着变小",
         "On an H100 a step takes a few ms, while scheduling and API CPU costs do not shrink with it",
         "对：vLLM 的 V1 动机正是 ~5 ms 的 GPU 步；CPU 上一个 135M 模型的一步要长得多（这台机器上的步耗时见实验 04 第 5 节表里的"
         "“普通解码步（毫秒）”），同样的主机时间在分母里就小了。",
         "Right: vLLM V1 was motivated by ~5 ms GPU steps; a 135M model step on a CPU takes far longer (this machine's "
         "step time is in lab 04 section 5's 'plain step (ms)' column), so the same host time is a small share.", ""),
        ("H100 上运行的调度器更复杂，要额外管理显存、CUDA 流和多卡之间的通信",
         "The scheduler on an H100 is more complex, also managing GPU memory, CUDA streams and multi-GPU communication",
         "同一个调度器；变的是模型步的时长。", "Same scheduler; the model step's duration changes.",
         "GPU scheduling is more work"),
        ("CPU 上其实没有调度器：请求按顺序一个个跑，所以不存在主机时间",
         "There is no scheduler on a CPU: requests run one by one, so there is no host time at all",
         "labkit 在 CPU 上也有同一个调度器（第 5 节测了它的时间）。", "labkit runs the same scheduler on a CPU (section 5 timed it).",
         "CPU inference has no scheduling"),
        ("H100 所在的服务器 CPU 比实验机慢得多，所以同样的调度要花更久",
         "An H100 server's CPU is much slower than the lab machine's, so the same scheduling takes longer",
         "服务器 CPU 并不更慢；占比变大是因为分母（模型步）变小了几十倍。",
         "Server CPUs are not slower; the share grows because the denominator (the model step) shrank many times.",
         "the host CPU got slower")]),
    Row("ec-hardware", ("机队里有 AMD MI300X 也有 NVIDIA H100，每周上新模型。哪个引擎最自然？",
                        "A fleet of AMD MI300X and NVIDIA H100, new models every week. Which engine fits most naturally?"), [
        ("vLLM：同一套代码跑在两种 GPU 上，直接加载 HF 检查点", "vLLM: one code base on both GPUs, loading HF checkpoints directly",
         "对：这是顾问给出的建议，理由可追溯到 vLLM 的硬件支持文档。",
         "Right: the advisor says so, with reasons traced to vLLM's hardware documentation.", ""),
        ("TensorRT-LLM：它的内核最快，AMD 卡可以通过兼容层运行同样的引擎",
         "TensorRT-LLM: its kernels are fastest, and AMD cards can run the same engines through a compatibility layer",
         "TensorRT-LLM 只支持 NVIDIA GPU，AMD 那一半用不了。", "TensorRT-LLM runs on NVIDIA GPUs only; half the fleet could not use it.",
         "fastest kernels win everywhere"),
        ("llama.cpp：它能在任何硬件上运行，所以最适合混合机队",
         "llama.cpp: it runs on any hardware, so it suits a mixed fleet best",
         "llama.cpp 面向单机，不是批处理的 GPU 服务；能跑不等于适合高并发服务。",
         "llama.cpp targets one machine, not a batched GPU service; running is not serving at high concurrency.",
         "portability is all that matters"),
        ("两种 GPU 各用各的引擎：AMD 上 vLLM，NVIDIA 上 TensorRT-LLM",
         "A different engine per GPU: vLLM on AMD, TensorRT-LLM on NVIDIA",
         "可以这么做，但每周上新模型时要维护两套转换、配置与监控；一个引擎覆盖两者更自然。",
         "Possible, but weekly new models then need two sets of conversion, configuration and monitoring; one engine "
         "covering both fits more naturally.",
         "per-vendor best is always best")]),
]


def _cost() -> Numeric:
    usd = cost_per_million_tokens(_TRT_H100.value, EXAMPLE_PRICE)
    return Numeric(question=_t(f"TensorRT-LLM 公布 Llama-3.1-8B FP8 单卡 H100 {_TRT_H100.shown} tok/s。GPU 按 {EXAMPLE_PRICE:g} 美元/小时（示例价格），每百万输出 token 多少美元？",
                               f"TensorRT-LLM publishes {_TRT_H100.shown} tok/s for Llama-3.1-8B FP8 on one H100. At {EXAMPLE_PRICE:g} $/hour (example price), how many dollars per million output tokens?"),
                   answer=usd, rel_tol=COST_REL_TOL, unit=_t("美元", "$"),
                   hint=_t("每小时产出 tok/s × 3600 个 token；价格除以它，再乘 10^6。", "An hour yields tok/s × 3600 tokens; divide the price by that and multiply by 10^6."),
                   explanation=_t(f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.4f} 美元"
                                  f"（相差 {COST_REL_TOL:.0%} 以内都算对，所以 {usd:.3f} 和 {usd:.2f} 都对）。"
                                  "这是吞吐上限下的理想成本：真实服务有空闲、SLO 与峰谷。",
                                  f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.4f} $ (within "
                                  f"{COST_REL_TOL:.0%} counts, so {usd:.3f} and {usd:.2f} are both right). That is the ideal at "
                                  "peak throughput; real services idle, keep SLOs and see peaks."))


def questions() -> list:
    v1_why, converge, disagree, goodput, workload, spec_batch, diagnose, cpu_share, hardware = render(ROWS)
    return [v1_why, converge, disagree, _cost(), goodput, workload, spec_batch, diagnose, cpu_share, hardware]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：如何选择推理引擎", "Concept check: choosing an inference engine"), lab="05")
