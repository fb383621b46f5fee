"""How closely ``weights="q4_1"`` (and bf16) follow the fp32 reference, greedy, on the parity prompts.

    python -m bench.q4_agreement               # about a minute: 8 prompts x 48 new tokens per mode

fp32 labkit equals ``transformers`` token for token (tests/engine/test_parity.py), so it is the reference
here. Each mode generates the same prompts (all eight at once, as the parity test does) and the
report gives how many continuations are identical and where the others first differ.
"""

from __future__ import annotations

import argparse

from bench.common import Section, report, set_threads

MODES = {"q4_1 (fp32 activations around the int4 matmuls)": dict(weights="q4_1"),
         "q4_1, dtype bfloat16": dict(weights="q4_1", dtype="bfloat16"),
         "dense bfloat16": dict(dtype="bfloat16")}


def parity_prompts() -> list[str]:
    from tests.prompts import PARITY_PROMPTS  # the prompts tests/engine/test_parity.py checks

    return PARITY_PROMPTS


def agreement_section(max_tokens: int) -> Section:
    from labkit import LLM, EngineConfig, SamplingParams
    from labkit.model.agreement import greedy_agreement

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    reference = LLM(config=EngineConfig(device="cpu"), progress=False)
    prompts = [reference.tokenizer.encode_prompt(p) for p in parity_prompts()]
    ref = [o.token_ids for o in reference.generate(prompts, params)]
    rows = []
    for label, options in MODES.items():
        llm = LLM(config=EngineConfig(device="cpu", **options), progress=False)
        a = greedy_agreement(ref, [o.token_ids for o in llm.generate(prompts, params)])
        firsts = ", ".join("—" if d is None else str(d) for d in a.divergences)
        rows.append([label, f"{a.num_identical}/{a.num_prompts}", f"{a.mean_first_divergence:.1f}", firsts])
    notes = [f"{len(prompts)} parity prompts (tests/prompts.py), {max_tokens} new tokens, greedy, batched as in "
             "tests/engine/test_parity.py; reference: labkit fp32 (= transformers token for token)",
             f"mean first divergence: position of the first differing token, an identical prompt counting as "
             f"{max_tokens}; — = identical"]
    headers = ["mode", "identical prompts", "mean first divergence", "first divergence per prompt"]
    return Section("Greedy agreement with the fp32 reference", headers, rows, notes)


def main(argv: list[str] | None = None) -> list[Section]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    set_threads(args.threads)
    return report("weights='q4_1' vs the fp32 reference", "bench.q4_agreement", argv,
                  [agreement_section(args.max_tokens)])


if __name__ == "__main__":
    main()
