"""Chunked prefill: a long prompt arrives while other requests decode.

Without chunking the whole prompt runs in one step, and every decoding request waits for it: their
next token comes one long prefill later (an inter-token latency spike). With a token budget the
prompt is split into chunks that share steps with the decodes, so each step stays short; the long
request's first token comes later in exchange::

    no chunking   d d d [PPPPPPPPPPPP+d] d d        one slow step
    budget 64     d d d [PP+d][PP+d][PP+d]... d d    several short steps
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import EngineConfig
from labkit.i18n import t
from labkit.metrics import percentile
from labkit.replay import prompt_tokens, text_corpus
from labkit.sampling_params import SamplingParams


@dataclass(frozen=True)
class ChunkedRun:
    label: str
    max_num_batched_tokens: int
    chunked: bool
    decoder_itl_s: tuple[float, ...]     # gaps between consecutive tokens of the decoding requests
    long_ttft_s: float                   # the long prompt's time to first token
    max_step_tokens: int

    @property
    def itl_p50_s(self) -> float:
        return percentile(list(self.decoder_itl_s), 50)

    @property
    def itl_p99_s(self) -> float:
        return percentile(list(self.decoder_itl_s), 99)

    @property
    def itl_max_s(self) -> float:
        return max(self.decoder_itl_s)


def chunk_engine(chunked: bool, budget: int, long_len: int, num_decoders: int):
    from labkit import LLM

    config = EngineConfig(enable_chunked_prefill=chunked, max_num_batched_tokens=budget, max_model_len=1024,
                          max_num_seqs=num_decoders + 1, num_blocks=(num_decoders + 1) * 8 + long_len // 16 + 4)
    return LLM(progress=False, config=config)


def long_prompt_run(llm, label: str, long_len: int, num_decoders: int = 4, decode_tokens: int = 24,
                    join_after: int = 4) -> ChunkedRun:
    """``num_decoders`` short requests decode; after ``join_after`` steps a ``long_len`` prompt joins."""
    engine, corpus = llm.engine, text_corpus(llm.engine)
    params = SamplingParams(temperature=0.0, max_tokens=decode_tokens, ignore_eos=True)
    decoders = [engine.add_request(prompt_tokens(engine, 16, i, corpus), params) for i in range(num_decoders)]
    for _ in range(join_after):
        engine.step()
    long_id = engine.add_request(prompt_tokens(engine, long_len, 99, corpus),
                                 SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
    most = 0
    while engine.has_unfinished_requests():
        engine.step()
        most = max(most, engine.metrics.last.num_scheduled_tokens)
    gaps = [b - a for rid in decoders for times in [engine.get_request(rid).token_times]
            for a, b in zip(times, times[1:])]
    long_req = engine.get_request(long_id).timings()
    return ChunkedRun(label, engine.config.max_num_batched_tokens, engine.config.enable_chunked_prefill,
                      tuple(gaps), long_req.ttft_s, most)


def compare_chunking(long_len: int, budget: int, num_decoders: int = 4, decode_tokens: int = 24) -> tuple[ChunkedRun, ChunkedRun]:
    """(no chunking, the whole prompt in one step; chunked prefill under ``budget`` tokens per step)."""
    whole = chunk_engine(False, max(1024, long_len + num_decoders), long_len, num_decoders)
    chunked = chunk_engine(True, budget, long_len, num_decoders)
    return (long_prompt_run(whole, t("不分块（no chunking）", "no chunking"), long_len, num_decoders, decode_tokens),
            long_prompt_run(chunked, t(f"分块预填充，预算 {budget}（chunked, budget {budget}）", f"chunked, budget {budget}"),
                            long_len, num_decoders, decode_tokens))


def chunking_rounds(long_len: int, budget: int, num_decoders: int = 4, decode_tokens: int = 24,
                    rounds: int = 2) -> list[tuple[ChunkedRun, ChunkedRun]]:
    """``compare_chunking`` ``rounds`` times on the same two engines, the order alternating (no
    chunking first, then chunked first, ...), so that a conclusion can be judged by its spread:
    these are wall-clock times, and another program on the machine lengthens them."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    engines = (chunk_engine(False, max(1024, long_len + num_decoders), long_len, num_decoders),
               chunk_engine(True, budget, long_len, num_decoders))
    labels = (t("不分块（no chunking）", "no chunking"),
              t(f"分块预填充，预算 {budget}（chunked, budget {budget}）", f"chunked, budget {budget}"))
    out = []
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        runs = {i: long_prompt_run(engines[i], labels[i], long_len, num_decoders, decode_tokens) for i in order}
        out.append((runs[0], runs[1]))
    return out


SECTION = "6-chunked"


def record_chunking(pairs: list[tuple[ChunkedRun, ChunkedRun]]):
    """Section 6 as a record: every round's runs, and two verdicts from the per-round ratios (wall
    clock, so the load decides whether they can be trusted): the decoders' ITL P99 without ÷ with
    chunking, and the long prompt's TTFT with ÷ without chunking (its price)."""
    from dataclasses import asdict

    from labkit.labs.common.measure import cores, machine_load, verdict_from_ratios
    from labkit.labs.common.records import RunContext, SectionRecord

    load = machine_load()
    clock = "wall clock (time.perf_counter)"
    itl = verdict_from_ratios([w.itl_p99_s / c.itl_p99_s for w, c in pairs], load=load, cores=cores(), clock=clock,
                              id="chunked_itl_p99", claim=("不分块 ÷ 分块，解码者的 ITL P99", "decoders' ITL P99, no chunking ÷ chunked"))
    ttft = verdict_from_ratios([c.long_ttft_s / w.long_ttft_s for w, c in pairs], load=load, cores=cores(), clock=clock,
                               id="chunked_ttft", claim=("分块 ÷ 不分块，长提示的 TTFT", "long prompt's TTFT, chunked ÷ no chunking"))
    return SectionRecord(lab="03", section=SECTION, context=RunContext.current(load=load),
                         rounds={"pairs": [[asdict(w), asdict(c)] for w, c in pairs]},
                         verdicts={"itl_p99": itl, "ttft": ttft})


def pairs_from_record(rec) -> list[tuple[ChunkedRun, ChunkedRun]]:
    def run(d):
        return ChunkedRun(d["label"], d["max_num_batched_tokens"], d["chunked"], tuple(d["decoder_itl_s"]),
                          d["long_ttft_s"], d["max_step_tokens"])
    return [(run(w), run(c)) for w, c in rec.rounds["pairs"]]
