"""The vLLM paper's memory-study setting, simulated (Kwon et al., SOSP'23, Table 1 and Fig. 2): a 13B
model (OPT-13B and Llama-2-13B share the KV shape 40 layers x 40 heads x 128, fp16: 800 KB per token)
with 12 GiB left for the KV cache on one A100-40GB, i.e. about 15.7K token slots, and max_model_len
2048. Labs 01-03 and 05 replay traces on it; its memory numbers are exact, its times simulated.
"""

from __future__ import annotations

from labkit.sim.cost import MODELS

PAPER_KV_BYTES = 12 * 2**30        # Table 1: 12 GB left for KV on one A100-40GB (13B model)
PAPER_MAX_MODEL_LEN = 2048         # OPT's context length, the reservation of Orca(Max) in Fig. 2
PAPER_MODEL = "llama-2-13b"        # labkit.sim.cost.MODELS: the same KV shape as OPT-13B
PAPER_POOL_SLOTS = PAPER_KV_BYTES // MODELS[PAPER_MODEL].kv_bytes_per_token    # 15,728 ≈ Table 1's 15.7K
