"""Lab 05 concept check: ten questions, every option explained (``labkit.assess``).

Numeric answers are computed here from cited rows (``facts``), never typed in."""

from __future__ import annotations

from labkit.assess import MultipleChoice, Numeric, Quiz
from labkit.labs.lab05_engine_choice.facts import PUBLISHED, cost_per_million_tokens

EXAMPLE_PRICE = 2.0            # $/GPU-hour in the numeric question: an example, not a fact
_TRT_H100 = next(p for p in PUBLISHED if p.engine == "TensorRT-LLM" and p.version == "v0.17" and "H100" in p.hardware)


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def _mc(question, options, answer, explanations) -> MultipleChoice:
    return MultipleChoice(question=_t(*question), options=[_t(*o) for o in options], answer=answer,
                          explanations=[_t(*e) for e in explanations])


def _v1_why() -> MultipleChoice:
    return _mc(("vLLM 为什么要做 V1 重写、把调度放进独立的引擎核心进程？", "Why did vLLM rewrite itself as V1, with scheduling in its own engine-core process?"),
               [("剖析显示 CPU 开销（API 服务器 + 调度）占了大半时间，GPU 在等 CPU", "Profiles showed CPU overhead (API server + scheduling) took most of the time; the GPU waited for the CPU"),
                ("为了支持 AMD GPU", "To support AMD GPUs"),
                ("因为 Python 不能调用 CUDA", "Because Python cannot call CUDA")], 0,
               [("对：v0.6.0 之前 Llama-3-8B 在 H100 上 33% API 服务器、29% 调度、只有 38% 在 GPU。", "Right: before v0.6.0, Llama-3-8B on an H100 spent 33% in the API server, 29% scheduling, only 38% on the GPU."),
                ("硬件覆盖面与 V1 的动机无关。", "Hardware coverage was not V1's motive."),
                ("PyTorch 本来就从 Python 调 CUDA；问题是 Python 端的开销相对于几毫秒的 GPU 步太大。", "PyTorch calls CUDA from Python all the time; the problem was Python-side overhead next to a few-millisecond GPU step.")])


def _converge() -> MultipleChoice:
    return _mc(("TensorRT-LLM 1.x 的执行后端是什么？", "What is TensorRT-LLM 1.x's execution backend?"),
               [("PyTorch，TensorRT 引擎后端已移除", "PyTorch; the TensorRT engine backend was removed"),
                ("只有预先编译的 TensorRT 引擎", "Only prebuilt TensorRT engines"),
                ("JAX", "JAX")], 0,
               [("对：两种哲学在靠拢——编译型引擎也改用 PyTorch，同时保留手写内核与量化配方。", "Right: the philosophies converge; the compiled engine moved to PyTorch while keeping its kernels and quantization recipes."),
                ("那是旧版（0.x）的做法；要先 build 引擎。", "That was the older (0.x) way, with an engine build step."),
                ("TensorRT-LLM 与 JAX 无关。", "TensorRT-LLM has nothing to do with JAX.")])


def _disagree() -> MultipleChoice:
    return _mc(("两篇公开测评对 vLLM 与 TensorRT-LLM 谁更快结论相反。最可能的原因是？", "Two published benchmarks disagree on whether vLLM or TensorRT-LLM is faster. Most likely why?"),
               [("默认参数、版本和负载（输入/输出长度、并发）不同", "Different defaults, versions and workloads (lengths, concurrency)"),
                ("其中一篇一定造假", "One of them must be fake"),
                ("GPU 每次运行速度随机变化一倍", "GPUs randomly vary 2x between runs")], 0,
               [("对：同一个 H100 上，Llama-3.1-8B FP8 与 gpt-oss-120b 默认设置给出相反的排名；在自己的负载上测。", "Right: on the same H100, Llama-3.1-8B FP8 and gpt-oss-120b at default settings rank the engines oppositely; measure your own workload."),
                ("没有证据；配置差异足以解释。", "No evidence; configuration differences explain it."),
                ("硬件噪声远小于配置带来的差异。", "Hardware noise is far smaller than configuration effects.")])


