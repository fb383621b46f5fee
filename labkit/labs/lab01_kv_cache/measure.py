"""Lab 01 measurements: what the KV cache saves, and what it costs in bytes.

Why decode can reuse history. In a causal Transformer the key and value of token i depend only on
tokens 0..i, so they never change once computed. Generating token n+1 therefore needs the K/V of
all n earlier tokens but new work only for the newest one::

    with the KV cache     step n: forward 1 token, read K/V of n cached tokens    work ∝ 1 token
    without (recompute)   step n: forward all n tokens again                       work ∝ n tokens
    whole answer of N tokens:  Σ 1 = N tokens      vs      Σ n ≈ N²/2 tokens (quadratic)

The price is memory: every token keeps one K and one V vector per KV head in every layer,

    bytes/token = 2 (K and V) × num_layers × num_kv_heads × head_dim × dtype_bytes

(Kwon et al., SOSP'23, §3: OPT-13B keeps 2 × 5120 × 40 × 2 B = 800 KB per token).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

from labkit.labs.common.machine import cpu_load, one_thread
from labkit.labs.common.measure import cpu_clock
from labkit.metrics import StepRecorder, StepRow
from labkit.replay import prompt_tokens, text_corpus
from labkit.sampling_params import SamplingParams
from labkit.sim.cost import MODELS, ModelProfile

GREEDY = dict(temperature=0.0, ignore_eos=True)


# ----------------------------------------------------------------------- cache vs recompute
#
# Costs are compared in CPU seconds of one thread: another program on the machine then takes turns
# with us (our wall time grows) but does not add to our CPU time, so the comparison measures the
# work of each mode. Wall seconds are kept alongside, and the load seen is reported.

@dataclass(frozen=True)
class TokenCost:
    """The cost of producing one new token whose context holds ``context_len`` tokens."""

    mode: str               # "cache" (normal decode) | "recompute" (no KV cache: forward everything)
    context_len: int
    tokens_processed: int   # tokens the model ran its layers on for this one new token
    seconds: float          # CPU seconds (one thread) of the engine steps that produced it
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class Conditions:
    """How a timing was taken: threads, clock, and how busy the machine was meanwhile."""

    threads: int
    clock: str
    load_before: float | None   # 1-minute load average (None where the OS has none)
    load_after: float | None
    num_cpus: int

    @property
    def load(self) -> float | None:
        loads = [x for x in (self.load_before, self.load_after) if x is not None]
        return max(loads) if loads else None

    @property
    def busy(self) -> bool:
        """More runnable work than one core per other program leaves us: timings may be disturbed."""
        return self.load is not None and self.load > max(1, self.num_cpus - 1)


@dataclass(frozen=True)
class CacheComparison:
    """One prompt continued for the same new tokens both ways (greedy)."""

    prompt_len: int
    cache: tuple[TokenCost, ...]
    recompute: tuple[TokenCost, ...]
    cache_output: tuple[int, ...]
    recompute_output: tuple[int, ...]
    conditions: Conditions | None = None

    @property
    def same_output(self) -> bool:
        return self.cache_output == self.recompute_output

    def total_tokens(self, mode: str) -> int:
        """Tokens processed over the whole answer in ``mode`` ("cache" or "recompute")."""
        return sum(c.tokens_processed for c in getattr(self, mode))

    def total_seconds(self, mode: str) -> float:
        """CPU seconds (one thread) over the whole answer in ``mode``."""
        return sum(c.seconds for c in getattr(self, mode))

    def token_ratio(self) -> float:
        return self.total_tokens("recompute") / self.total_tokens("cache")

    def total_time_ratio(self) -> float:
        return self.total_seconds("recompute") / self.total_seconds("cache")

    def time_ratio(self) -> float:
        """Seconds per new token, recompute ÷ cache, each the best (least disturbed) of tokens 2..N;
        the first token is a prefill in both modes."""
        return best_seconds(after_first(self.recompute)) / best_seconds(after_first(self.cache))

    def time_verdict(self, total: bool = False, margin: float = 0.1):
        """A verdict on recompute ÷ cache (``labkit.labs.common.measure``): each new token from the
        2nd on is one paired round (token n both ways); the headline is ``total_time_ratio`` or
        ``time_ratio``. Clear only when every token's ratio lies on one side of 1 ± margin."""
        from labkit.labs.common.measure import Verdict, verdict_from_ratios

        pairs = [r.seconds / c.seconds for c, r in zip(after_first(self.cache), after_first(self.recompute))
                 if c.seconds > 0 and r.seconds >= 0]
        headline = self.total_time_ratio() if total else self.time_ratio()
        if not pairs:
            return Verdict("same" if abs(headline - 1) <= margin else "greater" if headline > 1 else "less",
                           "within noise", headline, headline, headline, margin, reasons=("no paired tokens",))
        c = self.conditions
        # A decode step with the cache costs about the same at every token: a wide spread means a disturbed run.
        cache_s = [x.seconds for x in after_first(self.cache) if x.seconds > 0]
        spread = max(cache_s) / min(cache_s) if len(cache_s) > 1 else None
        return verdict_from_ratios(pairs, ratio=headline, margin=margin, load=c.load if c else None, spread=spread,
                                   cores=c.num_cpus if c else 1, clock=c.clock if c else "",
                                   load_before=c.load_before if c else None, load_after=c.load_after if c else None,
                                   id=f"cache_vs_recompute/context_{self.prompt_len}",
                                   claim=(f"无缓存 ÷ 有缓存，每个新 token 的 CPU 时间（上下文 {self.prompt_len}）",
                                          f"CPU time per new token without ÷ with the cache (context {self.prompt_len})"))


