"""The chapter in one figure: naive static batching → continuous → paged → speculative → engines.

Each stage carries one number and says where it came from:

- static → continuous, contiguous → paged: the simulated 13B server (``LLM(model="sim")``: the
  real scheduler and KV bookkeeping, a cost model for the forward pass), on one heavy-tailed
  trace, with the same KV budget — labelled 模拟 / simulated;
- speculative: this lab's own measurement (section 2: n-gram against the baseline, real model, one
  request at a time) — a single-request latency gain, so it is drawn apart from the throughput
  stages, never multiplied into them;
- engines: cited (vLLM v0.6.0 over v0.5.3). vLLM V1's "up to 1.7x" is over V0 *without* multi-step
  scheduling, which v0.6.0 already had, so it is not a step after v0.6.0 and is not stacked
  (``ENGINE_NOTE`` says so beside the figure).

Labs 02–04 record their verdicts in the learner's results summaries (``results/labNN.json``,
``labkit.report.results``): ``stages_for_chapter`` takes a stage's number from there when the
learner's earlier lab recorded it, and measures (or simulates) only what is missing, saying which
number came from where.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.config import EngineConfig
from labkit.i18n import t
from labkit.labs.lab05_engine_choice.facts import find
from labkit.llm import LLM
from labkit.report.results import read_summary, summary_path
from labkit.sampling_params import SamplingParams
from labkit.sim.paper import PAPER_MODEL
from labkit.traces import LogNormalLengths, synthetic_trace


@dataclass(frozen=True)
class Stage:
    name: str
    zh: str
    en: str
    gain: float | None          # × over the previous stage (None: not measured)
    kind: str                   # "simulated", "measured", "recorded" (an earlier lab's summary) or "cited"
    source: str
    regime: str = "throughput"  # "throughput" (many requests under load) or "latency" (one request at a time)


REGIMES = ("throughput", "latency")


def _sim_throughput(config: EngineConfig, num_requests: int, seed: int = 0) -> float:
    """Output tokens per simulated second for one trace, all requests at once."""
    trace = synthetic_trace(num_requests, seed=seed, prompt_len=LogNormalLengths(96, 1.0, 8, 512),
                            output_len=LogNormalLengths(128, 1.0, 8, 512))
    llm = LLM(model="sim", config=config, model_profile=PAPER_MODEL)
    prompts = [[1 + (i + j) % 200 for j in range(r.prompt_len)] for i, r in enumerate(trace)]
    params = [SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True) for r in trace]
    llm.generate(prompts, params)
    return float(llm.engine.stats()["output_tokens_per_s"])


def simulated_gains(num_requests: int = 64) -> tuple[float, float]:
    """(continuous ÷ static, paged ÷ contiguous) on the simulated 13B server, same 12 GiB of KV.

    Contiguous reservation of max_model_len = 1024 fits about 15 requests in 12 GiB (800 KB per
    token), so stages 1–2 run with a batch limit of 16; paging frees the reserved-but-unused slots,
    so stage 3 lifts the limit to 64 (what paging is for: more requests in the same memory)."""
    common = dict(kv_cache_bytes=12 * 2**30, max_model_len=1024, max_num_batched_tokens=4096)
    static = _sim_throughput(EngineConfig(scheduler="static", kv_cache="contiguous", max_num_seqs=16, **common),
                             num_requests)
    continuous = _sim_throughput(EngineConfig(scheduler="continuous", kv_cache="contiguous", max_num_seqs=16,
                                              **common), num_requests)
    paged = _sim_throughput(EngineConfig(scheduler="continuous", kv_cache="paged", max_num_seqs=64, **common),
                            num_requests)
    return continuous / static, paged / continuous


def engine_note() -> str:
    """Why V1's cited gain is not drawn as a stage after v0.6.0's."""
    v1 = find("vLLM V1 vs V0 throughput")
    return t(f"vLLM V1 对 V0 的吞吐（{v1.value}，{v1.source}）的基准是不开多步调度（multi-step）的 V0，"
             "而 v0.6.0 的 2.7× 已经包含多步调度：两个倍数的基准不同，不能接着叠成一级一级的台阶，所以图里只画 v0.6.0 这一级。",
             f"vLLM V1's gain over V0 ({v1.value}, {v1.source}) is against V0 without multi-step scheduling, which "
             "v0.6.0's 2.7x already includes: the two gains have different baselines and cannot be stacked as consecutive "
             "steps, so the figure draws the v0.6.0 step only.")


def chapter_stages(sim_gains: tuple[float, float], spec_gain: float | None) -> list[Stage]:
    v06 = find("vLLM v0.6.0 vs v0.5.3 Llama 8B")
    return [
        Stage("static", "朴素静态批处理", "naive static batching", 1.0, "simulated", "baseline"),
        Stage("continuous", "连续批处理", "continuous batching", sim_gains[0], "simulated",
              "LLM(model='sim'), 13B profile, same trace"),
        Stage("paged", "分页 KV", "paged KV", sim_gains[1], "simulated", "LLM(model='sim'), same KV budget"),
        Stage("speculative", "投机解码（n-gram）", "speculative decoding (n-gram)", spec_gain, "measured",
              "section 2, copy workload (one request at a time), tokens per CPU second", regime="latency"),
        Stage("engine-v06", "引擎：CPU 开销优化（vLLM v0.6.0）", "engine: CPU-overhead work (vLLM v0.6.0)", 2.7, "cited",
              str(v06)),
    ]


# ------------------------------------------------------------------------------ earlier labs' results

# stage: (lab, verdict id in that lab's summary, what the number is)
RECORDED = {
    "continuous": ("03", "offline/continuous_over_static",
                   ("连续批处理 ÷ 静态批处理的吞吐（实验 03 离线对比）", "continuous over static throughput (lab 03, offline)")),
    "paged": ("02", "paged/throughput_over_contiguous",
              ("分页 ÷ 连续预留的吞吐（实验 02 第 4 节）", "paged over contiguous throughput (lab 02, section 4)")),
    "speculative": ("04", "speedup/copy/ngram k=4",
                    ("n-gram k=4 在抄写式编辑上的解码加速比（实验 04）", "n-gram k=4 decode speed-up on copy-heavy editing (lab 04)")),
}


CONFIDENCE_ZH = {"clear": "明确", "within noise": "在噪声之内", "machine busy": "测量时机器正忙"}


def earlier_results() -> dict[str, tuple[str, dict, str]]:
    """stage → (lab, the verdict entry it recorded, when), for the stages an earlier lab recorded."""
    found = {}
    for stage, (lab, key, _) in RECORDED.items():
        summary = read_summary(lab)
        entry = (summary or {}).get("verdicts", {}).get(key)
        if entry and isinstance(entry.get("ratio"), (int, float)):
            found[stage] = (lab, entry, summary.get("updated") or "")
    return found


def stages_for_chapter(num_requests: int, spec_gain, spec_confidence: str | None = None) -> tuple[list[Stage], list[str]]:
    """The chapter's stages, each number from the learner's earlier lab when recorded there, else
    simulated (continuous, paged) or this lab's measurement (speculative: ``spec_gain``, a ratio or its
    verdict, whose confidence the stage's line then states as a recorded one's does); with one line per
    stage saying where its number came from."""
    if hasattr(spec_gain, "confidence"):
        spec_gain, spec_confidence = spec_gain.ratio, spec_gain.confidence
    found = earlier_results()
    missing_sim = not {"continuous", "paged"} <= set(found)
    stages = chapter_stages(simulated_gains(num_requests) if missing_sim else (None, None), spec_gain)
    lines = []
    for i, stage in enumerate(stages):
        if stage.name in found:
            lab, entry, when = found[stage.name]
            what = t(*RECORDED[stage.name][2])
            stages[i] = replace(stage, gain=float(entry["ratio"]), kind="recorded",
                                source=f"{summary_path(lab)} · {RECORDED[stage.name][1]} · {entry.get('confidence', '?')}")
            confidence = entry.get("confidence", "?")
            lines.append(t(f"{t(stage.zh, stage.en)}：{entry['ratio']:.2f}×，取自你在实验 {lab} 的结果（{summary_path(lab)}，"
                           f"{when}，{what}；结论：{CONFIDENCE_ZH.get(confidence, confidence)}）。",
                           f"{stage.en}: {entry['ratio']:.2f}×, from your lab {lab} run ({summary_path(lab)}, {when}, {what}; "
                           f"verdict: {entry.get('confidence', '?')})."))
        elif stage.name in RECORDED:
            lab = RECORDED[stage.name][0]
            how = {"simulated": t("本实验现场模拟", "simulated here"), "measured": t("本实验第 2 节实测", "measured in section 2 here")}
            verdict = ("" if stage.kind != "measured" or spec_confidence is None else
                       t(f"，结论：{CONFIDENCE_ZH.get(spec_confidence, spec_confidence)}", f", verdict: {spec_confidence}"))
            lines.append(t(f"{stage.zh}：{how.get(stage.kind, stage.kind)}{verdict}（{summary_path(lab)} 里没有这个数：做完实验 {lab} 后再运行本格，就会用你自己的结果）。",
                           f"{stage.en}: {how.get(stage.kind, stage.kind)}{verdict} ({summary_path(lab)} does not have it: after lab {lab}, "
                           "run this cell again to use your own result)."))
    return stages, lines
