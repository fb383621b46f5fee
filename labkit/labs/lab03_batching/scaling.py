"""Why decode batches well: step time vs batch size (decode) and vs tokens (prefill), measured.

A decode step reads every weight once whatever the batch (memory-bound), so one more sequence
adds little until the arithmetic catches up; a prefill step's cost grows with its tokens
(compute-bound). Where the prefill line crosses the batch-1 decode floor is the knee::

    step time
      |                         /  prefill (compute-bound): slope = seconds per token
      |                       /
      |  decode ____________/___  <- floor: batch-1 decode (weights read once)
      |_____________________|_____ tokens in the step
                          knee = floor / slope

``calibrate`` turns the two measurements into a ``HardwareProfile`` for the simulated model, so a
simulated run can be checked against a real one (lab section 4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from labkit.config import EngineConfig
from labkit.labs.common.measure import DEFAULT_MAX_SPREAD, Verdict, cores, machine_load, verdict_from_ratios
from labkit.metrics import StepRecorder
from labkit.replay import prompt_tokens, text_corpus
from labkit.sampling_params import SamplingParams
from labkit.sim.cost import MODELS, HardwareProfile


@dataclass(frozen=True)
class StepTiming:
    kind: str           # "decode" | "prefill"
    size: int           # decode: batch size; prefill: prompt tokens
    step_s: float       # model time of the fastest measured step (least disturbed by other programs)
    all_s: tuple[float, ...] = ()   # every measured step's model time, in order
    load: float | None = None       # the highest machine load seen around the measurement
    cores: int = 1

    @property
    def spread(self) -> float | None:
        """Slowest over fastest measured step (None with fewer than two steps)."""
        return max(self.all_s) / min(self.all_s) if len(self.all_s) > 1 and min(self.all_s) > 0 else None

    @property
    def busy(self) -> bool:
        """Measured while the machine was busy: load above the cores, or steps spread past
        ``measure.DEFAULT_MAX_SPREAD`` (the same rule as every verdict)."""
        return (self.load is not None and self.load > self.cores) or (self.spread or 1.0) > DEFAULT_MAX_SPREAD


def scaling_engine(max_batch: int = 32, max_prompt: int = 512):
    from labkit import LLM

    blocks = max(max_batch * 3, -(-max_prompt // 16) + 2)
    return LLM(progress=False, config=EngineConfig(max_num_seqs=max_batch, num_blocks=blocks, max_model_len=1024,
                                                   max_num_batched_tokens=max(1024, max_prompt)))


def _run(engine, prompts: list[list[int]], max_tokens: int) -> list:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    with StepRecorder(engine) as rec:
        for p in prompts:
            engine.add_request(p, params)
        while engine.has_unfinished_requests():
            engine.step()
    return rec.rows


def decode_step_times(llm, batch_sizes: list[int], steps: int = 3, prompt_len: int = 16) -> list[StepTiming]:
    """Fastest model time of ``steps`` decode-only steps at each batch size (prompts prefilled first).
    The minimum, not the mean: on a shared machine other programs only ever add time."""
    engine, corpus = llm.engine, text_corpus(llm.engine)
    out = []
    for b in batch_sizes:
        before = machine_load()
        rows = _run(engine, [prompt_tokens(engine, prompt_len, i, corpus) for i in range(b)], steps + 1)
        decode = [r.model_s for r in rows if r.prefill_tokens == 0 and r.decode_tokens == b]
        loads = [x for x in (before, machine_load()) if x is not None]
        out.append(StepTiming("decode", b, min(decode), tuple(decode), max(loads) if loads else None, cores()))
    return out


def step_ratio_spread(a: StepTiming, b: StepTiming) -> tuple[float, float] | None:
    """``a`` ÷ ``b`` step by step (the i-th measured step of each): the (lowest, highest) ratio, or None
    when either kept no steps."""
    pairs = [x / y for x, y in zip(a.all_s, b.all_s) if y > 0]
    return (min(pairs), max(pairs)) if pairs else None


def prefill_step_times(llm, token_counts: list[int], repeats: int = 2) -> list[StepTiming]:
    """Fastest model time of a single-request prefill step of each length (``repeats`` tries)."""
    engine, corpus = llm.engine, text_corpus(llm.engine)
    out = []
    for n in token_counts:
        times = [_run(engine, [prompt_tokens(engine, n, 100 + k, corpus)], 1)[0].model_s for k in range(repeats)]
        out.append(StepTiming("prefill", n, min(times)))
    return out


def prefill_slope(prefill: list[StepTiming]) -> float:
    """Least-squares seconds per prompt token (the compute-bound line)."""
    xs, ys = [p.size for p in prefill], [p.step_s for p in prefill]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else ys[0] / xs[0]


def knee_tokens(decode: list[StepTiming], prefill: list[StepTiming]) -> float:
    """Tokens per step where the compute line reaches the batch-1 decode floor."""
    floor = min(d.step_s for d in decode if d.size == min(x.size for x in decode))
    return floor / prefill_slope(prefill)


def calibrate(decode: list[StepTiming], prefill: list[StepTiming], model: str = "smollm2-135m") -> HardwareProfile:
    """A roofline profile of this machine: bandwidth from the batch-1 decode step (weights read once),
    compute from the prefill slope (2 x parameters FLOPs per token); efficiency 1 (already measured)."""
    profile = MODELS[model]
    floor = min(decode, key=lambda d: d.size).step_s
    return HardwareProfile("this CPU (fitted to the measured decode floor and prefill slope)",
                           mem_bandwidth=profile.weight_bytes / floor,
                           compute=2 * profile.num_params / prefill_slope(prefill),
                           memory_bytes=16e9, efficiency=1.0, step_overhead_s=0.0)


# ----------------------------------------------------------------------------- the section's record
#
# Section 5's claim is that a bigger decode batch makes each token cheaper. It is judged, not assumed:
# the largest batch's token throughput over batch 1's, step by step (the i-th measured step of each),
# the headline being the table's (fastest step of each). Section 5's sentence, table and figure title
# render from the record (``views.scaling_narration``).

SECTION = "5-scaling"
MARGIN = 0.05


def batching_verdict(decode: list[StepTiming]) -> Verdict:
    """Tokens per second at the largest batch ÷ at the smallest, per paired step."""
    base, top = min(decode, key=lambda d: d.size), max(decode, key=lambda d: d.size)
    gain = top.size / base.size
    pairs = [gain * b / a for a, b in zip(top.all_s, base.all_s) if a > 0]
    headline = gain * base.step_s / top.step_s
    # One load per claim: the ratio's two ends were measured at the start and the end of the sweep, so the
    # highest load over every batch size (the table's note and the record's caption cite the same one).
    loads = [d.load for d in decode if d.load is not None]
    spreads = [d.spread for d in (base, top) if d.spread is not None]
    return verdict_from_ratios(pairs or [headline], ratio=headline, margin=MARGIN, load=max(loads, default=None),
                               cores=base.cores, spread=max(spreads, default=None), clock="wall clock (model forward)",
                               quantity="speed", id=f"decode_batching/{base.size}->{top.size}",
                               claim=(f"解码 token 吞吐：批 {top.size} ÷ 批 {base.size}",
                                      f"decode token throughput: batch {top.size} / batch {base.size}"))


def record_scaling(decode: list[StepTiming], prefill: list[StepTiming]):
    """Section 5 as a record: every decode and prefill timing whole, the knee and the batching verdict."""
    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [d.load for d in decode if d.load is not None]
    return SectionRecord(lab="03", section=SECTION, context=RunContext.current(load=max(loads) if loads else None),
                         rounds={f"decode/batch_{d.size}": list(d.all_s) for d in decode},
                         values={"decode": [asdict(d) for d in decode], "prefill": [asdict(p) for p in prefill],
                                 "knee": knee_tokens(decode, prefill)},
                         verdicts={"batching": batching_verdict(decode)})


def timings_from_record(rec) -> tuple[list[StepTiming], list[StepTiming]]:
    """(decode, prefill) again, from the record alone."""
    def timing(d) -> StepTiming:
        return StepTiming(**{**d, "all_s": tuple(d.get("all_s") or ())})

    return [timing(d) for d in rec.values["decode"]], [timing(p) for p in rec.values["prefill"]]