def load_average() -> float | None:
    """The 1-minute load average (``machine.cpu_load``), None where the OS has none."""
    load = cpu_load()
    return None if load is None else load[0]


@contextmanager
def measured_conditions(box: list):
    """One thread inside the block; afterwards ``box`` holds the ``Conditions`` it ran under."""
    before = load_average()
    with one_thread():
        yield
    box.append(Conditions(1, cpu_clock().name, before, load_average(), os.cpu_count() or 1))


def run_alone(llm, prompt_ids: list[int], max_tokens: int) -> tuple[list[int], list[StepRow], list[float]]:
    """Run one greedy request to its end on an otherwise idle engine: (output ids, step rows, CPU
    seconds of each step)."""
    engine = llm.engine
    if engine.has_unfinished_requests():
        raise RuntimeError("the engine is busy; these measurements need it to themselves")
    cpu, clock = [], cpu_clock()       # process CPU time (the injected clock inside measure.clock_override)
    with StepRecorder(engine) as rec:
        rid = engine.add_request(list(prompt_ids), SamplingParams(max_tokens=max_tokens, **GREEDY))
        while engine.has_unfinished_requests():
            started = clock()
            engine.step()
            cpu.append(clock() - started)
    if len(cpu) != len(rec.rows):
        raise RuntimeError(f"{len(rec.rows)} StepEnd events for {len(cpu)} engine steps")
    return list(engine.get_request(rid).output_token_ids), rec.rows, cpu


def _cost(mode: str, context_len: int, rows: list[StepRow], cpu: list[float]) -> TokenCost:
    return TokenCost(mode, context_len, sum(r.num_tokens for r in rows), sum(cpu), sum(r.step_s for r in rows))


