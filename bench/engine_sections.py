"""Engine-level benchmark sections for ``bench/gpu.py``: parity, trace throughput, decode step time.

Each section works on any device: ``python bench/gpu.py`` runs them on the GPU at full size, and
``python bench/gpu.py --device cpu --smoke`` runs them here at toy sizes to prove the code works.

- Greedy parity vs ``transformers`` (same device, same dtype). In bf16 two correct implementations
  may round differently and then pick a different near-tie token, after which the texts differ for
  good. So the check is: tokens equal up to the first divergence, and at that position each side's
  token is within the other side's top-5.
- Throughput on a heavy-tailed trace (``labkit.traces.synthetic_trace``, every request at t = 0):
  labkit's continuous batching vs ``transformers`` static padded batches (each batch runs until
  its longest request ends) vs ``transformers`` continuous batching (``generate_batch``'s manager).
  Useful tokens = the trace's output lengths; padding and tokens past a request's end are waste.
- Decode step time vs batch size: one step of B decoding requests. While decode is memory-bound
  (every step reads all weights once) the step time stays nearly flat as B grows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from bench.common import Section, hf_model, left_padded, median


@dataclass
class EngineBench:
    """Where and how the engine sections run."""

    device: str
    dtype: str
    attention_backend: str        # "reference" or "triton"
    model: str | None = None
    smoke: bool = False
    _hf: object = field(default=None, repr=False)

    def llm(self, **config):
        from labkit import LLM, EngineConfig

        cfg = EngineConfig(device=self.device, dtype=self.dtype, attention_backend=self.attention_backend,
                           **config)
        return LLM(model=self.model, config=cfg, progress=False)

    def hf(self, model_dir):
        if self._hf is None:
            self._hf = hf_model(model_dir, self.device, getattr(torch, self.dtype))
        return self._hf

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


def base_token_ids(tokenizer, length: int) -> list[int]:
    """Real text (the chat prompts, concatenated) as token ids, at least ``length`` of them."""
    from labkit.traces import load_prompts

    ids = tokenizer.encode("\n\n".join(load_prompts("chat")))
    while len(ids) < length:
        ids = ids + ids
    return ids


def prompt_of_length(base: list[int], length: int, offset: int = 0) -> list[int]:
    start = offset % max(len(base) - length, 1)
    return base[start:start + length]


# ----------------------------------------------------------------------------- parity

def capture_top5(llm) -> dict[str, list[list[int]]]:
    """Record, per request, the top-5 token ids of every logits row the runner returns."""
    rows: dict[str, list[list[int]]] = defaultdict(list)
    runner = llm.engine.runner
    inner = type(runner).execute.__get__(runner)

    def execute(sched):
        logits = inner(sched)
        end = 0
        for s in sched.scheduled:
            if s.num_logits:
                end += s.num_logits
                rows[s.request_id].append(logits[end - 1].topk(5).indices.tolist())
        return logits

    runner.execute = execute
    return rows


def hf_greedy_top5(hf, prompt: list[int], max_tokens: int, device: str) -> tuple[list[int], list[list[int]]]:
    x = torch.tensor([prompt], device=device)
    with torch.inference_mode():
        out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_tokens, do_sample=False,
                          output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    return tokens, [step[0].topk(5).indices.tolist() for step in out.logits]


def compare_greedy(ours: list[int], ours_top5: list[list[int]], theirs: list[int],
                   theirs_top5: list[list[int]]) -> tuple[str, str]:
    """(first divergence, verdict): equal up to the divergence, then each token in the other's top-5."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            ok = a in theirs_top5[i] and b in ours_top5[i]
            return str(i), "pass (near-tie)" if ok else "FAIL: not in the other's top-5"
    if len(ours) != len(theirs):
        return str(min(len(ours), len(theirs))), "FAIL: lengths differ"
    return "none", "pass (identical)"


def parity_section(bench: EngineBench) -> Section:
    from labkit import SamplingParams
    from labkit.traces import load_prompts

    num_prompts, max_tokens = (2, 8) if bench.smoke else (8, 64)
    texts = [p for pair in zip(load_prompts("chat", "heldout"), load_prompts("code", "heldout")) for p in pair]
    llm = bench.llm()
    top5 = capture_top5(llm)
    prompts = [llm.tokenizer.encode_prompt(t) for t in texts[:num_prompts]]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
    hf = bench.hf(llm.engine.model_dir)
    rows = []
    for i, (prompt, out) in enumerate(zip(prompts, outs)):
        theirs, theirs_top5 = hf_greedy_top5(hf, prompt, max_tokens, bench.device)
        where, verdict = compare_greedy(out.token_ids, top5[out.request_id], theirs, theirs_top5)
        rows.append([str(i), str(len(prompt)), str(max_tokens), where, verdict])
    notes = [f"labkit: {len(prompts)} prompts in one continuous batch; transformers: one prompt at a time; "
             f"both {bench.dtype} on {bench.device}, greedy, no EOS stop",
             "pass = tokens equal up to the first divergence, and there each side's token is within the "
             "other's top-5 (a rounding-level near-tie, expected in bf16/fp16)"]
    return Section("Greedy parity vs transformers", ["prompt", "prompt tokens", "new tokens",
                                                     "first divergence", "verdict"], rows, notes)


