"""What 4-bit weights buy and what they cost: the ablation's ``int4`` row read out, and the price in
output quality measured in the same run (greedy agreement with the fp32 reference).

``EngineConfig(weights="q4_1")`` runs the target on the 4-bit codes its GGUF file ships
(``labkit/model/q4_model.py``): a decode step reads about a fifth of the fp32 bytes. It is an
approximation of fp32, so the lab measures how often its greedy text is the reference's.
"""

from __future__ import annotations

from labkit.i18n import t
from labkit.labs.common.measure import Verdict, cores, verdict_from_ratios
from labkit.labs.lab05_engine_choice.ablation import AblationRow
from labkit.labs.lab05_engine_choice.compare import MARGIN, gains
from labkit.model.agreement import Agreement, greedy_agreement


def measure_agreement(num_prompts: int, max_tokens: int) -> Agreement:
    """Greedy continuations of held-out chat prompts, fp32 (the reference) vs ``weights="q4_1"``."""
    from labkit.config import EngineConfig
    from labkit.llm import LLM
    from labkit.sampling_params import SamplingParams
    from labkit.traces import load_prompts

    prompts = load_prompts("chat", "heldout")[:num_prompts]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outputs = []
    for weights in ("dense", "q4_1"):
        llm = LLM(config=EngineConfig(device="cpu", weights=weights), progress=False)
        outputs.append([o.token_ids for o in llm.generate(prompts, params)])
    return greedy_agreement(*outputs)