def _cost() -> Numeric:
    usd = cost_per_million_tokens(_TRT_H100.value, EXAMPLE_PRICE)
    return Numeric(question=_t(f"TensorRT-LLM 公布 Llama-3.1-8B FP8 单卡 H100 {_TRT_H100.shown} tok/s。GPU 按 {EXAMPLE_PRICE:g} 美元/小时（示例价格），每百万输出 token 多少美元？",
                               f"TensorRT-LLM publishes {_TRT_H100.shown} tok/s for Llama-3.1-8B FP8 on one H100. At {EXAMPLE_PRICE:g} $/hour (example price), how many dollars per million output tokens?"),
                   answer=usd, rel_tol=0.02, unit=_t("美元", "$"),
                   hint=_t("每小时产出 tok/s × 3600 个 token；价格除以它，再乘 10^6。", "An hour yields tok/s × 3600 tokens; divide the price by that and multiply by 10^6."),
                   explanation=_t(f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.3f} 美元。这是吞吐上限下的理想成本：真实服务有空闲、SLO 与峰谷。",
                                  f"{EXAMPLE_PRICE:g} / ({_TRT_H100.value:,.0f} × 3600) × 10^6 ≈ {usd:.3f} $. That is the ideal at peak throughput; real services idle, keep SLOs and see peaks."))


def _goodput() -> MultipleChoice:
    return _mc(("goodput 与吞吐的区别是？", "How does goodput differ from throughput?"),
               [("goodput 只数同时满足所有延迟目标（TTFT、TPOT…）的请求", "Goodput counts only requests that meet every latency objective (TTFT, TPOT, …)"),
                ("goodput 是每秒输出 token 数", "Goodput is output tokens per second"),
                ("goodput 不计失败的请求，其余相同", "Goodput just excludes failed requests")], 0,
               [("对：吞吐高而 P99 超标的配置，goodput 可能很低（第 2 节的表）。", "Right: a high-throughput configuration that misses its P99 can have low goodput (section 2's table)."),
                ("那是输出吞吐。", "That is output throughput."),
                ("吞吐本来就只计成功请求；goodput 还要求满足目标。", "Throughput already counts successful requests only; goodput also requires the objectives.")])


def _workload() -> MultipleChoice:
    return _mc(("为什么“哪个优化最重要”取决于负载？", "Why does 'which optimisation matters most' depend on the workload?"),
               [("一次一个请求时，批处理类优化（连续批处理、分页）几乎无事可做，而投机解码、前缀缓存直接缩短单请求延迟", "With one request at a time, batching optimisations (continuous, paged) have little to do, while speculation and prefix caching cut a single request's latency"),
                ("因为优化是随机起作用的", "Because optimisations work at random"),
                ("负载不影响排序，只影响绝对数字", "The workload changes only absolute numbers, never the ranking")], 0,
               [("对：第 2 节用两个负载量出了不同的排序（或说明了本次没有量出差别）。", "Right: section 2 measured the ranking on two workloads (or said when this run showed no difference)."),
                ("每个优化都有确定的机制；收益取决于负载是否触发它。", "Each optimisation has a definite mechanism; whether it pays depends on the workload triggering it."),
                ("静态批处理在并发 1 时与连续批处理等价，而在并发高、长度不一时差别很大：排序会变。", "Static equals continuous at concurrency 1 but differs widely under mixed lengths and high concurrency: rankings change.")])


def _spec_batch() -> MultipleChoice:
    return _mc(("投机解码在高并发下常常收益变小甚至变慢，主要原因是？", "Why does speculative decoding often gain less, or even slow down, at high concurrency?"),
               [("批已经把算力用满，验证 k 个草稿 token 的额外计算不再“免费”", "The batch already uses the compute; verifying k draft tokens is no longer free"),
                ("高并发时草稿模型会出错", "The draft model breaks at high concurrency"),
                ("投机解码会改变输出", "Speculative decoding changes the output")], 0,
               [("对：解码在小批时受带宽限制、算力有富余，投机解码正是利用这份富余。", "Right: small-batch decode is bandwidth-bound with spare compute, which speculation uses."),
                ("接受率与并发无关；是代价变了。", "Acceptance does not depend on concurrency; the cost does."),
                ("正确实现的投机解码不改变输出分布（贪心时逐 token 相同）。", "Correct speculative decoding leaves the output distribution unchanged (token for token when greedy).")])


