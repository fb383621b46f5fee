"""What ``labkit bench`` sends: prompts with an optional output length each.

Sources (``--dataset``):

- ``chat`` / ``code`` / ``copy``: the project's prompt sets (data/prompts), cycled to ``num_prompts``;
  output length ``--output-len`` (labkit bench: 128 unless given);
- ``synthetic``: labkit.traces.synthetic_trace, heavy-tailed (log-normal) prompt and output lengths;
- ``azure-conv`` / ``azure-code``: labkit.traces.azure_like_trace, lengths shaped like the Azure
  LLM inference trace 2023, scaled down by ``scale_trace`` to ``--max-prompt-len`` / ``--max-output-len``;
- a path to a JSONL file, one ``{"prompt": "...", "output_len": 64}`` per line (``output_len`` optional).

Trace prompts are built from the prompt sets' words, one word per requested prompt token: a client
that may talk to any server has no tokenizer, so lengths are approximate (about 1.3 tokens per
English word for SmolLM2's tokenizer). A request's output length is sent as ``max_tokens``; to make
the server produce exactly that many tokens add ``--ignore-eos`` (an extension some servers lack,
as in ``vllm bench serve``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from labkit.traces import PROMPT_SETS, LogNormalLengths, azure_like_trace, load_prompts, scale_trace, synthetic_trace

TRACE_DATASETS = ("synthetic", "azure-conv", "azure-code")
DATASETS = PROMPT_SETS + TRACE_DATASETS


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    output_len: int | None = None


def build_workload(dataset: str, num_prompts: int, seed: int = 0, output_len: int | None = None,
                   max_prompt_len: int = 256, max_output_len: int = 128) -> list[BenchRequest]:
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    if dataset in PROMPT_SETS:
        prompts = load_prompts(dataset)
        return [BenchRequest(prompts[i % len(prompts)], output_len) for i in range(num_prompts)]
    if dataset in TRACE_DATASETS:
        return _from_trace(dataset, num_prompts, seed, max_prompt_len, max_output_len)
    path = Path(dataset)
    if path.suffix == ".jsonl" or path.is_file():
        return load_jsonl(path, num_prompts, output_len)
    raise ValueError(f"dataset must be one of {DATASETS} or a .jsonl file, got {dataset!r}")


def load_jsonl(path: Path, num_prompts: int, output_len: int | None = None) -> list[BenchRequest]:
    if not path.is_file():
        raise ValueError(f"dataset file {path} not found")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} holds no prompts")
    for i, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str):
            raise ValueError(f"{path}:{i + 1}: each line needs a string \"prompt\"")
    return [BenchRequest(row["prompt"], row.get("output_len", output_len))
            for row in (rows[i % len(rows)] for i in range(num_prompts))]


def _from_trace(dataset: str, num_prompts: int, seed: int, max_prompt_len: int,
                max_output_len: int) -> list[BenchRequest]:
    if dataset == "synthetic":
        trace = synthetic_trace(num_prompts, seed=seed,
                                prompt_len=LogNormalLengths(48, 1.0, 4, max_prompt_len),
                                output_len=LogNormalLengths(32, 1.0, 2, max_output_len))
    else:
        trace = azure_like_trace(dataset.split("-")[1], num_prompts, seed=seed)
    trace = scale_trace(trace, max_prompt_len, max_output_len)
    words = " ".join(load_prompts("chat") + load_prompts("code")).split()
    return [BenchRequest(_words(words, r.prompt_len, i), r.output_len) for i, r in enumerate(trace)]


def _words(pool: list[str], n: int, offset: int) -> str:
    start = (offset * 97) % len(pool)
    return " ".join(pool[(start + j) % len(pool)] for j in range(n))