def with_cache(llm, prompt_ids: list[int], num_new_tokens: int) -> tuple[list[int], list[TokenCost]]:
    """Normal generation: one prefill (first token), then one decode step per further token."""
    output, rows, cpu = run_alone(llm, prompt_ids, num_new_tokens)
    prefill = [i for i, r in enumerate(rows) if r.prefill_tokens]
    costs = [_cost("cache", len(prompt_ids), [rows[i] for i in prefill], [cpu[i] for i in prefill])]
    decodes = [i for i, r in enumerate(rows) if not r.prefill_tokens]
    costs += [_cost("cache", len(prompt_ids) + n, [rows[i]], [cpu[i]]) for n, i in enumerate(decodes, 1)]
    return output, costs


def without_cache(llm, prompt_ids: list[int], num_new_tokens: int) -> tuple[list[int], list[TokenCost]]:
    """No KV cache kept between tokens: every new token is a fresh request (a full prefill of the
    prompt plus everything generated so far), and its K/V are thrown away afterwards."""
    output: list[int] = []
    costs = []
    for _ in range(num_new_tokens):
        sequence = list(prompt_ids) + output
        token, rows, cpu = run_alone(llm, sequence, 1)
        output += token
        costs.append(_cost("recompute", len(sequence), rows, cpu))
    return output, costs


def compare_cache_recompute(llm, prompt_ids: list[int], num_new_tokens: int, total: bool = False) -> CacheComparison:
    """Both ways, on one thread, timed in CPU seconds; the load seen is kept in ``conditions``. The
    verdict saved in the lab's results is the one the section prints: the whole answer's CPU time
    with ``total=True`` (section 1.1), else the fastest new token (section 1.2)."""
    box: list[Conditions] = []
    with measured_conditions(box):
        cache_out, cache = with_cache(llm, prompt_ids, num_new_tokens)
        recompute_out, recompute = without_cache(llm, prompt_ids, num_new_tokens)
    comparison = CacheComparison(len(prompt_ids), tuple(cache), tuple(recompute), tuple(cache_out),
                                 tuple(recompute_out), box[0])
    from labkit.labs.common.measure import record_verdict

    record_verdict("01", comparison.time_verdict(total=total), token_ratio=comparison.token_ratio(),
                   same_output=comparison.same_output)
    return comparison


def text_prompt(llm, num_tokens: int, index: int = 0) -> list[int]:
    """``num_tokens`` ids of real text (the shipped prompt sets), so the model sees language."""
    return prompt_tokens(llm.engine, num_tokens, index, text_corpus(llm.engine))


def compare_at_contexts(llm, context_lens: list[int], num_new_tokens: int = 3) -> list[CacheComparison]:
    """``compare_cache_recompute`` for a real-text prompt of each length in ``context_lens``."""
    return [compare_cache_recompute(llm, text_prompt(llm, n, i), num_new_tokens)
            for i, n in enumerate(context_lens)]


def staggered_run(llm, prompts: list[list[int]], join_steps: list[int], max_tokens: int) -> list[StepRow]:
    """Requests join a running engine: prompt i is added once ``join_steps[i]`` steps have run.
    Returns one row per step, so prefill bursts show up between steady decode steps."""
    engine, pending = llm.engine, sorted(zip(join_steps, range(len(prompts))))
    params = SamplingParams(max_tokens=max_tokens, **GREEDY)
    with StepRecorder(engine) as rec:
        steps = 0
        while pending or engine.has_unfinished_requests():
            while pending and pending[0][0] <= steps:
                engine.add_request(list(prompts[pending.pop(0)[1]]), params)
            if engine.has_unfinished_requests():
                engine.step()
            steps += 1
    return rec.rows


def prefill_decode_spread(rows: list[StepRow]) -> tuple[float, float] | None:
    """The prefill step over each decode step that ran the first request alone (before the next one
    joined): the (lowest, highest) ratio this run measured, or None when there is no such step."""
    alone = [r.step_s for r in rows[1:] if r.prefill_tokens == 0 and r.num_requests == 1 and r.step_s > 0]
    if not alone:
        return None
    return rows[0].step_s / max(alone), rows[0].step_s / min(alone)


