"""Replay a trace into an engine, honouring arrival times on the engine's clock.

The real model runs on the wall clock (requests are added once their arrival time has passed; an idle
engine sleeps until the next arrival). The simulated model runs on its virtual clock, which jumps
over idle gaps. Each trace request becomes a prompt of exactly ``prompt_len`` tokens and is
generated for exactly ``output_len`` tokens (``ignore_eos``), so lengths follow the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from labkit.sampling_params import SamplingParams
from labkit.traces import TraceRequest, load_prompts


@dataclass
class ReplayResult:
    request_ids: list[str]
    stats: dict
    num_clipped: int = 0
    steps: int = 0
    wall_s: float = 0.0
    outputs: dict[str, list[int]] = field(default_factory=dict)


def fit_lengths(tr: TraceRequest, max_model_len: int, capacity_tokens: int) -> tuple[int, int]:
    """Clip a trace request so prompt + output fits the model and the pool (prompt first)."""
    limit = min(max_model_len, capacity_tokens)
    prompt = max(1, min(tr.prompt_len, limit - 1))
    output = max(1, min(tr.output_len, limit - prompt))
    return prompt, output


def prompt_tokens(engine, length: int, index: int, corpus: list[int] | None) -> list[int]:
    """``length`` token ids: a window of a real-text corpus (real model) or letters (simulated)."""
    if corpus is None:
        return [97 + (index + i) % 26 for i in range(length)]
    start = (index * 7919) % len(corpus)
    reps = (start + length) // len(corpus) + 1
    return (corpus * reps)[start:start + length]


def text_corpus(engine) -> list[int] | None:
    if engine.simulated:
        return None
    text = "\n\n".join(load_prompts("chat") + load_prompts("copy") + load_prompts("code"))
    return engine.tokenizer.encode(text)


def replay(engine, trace: list[TraceRequest], *, max_steps: int | None = None, keep_outputs: bool = False,
           progress: bool = False, on_step=None) -> ReplayResult:
    corpus = text_corpus(engine)
    order = sorted(range(len(trace)), key=lambda i: trace[i].arrival_s)
    t_start, wall0 = engine.clock(), time.perf_counter()
    ids, clipped, steps, nxt = [], 0, 0, 0
    bar = tqdm(total=len(trace), disable=not progress, desc="replay", unit="req")
    finished = 0
    while nxt < len(order) or engine.has_unfinished_requests():
        now = engine.clock()
        while nxt < len(order) and t_start + trace[order[nxt]].arrival_s <= now:
            tr = trace[order[nxt]]
            p_len, o_len = fit_lengths(tr, engine.max_model_len, engine.kv.capacity_tokens())
            clipped += (p_len, o_len) != (tr.prompt_len, tr.output_len)
            ids.append(engine.add_request(prompt_tokens(engine, p_len, order[nxt], corpus),
                                          SamplingParams(max_tokens=o_len, ignore_eos=True),
                                          arrival_time=t_start + tr.arrival_s))
            nxt += 1
        if not engine.has_unfinished_requests():
            _wait_until(engine, t_start + trace[order[nxt]].arrival_s)
            continue
        outs = engine.step()
        steps += 1
        done = sum(o.finished for o in outs)
        finished += done
        bar.update(done)
        if on_step is not None:
            on_step(engine, steps)
        if max_steps is not None and steps >= max_steps:
            break
    bar.close()
    result = ReplayResult(ids, engine.stats(), clipped, steps, time.perf_counter() - wall0)
    if keep_outputs:
        result.outputs = {rid: list(engine.get_request(rid).output_token_ids) for rid in ids}
    return result


def _wait_until(engine, t: float) -> None:
    if engine.simulated:
        engine.clock.advance_to(t)
    else:
        time.sleep(max(0.0, t - engine.clock()))


def static_decode_occupancy(output_lens: list[int], max_num_seqs: int) -> float:
    """What lengths alone predict for static batching: batches of ``max_num_seqs`` in arrival order
    run until their longest request ends, so the share of decode slot-steps doing work is
    sum(o_i - 1) / (max_num_seqs x (max o_i - 1)) over batches (the first token comes from prefill)."""
    busy = total = 0
    for i in range(0, len(output_lens), max_num_seqs):
        batch = output_lens[i:i + max_num_seqs]
        busy += sum(o - 1 for o in batch)
        total += max_num_seqs * (max(batch) - 1)
    return 100.0 * busy / total if total else 0.0