# ----------------------------------------------------------------------------- trace throughput

@dataclass(frozen=True)
class TraceSetup:
    num_requests: int
    prompt_len: tuple      # LogNormalLengths(median, sigma, min, max)
    output_len: tuple
    max_num_seqs: int

    @classmethod
    def for_run(cls, smoke: bool) -> "TraceSetup":
        if smoke:
            return cls(6, (16, 0.5, 4, 32), (8, 0.8, 2, 16), 4)
        return cls(256, (128, 1.0, 8, 1024), (96, 1.0, 4, 512), 64)


def trace_workload(bench: EngineBench, tokenizer, setup: TraceSetup):
    """(trace, prompt token ids): lengths from the trace, tokens cut from real text."""
    from labkit.traces import synthetic_trace

    trace = synthetic_trace(setup.num_requests, seed=0, prompt_len=setup.prompt_len, output_len=setup.output_len)
    base = base_token_ids(tokenizer, max(r.prompt_len for r in trace) + setup.num_requests)
    return trace, [prompt_of_length(base, r.prompt_len, offset=7 * i) for i, r in enumerate(trace)]


def run_labkit_trace(bench: EngineBench, llm, trace, prompts) -> float:
    from labkit import SamplingParams

    params = [SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True) for r in trace]
    bench.sync()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    bench.sync()
    assert [len(o.token_ids) for o in outs] == [r.output_len for r in trace]
    return time.perf_counter() - t0


def run_hf_static(bench: EngineBench, hf, trace, prompts, batch: int) -> tuple[float, int]:
    """(seconds, tokens computed): arrival-order batches, each until its longest request ends."""
    computed, seconds = 0, 0.0
    pad = int(hf.generation_config.pad_token_id)
    for i in range(0, len(prompts), batch):
        ids, mask = left_padded(prompts[i:i + batch], pad, bench.device)
        longest = max(r.output_len for r in trace[i:i + batch])
        bench.sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            hf.generate(ids, attention_mask=mask, max_new_tokens=longest, do_sample=False)
        bench.sync()
        seconds += time.perf_counter() - t0
        computed += ids.shape[0] * longest
    return seconds, computed


def hf_continuous_config(bench: EngineBench, setup: TraceSetup, trace):
    """Small explicit sizes on CPU (the defaults size the cache from free memory and pad every
    step's keys to 16k positions, far too slow there); transformers' defaults on CUDA. The model
    keeps its SDPA attention: switching to flash attention may fetch kernels from the hub."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    if bench.device == "cuda":
        return ContinuousBatchingConfig(max_requests_per_batch=setup.max_num_seqs, auto_switch_to_flash=False)
    longest = max(r.prompt_len + r.output_len for r in trace)
    blocks = setup.max_num_seqs * (-(-longest // 16) + 1)
    return ContinuousBatchingConfig(page_size=16, num_blocks=blocks, max_batch_tokens=256,
                                    max_requests_per_batch=setup.max_num_seqs, allow_block_sharing=False,
                                    auto_switch_to_flash=False)


def run_hf_continuous(bench: EngineBench, hf, trace, prompts, setup: TraceSetup, timeout_s: float) -> float:
    """Seconds for ``transformers``' continuous-batching manager to finish the trace."""
    import copy

    gen = copy.deepcopy(hf.generation_config)
    gen.do_sample, gen.eos_token_id = False, -1
    cfg = hf_continuous_config(bench, setup, trace)
    with hf.continuous_batching_context_manager(generation_config=gen, block=True, timeout=5,
                                                continuous_batching_config=cfg, warmup=bench.device == "cuda") as m:
        t0 = time.perf_counter()
        for p, r in zip(prompts, trace):
            m.add_request(p, max_new_tokens=r.output_len)
        done = 0
        while done < len(trace):
            result = m.get_result(timeout=1)
            if result is not None and result.is_finished():
                done += 1
            elif result is None and (not m.is_running() or time.perf_counter() - t0 > timeout_s):
                raise RuntimeError(f"finished {done}/{len(trace)} requests before stopping")
        return time.perf_counter() - t0