def _row(rows: list[AblationRow], workload: str, name: str) -> AblationRow | None:
    return next((r for r in rows if r.workload == workload and r.variant.name == name and r.available), None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def phase_ratios(rows: list[AblationRow], workload: str) -> tuple[float | None, float | None]:
    """(TPOT P99, TTFT P99) of the int4 row ÷ the baseline's: below 1 is faster."""
    base, q4 = _row(rows, workload, "baseline"), _row(rows, workload, "int4")
    if base is None or q4 is None:
        return None, None
    return (_ratio(q4.metrics.tpot.p99_ms, base.metrics.tpot.p99_ms),
            _ratio(q4.metrics.ttft.p99_ms, base.metrics.ttft.p99_ms))


def phase_verdicts(rows: list[AblationRow], workload: str) -> tuple[Verdict | None, Verdict | None]:
    """Verdicts on the two ratios of ``phase_ratios``, round by round (client-side wall-clock
    latencies: a busy machine inflates them, and the verdict says so)."""
    base, q4 = _row(rows, workload, "baseline"), _row(rows, workload, "int4")
    headline = phase_ratios(rows, workload)
    if base is None or q4 is None:
        return None, None
    out = []
    for phase, ratio in zip(("tpot", "ttft"), headline):
        pairs = [_ratio(getattr(a[2], phase).p99_ms, getattr(b[2], phase).p99_ms) for a, b in zip(q4.rounds, base.rounds)]
        pairs = [p for p in pairs if p is not None] or ([ratio] if ratio is not None else [])
        if not pairs:
            out.append(None)
            continue
        loads = [x for x in (*q4.load, *base.load) if x is not None]
        out.append(verdict_from_ratios(pairs, ratio=ratio, margin=MARGIN, load=max(loads, default=None), cores=cores(),
                                       clock="wall clock (client-side latency)", id=f"int4/{workload}/{phase}_p99",
                                       claim=(f"4 位权重 {phase.upper()} P99 ÷ 基线（{workload}）",
                                              f"4-bit weights {phase.upper()} P99 over the baseline ({workload})")))
    return out[0], out[1]


def _phase_clause(v: Verdict | None) -> str:
    if v is None:
        return t("没有可比的数", "has no comparable number")
    return t(f"是基线的 {v.ratio:.2f} 倍", f"is {v.ratio:.2f}× the baseline's") + v.mark(
        less=("（更快）", " (faster)"), greater=("（更慢）", " (slower)"), same=("（持平）", " (level)"))


def _speed_clause(workload: str, v: Verdict) -> str:
    return t(f"{workload} 上是基线的 {v.ratio:.2f} 倍", f"on {workload} {v.ratio:.2f}× the baseline's") + v.mark(
        same=("（持平）", " (level)"))


def _why(tpot: Verdict | None, ttft: Verdict | None) -> list[str]:
    """What the two phase verdicts say about memory-bound decode and compute-bound prefill."""
    if tpot is None or ttft is None:
        return []
    unexpected = ("与预期不同：解码一步以读权重为主，4 位权重本应让 TPOT 明显低于基线，这次没有显出来（多半是噪声或这台 CPU 的内核路径不同，再跑一次看是否稳定）",
                  "Not as expected: decode steps are mostly weight reads, so 4-bit weights should cut TPOT clearly; this "
                  "run does not show it (likely noise or a different kernel path on this CPU: run again)")
    out = [tpot.sentence(
        less=("解码一步只处理一行，时间几乎都花在把权重读一遍上；4 位权重读的字节约为 fp32 的五分之一，所以解码变快",
              "A decode step handles one row and is mostly one read of the weights; 4-bit weights read about a fifth "
              "of the fp32 bytes, so decoding gets faster"),
        same=unexpected, greater=unexpected)]
    out.append(ttft.sentence(
        greater=("预填充一步处理几百行，是计算密集的：int4 CPU 内核（PyTorch 的，或 labkit 与它逐位相同的 C 内核）每行都要解包 4 位码，算得比 fp32 矩阵乘慢，"
                 "省下的读取换不回来，所以首 token 反而更慢",
                 "A prefill step handles hundreds of rows and is compute-bound: the int4 CPU kernel (PyTorch's, or "
                 "labkit's C kernel with its bits) unpacks codes for every row and computes slower than the fp32 "
                 "matmul, so the saved reads do not pay and the first token comes later"),
        same=("预填充是计算密集的，少读字节帮不上忙：首 token 时间与基线持平",
              "Prefill is compute-bound, so fewer bytes do not help it: the first token takes as long as the baseline's"),
        less=("这次预填充也变快了：对计算密集的预填充来说少见，看它是否比解码的收益小",
              "This time prefill gained too: unusual for a compute-bound step; compare it with the decode gain")))
    return out


def int4_sentences(rows: list[AblationRow], batched: str, single: str, agreement: Agreement, tokens: int) -> list[str]:
    """Decode and prefill speed, throughput, memory and quality of the int4 row, each sentence computed
    from this run's numbers. ``single``: a workload of one request at a time; ``batched``: many at once."""
    gains_ = {w: next((g for g in gains(rows, w) if g.variant == "int4"), None) for w in (single, batched)}
    return sentences_from(*phase_verdicts(rows, single), gains_, agreement, tokens, batched, single)


def sentences_from(tpot: Verdict | None, ttft: Verdict | None, gains_: dict, agreement: Agreement, tokens: int,
                   batched: str, single: str) -> list[str]:
    """``int4_sentences`` from the values §2.1's record holds (``records.int4_from_record``)."""
    if None in gains_.values():
        return [t("本次没有测 4 位权重。", "4-bit weights were not measured in this run.")]
    out = [t(f"{single} 负载（一次一个请求）：每个输出 token 的时间（TPOT P99）{_phase_clause(tpot)}，"
             f"首 token 时间（TTFT P99，主要是预填充）{_phase_clause(ttft)}。",
             f"{single} (one request at a time): time per output token (TPOT P99) {_phase_clause(tpot)}; "
             f"time to first token (TTFT P99, mostly prefill) {_phase_clause(ttft)}.")]
    out += _why(tpot, ttft)
    out.append(t(f"每 CPU 秒的输出 token（预填充与解码合计）：{_speed_clause(single, gains_[single].verdict)}，"
                 f"{_speed_clause(batched, gains_[batched].verdict)}——输出越短、提示越长，预填充的代价占比越大。",
                 f"Output tokens per CPU second (prefill and decode together): {_speed_clause(single, gains_[single].verdict)}, "
                 f"{_speed_clause(batched, gains_[batched].verdict)}; the shorter the outputs and the longer the "
                 "prompts, the more the prefill cost weighs."))
    out.append(t(f"内存（权重 + KV 峰值）是基线的 {gains_[single].memory_x:.2f} 倍（{single}）；4 位层权重之外还留着一张 fp32 的词嵌入表（每个 token 只查一行）。",
                 f"Memory (weights + peak KV) is {gains_[single].memory_x:.2f}× the baseline's ({single}); besides the "
                 "4-bit layers it keeps one fp32 embedding table (one row looked up per token)."))
    out.append(quality_sentence(agreement, tokens))
    return out


def quality_sentence(a: Agreement, tokens: int) -> str:
    """The price: how often the 4-bit greedy text is exactly the fp32 reference's."""
    if a.num_identical == a.num_prompts:
        return t(f"代价：这次的 {a.num_prompts} 个提示上，4 位权重的贪心输出与 fp32 参考逐 token 相同（{tokens} 个新 token）；"
                 "它仍是近似——更长的输出或别的提示上会出现分歧。",
                 f"The price: on this run's {a.num_prompts} prompts the 4-bit greedy output equals the fp32 reference token "
                 f"for token ({tokens} new tokens); it is still an approximation: longer outputs or other prompts diverge.")
    return t(f"代价：{a.num_prompts} 个提示里有 {a.num_identical} 个与 fp32 参考逐 token 相同（{tokens} 个新 token）；"
             f"第一个不同的 token 平均出现在第 {a.mean_first_divergence:.1f} 位（相同的按 {tokens} 计）。"
             "分歧之后的文字未必更差，只是不再是参考的文字。",
             f"The price: {a.num_identical} of {a.num_prompts} prompts equal the fp32 reference token for token ({tokens} "
             f"new tokens); the first differing token comes at position {a.mean_first_divergence:.1f} on average "
             f"(identical ones counting {tokens}). Text after a divergence is not necessarily worse, only no longer the "
             "reference's.")
