"""Lab 02, section 5: sharing blocks. Prefix caching, and parallel sampling with copy-on-write.

Prefix caching (vLLM's automatic prefix caching). A full block's key chains on its parent's key,
``key_i = hash((key_{i-1}, tokens of block i))``, so a hit on block i means the whole prefix up to
its end matches. Only full blocks are keyed, and the block holding the prompt's last token is never
taken from the cache: its logits are needed to sample the first output token::

    prompt (B = 16, 50 tokens)   |block 0 |block 1 |block 2 |bl 3: 2 tokens|
    cached blocks may cover       0 .. 47 (at most (50 - 1) // 16 = 3 full blocks)
    a 48-token prompt             hits at most (48 - 1) // 16 = 2 blocks: token 47 is recomputed

Parallel sampling (n > 1). The children fork the parent's block table: every prompt block is held
``n`` times (ref count n). The first write into a shared, partly filled block copies it first::

    after fork       A:[3 7 9*]  A#1:[3 7 9*]  A#2:[3 7 9*]      9* shared, ref count 3
    A#1 writes 9     A#1:[3 7 12]  (block 9 copied to 12; 9's ref count 3 -> 2)

Memory saved against no sharing = 1 - (distinct physical blocks) / (sum of block-table lengths):
each extra holder of a block is one block that need not exist (Kwon et al., SOSP'23, §4.4, §6.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.events import PrefixHit, RequestFinished, StepEnd
from labkit.kv.snapshot import BlockMapSnapshot
from labkit.labs.common.measure import Verdict, cores, machine_load, verdict_from_ratios, wall_clock
from labkit.labs.common.references import cite
from labkit.metrics import StepRecorder
from labkit.replay import text_corpus
from labkit.sampling_params import SamplingParams
from labkit.traces import LogNormalLengths, TraceRequest, load_prompts, synthetic_trace

# ----------------------------------------------------------------------------- prefix caching

@dataclass(frozen=True)
class PrefixRun:
    """The same requests served one after another, prefix caching on or off."""

    caching: bool
    prefix_len: int                 # tokens shared by every prompt
    prompt_lens: tuple[int, ...]
    ttft_s: tuple[float, ...]       # per request, in order
    prefill_tokens: int             # prompt tokens the model computed
    hit_tokens: int                 # prompt tokens taken from the cache (Σ PrefixHit)
    queries: int                    # engine.stats()["prefix_cache_queries"]
    hits: int                       # engine.stats()["prefix_cache_hits"]
    load: tuple = (None, None)      # machine load before and after the off/on pair was served

    @property
    def hit_rate(self) -> float:
        return 100.0 * self.hits / self.queries if self.queries else 0.0

    def mean_ttft_after_first(self) -> float:
        """Mean TTFT of requests 2..N: the first one finds an empty cache either way."""
        later = self.ttft_s[1:] or self.ttft_s
        return sum(later) / len(later)


def few_shot_prefix(llm, num_shots: int) -> list[int]:
    """A system instruction and ``num_shots`` example questions (the shipped chat prompts), as ids."""
    examples = load_prompts("chat", "train")[:num_shots]
    text = "You are a helpful assistant. Answer like the examples.\n\n" + "".join(
        f"Example {i + 1}:\n{q}\nAnswer: (a short, clear answer)\n\n" for i, q in enumerate(examples))
    return llm.tokenizer.encode(text)


def shared_prefix_prompts(llm, prefix: list[int], num_requests: int, question_len: int = 12) -> list[list[int]]:
    """``prefix`` followed by a different real-text question for each request."""
    corpus = text_corpus(llm.engine)
    return [prefix + corpus[(997 * (i + 1)) % (len(corpus) - question_len):][:question_len]
            for i in range(num_requests)]


def prefix_server(caching: bool, num_blocks: int = 256, block_size: int = 16):
    from labkit import LLM

    return LLM(progress=False, config=EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                                   enable_prefix_caching=caching))


def serve_one_by_one(llm, prompts: list[list[int]], prefix_len: int, max_tokens: int = 1) -> PrefixRun:
    """Each prompt alone on the engine, in order (its TTFT is then its own prefill time)."""
    engine = llm.engine
    ttft: dict[str, float] = {}
    hit = [0]

    def on_event(event) -> None:
        if isinstance(event, RequestFinished):
            ttft[event.request_id] = event.timings.ttft_s
        elif isinstance(event, PrefixHit):
            hit[0] += event.num_cached_tokens

    engine.hooks.subscribe(on_event, RequestFinished, PrefixHit)
    before = engine.stats()
    ids = []
    real_clock = engine.clock
    if not engine.simulated:        # TTFT on measure's wall clock: the injected one inside clock_override
        engine.clock = wall_clock()
    try:
        with StepRecorder(engine) as rec:
            for prompt in prompts:
                ids.append(engine.add_request(list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
                while engine.has_unfinished_requests():
                    engine.step()
    finally:
        engine.hooks.unsubscribe(on_event)
        engine.clock = real_clock
    after = engine.stats()
    return PrefixRun(engine.config.enable_prefix_caching, prefix_len, tuple(len(p) for p in prompts),
                     tuple(ttft[rid] for rid in ids), sum(r.prefill_tokens for r in rec.rows), hit[0],
                     after["prefix_cache_queries"] - before["prefix_cache_queries"],
                     after["prefix_cache_hits"] - before["prefix_cache_hits"])


def compare_prefix_caching(prompts: list[list[int]], prefix_len: int, block_size: int = 16) -> tuple[PrefixRun, PrefixRun]:
    """(off, on) on fresh engines, same prompts, same order, interleaved request by request (the
    order alternating: off on, on off, ...) so that a slow spell of the machine falls on both; the
    machine load seen is kept."""
    llms = {False: prefix_server(False, block_size=block_size), True: prefix_server(True, block_size=block_size)}
    runs: dict[bool, list[PrefixRun]] = {False: [], True: []}
    before = machine_load()
    for i, prompt in enumerate(prompts):
        for caching in ((False, True) if i % 2 == 0 else (True, False)):
            runs[caching].append(serve_one_by_one(llms[caching], [prompt], prefix_len))
    load = (before, machine_load())
    off, on = (_joined(runs[c], load) for c in (False, True))
    return off, on


def _joined(parts: list[PrefixRun], load: tuple) -> PrefixRun:
    """Requests served one call each, as one run."""
    first = parts[0]
    return PrefixRun(first.caching, first.prefix_len, tuple(n for p in parts for n in p.prompt_lens),
                     tuple(x for p in parts for x in p.ttft_s), sum(p.prefill_tokens for p in parts),
                     sum(p.hit_tokens for p in parts), sum(p.queries for p in parts), sum(p.hits for p in parts), load)


TTFT_CLOCK = "wall clock (the engine's request timings: TTFT)"


def ttft_verdict(off: PrefixRun, on: PrefixRun, id: str = "", name: str = "") -> Verdict:
    """TTFT with prefix caching off over on (above 1: caching shortens it), request by request from
    the 2nd on (the 1st finds an empty cache either way): each request is one paired round. Requests
    alike in length should take alike: a run whose TTFTs spread widely was disturbed."""
    later_off, later_on = off.ttft_s[1:] or off.ttft_s, on.ttft_s[1:] or on.ttft_s
    pairs = [a / b for a, b in zip(later_off, later_on) if b > 0]
    ratio = off.mean_ttft_after_first() / on.mean_ttft_after_first() if on.mean_ttft_after_first() > 0 else math.inf
    spreads = [max(x) / min(x) for x in (later_off, later_on) if len(x) > 1 and min(x) > 0]
    loads = [x for x in (*off.load, *on.load) if x is not None]
    where = f"（{name}）" if name else ""
    return verdict_from_ratios(pairs or [ratio], ratio=ratio, margin=0.05, load=max(loads, default=None), cores=cores(),
                               spread=max(spreads, default=None), clock=TTFT_CLOCK, load_before=off.load[0],
                               load_after=on.load[1], id=id,
                               claim=(f"首 token 延迟（TTFT）前缀缓存关 ÷ 开{where}",
                                      f"TTFT with prefix caching off over on{f' ({name})' if name else ''}"))


PREFIX_SECTION = "5.1-prefix"


def record_prefix(prefix: dict[str, tuple[PrefixRun, PrefixRun]], lab: str | None = "02"):
    """Section 5.1 as a record (``labkit.labs.common.records``): per shared prefix both runs whole (the
    counted hits and prefill tokens, every request's TTFT, the loads) and the TTFT off ÷ on verdict;
    the table, the figure title and the sentences render from it alone (``views.prefix_narration``).
    With ``lab`` each verdict is also recorded in the learner's results summary."""
    from dataclasses import asdict

    from labkit.labs.common.measure import record_verdict
    from labkit.labs.common.records import RunContext, SectionRecord

    verdicts = {name: ttft_verdict(off, on, id=f"prefix_ttft/{name}", name=name) for name, (off, on) in prefix.items()}
    if lab is not None:
        for v in verdicts.values():
            record_verdict(lab, v)
    loads = [x for off, on in prefix.values() for x in (*off.load, *on.load) if x is not None]
    return SectionRecord(
        lab="02", section=PREFIX_SECTION, context=RunContext.current(load=max(loads) if loads else None),
        rounds={name: {"ttft_off_s": list(off.ttft_s), "ttft_on_s": list(on.ttft_s)} for name, (off, on) in prefix.items()},
        values={"runs": {name: {"off": asdict(off), "on": asdict(on)} for name, (off, on) in prefix.items()}},
        verdicts=verdicts)


def prefix_from_record(rec) -> dict[str, tuple[PrefixRun, PrefixRun]]:
    """Section 5.1's runs again, from its record alone."""
    def run(d) -> PrefixRun:
        return PrefixRun(**{**d, "prompt_lens": tuple(d["prompt_lens"]), "ttft_s": tuple(d["ttft_s"]),
                            "load": tuple(d.get("load") or (None, None))})

    return {name: (run(pair["off"]), run(pair["on"])) for name, pair in rec.values["runs"].items()}


def ttft_ratio_spread(off: PrefixRun, on: PrefixRun) -> tuple[float, float] | None:
    """Request by request (the 2nd on: the first finds an empty cache either way), TTFT off ÷ on:
    the (lowest, highest) ratio this run measured; None without such a pair."""
    pairs = [a / b for a, b in zip(off.ttft_s[1:], on.ttft_s[1:]) if b > 0]
    return (min(pairs), max(pairs)) if pairs else None


def cacheable_tokens(prompt_len: int, block_size: int) -> int:
    """The most prompt tokens a hit can cover: full blocks before the block of the last token."""
    return (prompt_len - 1) // block_size * block_size


def repeat_prompt_hits(prompt: list[int], block_size: int = 16) -> tuple[int, int]:
    """Send ``prompt`` twice to a fresh caching engine: (tokens the 2nd send took from the cache,
    prompt tokens the model computed for the 2nd send)."""
    llm = prefix_server(True, num_blocks=64, block_size=block_size)
    serve_one_by_one(llm, [prompt], 0)
    second = serve_one_by_one(llm, [prompt], 0)
    return second.hit_tokens, second.prefill_tokens


# ----------------------------------------------------------------------------- parallel sampling

@dataclass(frozen=True)
class ForkStep:
    """One step of a parallel-sampling run, counted from the block tables of the snapshot."""

    step: int
    table_blocks: int        # Σ len(block table): blocks needed with no sharing
    distinct_blocks: int     # physical blocks held
    shared_blocks: int       # blocks with ref count > 1
    copies: int              # copy-on-write this step: a table entry replaced at the same index

    @property
    def saved_blocks(self) -> int:
        return self.table_blocks - self.distinct_blocks

    @property
    def saving(self) -> float:
        return 100.0 * self.saved_blocks / self.table_blocks if self.table_blocks else 0.0


@dataclass(frozen=True)
class ForkRun:
    n: int
    prompt_len: int
    max_tokens: int
    block_size: int
    steps: tuple[ForkStep, ...]
    events: tuple[StepEnd, ...]

    @property
    def num_copies(self) -> int:
        return sum(s.copies for s in self.steps)

    def mean_saving(self) -> float:
        """Memory saved against no sharing, averaged over steps where the sequences held blocks."""
        held = [s for s in self.steps if s.table_blocks]
        return sum(s.saving for s in held) / len(held) if held else 0.0

    def peak_shared(self) -> int:
        return max((s.shared_blocks for s in self.steps), default=0)


def fork_step(prev: BlockMapSnapshot | None, snap: BlockMapSnapshot, step: int) -> ForkStep:
    tables = dict(snap.block_tables)
    before = dict(prev.block_tables) if prev is not None else {}
    copies = sum(1 for rid, table in tables.items() for i, b in enumerate(before.get(rid, ())[:len(table)])
                 if table[i] != b)
    distinct = len({b for table in tables.values() for b in table})
    return ForkStep(step, sum(len(t) for t in tables.values()), distinct,
                    sum(1 for r in snap.ref_cnt if r > 1), copies)


def _run_recorded(engine, requests: list[tuple[list[int], SamplingParams]]) -> tuple[list[ForkStep], list[StepEnd]]:
    """Add ``requests`` at once, run them to the end, count every step's block tables."""
    events: list[StepEnd] = []
    handler = events.append          # one bound method: unsubscribe compares by identity
    engine.hooks.subscribe(handler, StepEnd)
    try:
        for prompt, params in requests:
            engine.add_request(list(prompt), params)
        while engine.has_unfinished_requests():
            engine.step()
    finally:
        engine.hooks.unsubscribe(handler)
    steps, prev = [], None
    for event in events:
        steps.append(fork_step(prev, event.block_map, event.step))
        prev = event.block_map
    return steps, events


def parallel_sampling(llm, prompt: list[int], n: int, max_tokens: int, temperature: float = 0.8,
                      seed: int = 0) -> ForkRun:
    """One request with ``n`` samples; every step's block tables recorded."""
    params = SamplingParams(n=n, temperature=temperature, seed=seed, max_tokens=max_tokens, ignore_eos=True)
    steps, events = _run_recorded(llm.engine, [(prompt, params)])
    return ForkRun(n, len(prompt), max_tokens, llm.engine.config.block_size, tuple(steps), tuple(events))


def alpaca_like_trace(num_requests: int, seed: int = 0) -> list[TraceRequest]:
    """Log-normal lengths (sigma 1) whose means are Alpaca's (the cited row, Kwon et al. Fig. 11b):
    for a log-normal, mean = median * e^(sigma^2 / 2)."""
    prompt_mean, output_mean = (float(x) for x in cite("Alpaca mean input/output").value.split("/"))
    def median(mean: float) -> float:
        return mean / math.exp(0.5)
    return synthetic_trace(num_requests, seed=seed, prompt_len=LogNormalLengths(median(prompt_mean), 1.0, 1, 1024),
                           output_len=LogNormalLengths(median(output_mean), 1.0, 1, 1024))


def parallel_sampling_trace(llm, trace: list[TraceRequest], n: int) -> ForkRun:
    """Every request of ``trace`` sampled ``n`` ways at once (exact lengths); ``prompt_len`` and
    ``max_tokens`` of the result are the trace's means. Simulated model: token ids are bytes."""
    requests = [([97 + (i + j) % 26 for j in range(r.prompt_len)],
                 SamplingParams(n=n, temperature=1.0, seed=i, max_tokens=r.output_len, ignore_eos=True))
                for i, r in enumerate(trace)]
    steps, events = _run_recorded(llm.engine, requests)
    def mean(values: list[int]) -> int:
        return round(sum(values) / len(values))
    return ForkRun(n, mean([r.prompt_len for r in trace]), mean([r.output_len for r in trace]),
                   llm.engine.config.block_size, tuple(steps), tuple(events))
