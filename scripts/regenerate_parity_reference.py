"""Store transformers' greedy outputs for tests/engine/test_parity.py in tests/data/parity_reference.json.

    PYTHONPATH=. .venv/bin/python scripts/regenerate_parity_reference.py

Run it by hand when the question changes (other default weights, prompts, token count or settings) or to
add an entry for a new torch version; then commit the file. Test runs only read it. An entry already
stored for this exact key (weights, prompts, settings, transformers and torch versions) is kept as it is;
entries of other keys are kept too.
"""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM
from transformers.utils import logging as hf_logging

from labkit import LLM
from tests.engine.test_parity import HF_SETTINGS, NEW_TOKENS, PARITY_PROMPTS, REFERENCE, hf_greedy
from tests.reference_cache import cached_reference, reference_key


def main() -> None:
    llm = LLM(progress=False)
    prompt_ids = [llm.tokenizer.encode_prompt(p) for p in PARITY_PROMPTS]
    key = reference_key(llm.engine.model_dir, prompt_ids, NEW_TOKENS, **HF_SETTINGS)

    def compute() -> list[list[int]]:
        hf_logging.disable_progress_bar()
        model = LlamaForCausalLM.from_pretrained(str(llm.engine.model_dir), dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
        model.generation_config.eos_token_id = None      # run to max_new_tokens, like ignore_eos=True
        model.generation_config.pad_token_id = 2
        return hf_greedy(model, prompt_ids, NEW_TOKENS)

    _, hit = cached_reference(REFERENCE, key, compute)
    print(f"{REFERENCE}: {'already holds' if hit else 'stored'} the entry for torch {key['torch']}, "
          f"transformers {key['transformers']}")


if __name__ == "__main__":
    main()