def after_first(costs: tuple[TokenCost, ...]) -> list[TokenCost]:
    """Tokens 2..N: the first token comes from the prompt's prefill in both modes."""
    return list(costs[1:])


def best_seconds(costs: list[TokenCost]) -> float:
    """The fastest of several like measurements: other programs only ever add time, so the
    minimum is the least disturbed estimate (the usual benchmarking convention)."""
    return min(c.seconds for c in costs)


# ----------------------------------------------------------------------- bytes per token

@dataclass(frozen=True)
class KVTensorFacts:
    """What the engine's K/V tensor really is. Shape: [layers, 2 (K, V), blocks, block_size,
    kv_heads, head_dim]; ``num_slots`` = blocks × block_size tokens fit in it."""

    shape: tuple[int, ...]
    dtype: str
    element_bytes: int
    total_bytes: int
    num_slots: int

    @property
    def bytes_per_token(self) -> float:
        return self.total_bytes / self.num_slots


def kv_tensor_facts(llm) -> KVTensorFacts:
    tensor = llm.engine.kv_cache.tensor          # [L, 2, num_blocks, block_size, H_kv, D]
    _, _, num_blocks, block_size, _, _ = tensor.shape
    return KVTensorFacts(tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""), tensor.element_size(),
                         tensor.numel() * tensor.element_size(), num_blocks * block_size)


@dataclass(frozen=True)
class KVShape:
    """The four numbers the formula needs, named as in a Hugging Face config.json."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    num_params: float | None = None

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def formula(self) -> str:
        return (f"2 × {self.num_layers} × {self.num_kv_heads} × {self.head_dim} × {self.dtype_bytes} "
                f"= {self.bytes_per_token:,} B")


def engine_shape(llm, name: str = "SmolLM2-135M") -> KVShape:
    """The served model's shape (from its config) with the dtype the KV tensor really uses."""
    cfg = llm.engine.model_config
    dtype_bytes = llm.engine.kv_cache.tensor.element_size()
    params = sum(p.numel() for p in llm.engine.runner.model.parameters())
    return KVShape(name, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, dtype_bytes, params)


def _from_profile(profile: ModelProfile) -> KVShape:
    return KVShape(profile.name, profile.num_layers, profile.num_kv_heads, profile.head_dim,
                   profile.dtype_bytes, profile.num_params)


def published_shapes() -> list[KVShape]:
    """Well-known models, shapes from their config.json (OPT-13B: 40 layers, hidden 5120 = 40 heads
    × 128, fp16, as in Kwon et al. §3); Llama shapes from ``labkit.sim.cost.MODELS``."""
    opt = KVShape("OPT-13B (fp16)", 40, 40, 128, 2, 13e9)
    return [opt, *(_from_profile(MODELS[name]) for name in ("llama-2-7b", "llama-2-13b", "llama-3-8b"))]


@dataclass(frozen=True)
class KVBudgetRow:
    model: str
    bytes_per_token: int
    weight_bytes: float | None
    tokens_that_fit: int          # KV slots left after the weights (0 when the weights alone do not fit)