def throughput_section(bench: EngineBench) -> Section:
    setup = TraceSetup.for_run(bench.smoke)
    longest = setup.prompt_len[3] + setup.output_len[3]
    llm = bench.llm(max_num_seqs=setup.max_num_seqs, num_blocks=setup.max_num_seqs * (-(-longest // 16) + 1),
                    max_num_batched_tokens=max(2048, setup.prompt_len[3]))
    trace, prompts = trace_workload(bench, llm.tokenizer, setup)
    hf = bench.hf(llm.engine.model_dir)
    useful = sum(r.output_len for r in trace)
    run_labkit_trace(bench, llm, trace[:2], prompts[:2])                 # warm-up
    ours = run_labkit_trace(bench, llm, trace, prompts)
    static_s, static_computed = run_hf_static(bench, hf, trace, prompts, setup.max_num_seqs)
    rows = [["labkit (continuous batching, paged KV)", f"{ours:.1f}", f"{useful / ours:.0f}", str(useful), "1.00x"],
            ["transformers generate, static padded batches", f"{static_s:.1f}", f"{useful / static_s:.0f}",
             str(static_computed), f"{static_s / ours:.2f}x"]]
    try:
        cb_s = run_hf_continuous(bench, hf, trace, prompts, setup, timeout_s=300 if not bench.smoke else 120)
        rows.append(["transformers continuous batching (generate_batch manager)", f"{cb_s:.1f}",
                     f"{useful / cb_s:.0f}", str(useful), f"{cb_s / ours:.2f}x"])
    except Exception as exc:  # optional baseline: report why it is missing
        rows.append(["transformers continuous batching", "-", "-", "-", f"unavailable: {type(exc).__name__}: {exc}"])
    p = sorted(r.prompt_len for r in trace)
    o = sorted(r.output_len for r in trace)
    notes = [f"synthetic_trace(seed=0): {len(trace)} requests at t = 0, prompt tokens median {p[len(p) // 2]} "
             f"(max {p[-1]}), output tokens median {o[len(o) // 2]} (max {o[-1]}); heavy-tailed (log-normal)",
             f"at most {setup.max_num_seqs} requests in flight for every system; static batches are formed in "
             "arrival order and run until their longest request ends",
             "useful tokens/s = the trace's output tokens / wall time; 'tokens computed' counts what each "
             "system generated, including static batching's tokens past a request's end",
             "labkit speed-up = this system's wall time / labkit's (above 1: labkit is faster)"]
    headers = ["system", "wall s", "useful tokens/s", "tokens computed", "labkit speed-up"]
    return Section("Throughput on a heavy-tailed trace", headers, rows, notes)


# ----------------------------------------------------------------------------- decode step time

def decode_step_ms(bench: EngineBench, llm, batch: int, prompts: list[list[int]], iters: int) -> float:
    """Median wall time of one engine step with ``batch`` requests all in decode."""
    from labkit import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=iters + 4, ignore_eos=True)
    ids = [llm.engine.add_request(prompts[i % len(prompts)], params) for i in range(batch)]
    reqs = [llm.engine.get_request(r) for r in ids]
    while any(not r.output_token_ids for r in reqs):        # prefill (possibly chunked)
        llm.engine.step()
    llm.engine.step()                                        # one untimed decode step
    times = []
    for _ in range(iters):
        bench.sync()
        t0 = time.perf_counter()
        llm.engine.step()
        bench.sync()
        times.append(time.perf_counter() - t0)
    for rid in ids:
        llm.engine.abort(rid)
    return 1e3 * median(times)


def decode_steps_section(bench: EngineBench) -> Section:
    batches, prompt_len, iters = ([1, 2, 4], 8, 2) if bench.smoke else ([1, 2, 4, 8, 16, 32, 64, 128, 256], 128, 10)
    per_seq = -(-(prompt_len + iters + 8) // 16)
    llm = bench.llm(max_num_seqs=max(batches), num_blocks=max(batches) * per_seq + 8,
                    max_num_batched_tokens=max(2048, prompt_len))
    base = base_token_ids(llm.tokenizer, prompt_len + 64)
    prompts = [prompt_of_length(base, prompt_len, offset=i) for i in range(8)]
    decode_step_ms(bench, llm, 1, prompts, 2)                # warm-up
    rows, first = [], None
    for b in batches:
        ms = decode_step_ms(bench, llm, b, prompts, iters)
        first = first or ms
        rows.append([str(b), f"{ms:.2f}", f"{1e3 * b / ms:.0f}", f"{ms / first:.2f}"])
    notes = [f"{prompt_len}-token prompts, then {iters} timed decode steps (median), after one untimed step",
             "memory-bound decode: while the step time stays near the batch-1 time, extra requests ride along "
             "almost for free (each step reads every weight once, whatever the batch)"]
    return Section("Decode step time vs batch size", ["batch", "step ms", "tokens/s", "step / batch-1 step"],
                   rows, notes)