def _diagnose() -> MultipleChoice:
    return _mc(("/metrics 显示 kv_cache_usage_perc 长时间接近 1、num_preemptions_total 持续增长、排队数上升。最先该做什么？",
                "/metrics shows kv_cache_usage_perc near 1 for long stretches, num_preemptions_total growing and the queue rising. What first?"),
               [("内存是瓶颈：给 KV 更多内存（更小的权重精度、更多 GPU）或降低 max_num_seqs", "Memory is the bottleneck: give KV more memory (lower weight precision, more GPUs) or lower max_num_seqs"),
                ("调度器 CPU 是瓶颈：换更快的 CPU", "The scheduler's CPU is the bottleneck: get a faster CPU"),
                ("打开投机解码", "Turn on speculative decoding")], 0,
               [("对：抢占意味着重算，KV 内存不够时吞吐和 P99 都受损（第 5 节）。", "Right: preemption means recomputation; short of KV memory, throughput and P99 suffer (section 5)."),
                ("那要看主机时间占比；这里的信号指向内存。", "That needs the host-time share; these signals point at memory."),
                ("投机解码还要额外的 KV 槽位给草稿 token，会更挤。", "Speculation needs extra KV slots for draft tokens: tighter still.")])


def _cpu_share() -> MultipleChoice:
    return _mc(("在本实验的 CPU 上，主机（调度）时间只占每步的很小一部分；在 H100 上跑 8B 模型时却可能占大半。为什么？",
                "On this lab's CPU host (scheduler) time is a small share of a step; on an H100 serving an 8B model it can be most of it. Why?"),
               [("H100 上一步模型计算只有几毫秒，而调度、API 的 CPU 开销并没有随之变小", "On an H100 a model step takes a few milliseconds, while scheduling and API CPU costs do not shrink with it"),
                ("H100 上的调度器更复杂", "The scheduler is more complex on an H100"),
                ("CPU 上没有调度器", "There is no scheduler on a CPU")], 0,
               [("对：vLLM 的 V1 动机正是 ~5 ms 的 GPU 步；CPU 上一个 135M 模型的一步要上百毫秒。", "Right: vLLM V1 was motivated by ~5 ms GPU steps; a 135M model step on a CPU takes around a hundred milliseconds."),
                ("同一个调度器；变的是模型步的时长。", "Same scheduler; the model step's duration changes."),
                ("labkit 在 CPU 上也有同一个调度器（第 5 节测了它的时间）。", "labkit runs the same scheduler on a CPU (section 5 timed it).")])


def _hardware() -> MultipleChoice:
    return _mc(("机队里有 AMD MI300X 也有 NVIDIA H100，每周上新模型。哪个引擎最自然？", "A fleet of AMD MI300X and NVIDIA H100, new models every week. Which engine fits most naturally?"),
               [("vLLM：同一代码与 API 跑在 NVIDIA 与 AMD 上，直接加载 HF 检查点", "vLLM: the same code and API on NVIDIA and AMD, loading HF checkpoints directly"),
                ("TensorRT-LLM", "TensorRT-LLM"),
                ("llama.cpp", "llama.cpp")], 0,
               [("对：这是顾问给出的建议，理由可追溯到 vLLM 的硬件支持文档。", "Right: the advisor says so, with reasons traced to vLLM's hardware documentation."),
                ("TensorRT-LLM 只支持 NVIDIA GPU，AMD 那一半用不了。", "TensorRT-LLM runs on NVIDIA GPUs only; half the fleet could not use it."),
                ("llama.cpp 面向单机，不是批处理的 GPU 服务。", "llama.cpp targets one machine, not a batched GPU service.")])


def questions() -> list:
    return [_v1_why(), _converge(), _disagree(), _cost(), _goodput(), _workload(), _spec_batch(), _diagnose(),
            _cpu_share(), _hardware()]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：如何选择推理引擎", "Concept check: choosing an inference engine"))