def kv_budget(shapes: list[KVShape], memory_bytes: int) -> list[KVBudgetRow]:
    """How many tokens of KV cache fit in ``memory_bytes`` once each model's weights are loaded."""
    rows = []
    for s in shapes:
        weights = s.num_params * s.dtype_bytes if s.num_params else 0.0
        room = max(0.0, memory_bytes - weights)
        rows.append(KVBudgetRow(s.name, s.bytes_per_token, weights or None, int(room // s.bytes_per_token)))
    return rows


# ----------------------------------------------------------------------- the sections' records
#
# Sections 1.1 and 1.2 return records (labkit.labs.common.records): the per-token costs both ways
# (the raw rounds), the outputs' agreement and the verdicts. What the learner reads about the run
# is rendered from the record alone (views.growing_narration, views.contexts_narration).

LAB = "01"
GROWING, CONTEXTS = "1.1-growing", "1.2-contexts"


def _comparison_entry(c: CacheComparison) -> dict:
    return {"prompt_len": c.prompt_len, "same_output": c.same_output,
            "cache": [[x.context_len, x.tokens_processed, x.seconds, x.wall_seconds] for x in c.cache],
            "recompute": [[x.context_len, x.tokens_processed, x.seconds, x.wall_seconds] for x in c.recompute],
            "conditions": None if c.conditions is None else {
                "threads": c.conditions.threads, "clock": c.conditions.clock, "load_before": c.conditions.load_before,
                "load_after": c.conditions.load_after, "num_cpus": c.conditions.num_cpus}}


def _comparison_from_entry(e: dict) -> CacheComparison:
    costs = {mode: tuple(TokenCost(mode, int(n), int(tok), float(s), float(w)) for n, tok, s, w in e[mode])
             for mode in ("cache", "recompute")}
    same = bool(e["same_output"])
    return CacheComparison(int(e["prompt_len"]), costs["cache"], costs["recompute"], (0,), (0,) if same else (1,),
                           None if e.get("conditions") is None else Conditions(**e["conditions"]))


def record_comparisons(section: str, comparisons: list[CacheComparison], *, total: bool):
    """A record of cache-vs-recompute comparisons: ``total=True`` (section 1.1, one growing answer)
    judges the whole answer's CPU time, the statistic its token count is compared with; ``False``
    (section 1.2, fixed contexts) the fastest new token at each context."""
    from labkit.labs.common.records import RunContext, SectionRecord

    loads = [c.conditions.load for c in comparisons if c.conditions is not None and c.conditions.load is not None]
    return SectionRecord(
        lab=LAB, section=section, context=RunContext.current(load=max(loads) if loads else None),
        rounds={"comparisons": [_comparison_entry(c) for c in comparisons]},
        values={"total": total, "token_ratio": [c.token_ratio() for c in comparisons]},
        verdicts={f"context_{c.prompt_len}": c.time_verdict(total=total) for c in comparisons})


def comparisons_from_record(rec) -> list[CacheComparison]:
    """The comparisons again, from the record alone (outputs are kept only as "same or not")."""
    return [_comparison_from_entry(e) for e in rec.rounds["comparisons"]]


TIMELINE = "2-prefill-decode"


def record_timeline(rows: list[StepRow]):
    """Section 2 as a record: every step's tokens and wall time, and a verdict on the first prefill
    step over each decode step the first request ran alone (one ratio per such step; the wall clock,
    so the load decides whether it can be trusted)."""
    import statistics
    from dataclasses import asdict

    from labkit.labs.common.measure import Verdict, cores, machine_load, verdict_from_ratios
    from labkit.labs.common.records import RunContext, SectionRecord

    load = machine_load()
    alone = [r.step_s for r in rows[1:] if r.prefill_tokens == 0 and r.num_requests == 1 and r.step_s > 0]
    ratios = [rows[0].step_s / s for s in alone]
    claim = ("第一个预填充步 ÷ 单请求解码步（墙钟）", "first prefill step / one-request decode step (wall clock)")
    verdict = (verdict_from_ratios(ratios, ratio=rows[0].step_s / statistics.median(alone), load=load,
                                   cores=cores(), clock="wall clock (time.perf_counter)", id="prefill_vs_decode_step",
                                   claim=claim) if ratios else
               Verdict("same", "within noise", 1.0, 1.0, 1.0, 0.05, reasons=("no decode step ran alone",), claim=claim))
    return SectionRecord(lab=LAB, section=TIMELINE, context=RunContext.current(load=load),
                         rounds={"rows": [asdict(r) for r in rows]}, verdicts={"prefill_vs_decode": verdict})


def timeline_from_record(rec) -> list[StepRow]:
    return [StepRow(**r) for r in rec.rounds["rows"]]
