"""Roofline cost of one engine step: max(bytes moved / bandwidth, FLOPs / compute) + a fixed launch cost.

    bytes = weight bytes (read once per step, shared by the whole batch)
          + KV bytes read (every scheduled token's sequence reads its whole context)
          + KV bytes written (one entry per new token)
    FLOPs = 2 x parameters x new tokens  +  4 x layers x heads x head_dim x (query x context) pairs

Decode steps are memory-bound (the weights dominate bytes), so batching more sequences costs little
until FLOPs catch up — the reason continuous batching and big batches pay (Kwon et al. 2023 §2.3).
Profiles are nominal datasheet numbers times an efficiency factor, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    mem_bandwidth: float      # bytes / s (datasheet)
    compute: float            # FLOP / s at the model dtype (datasheet, dense)
    memory_bytes: float
    efficiency: float = 0.7   # fraction of the datasheet rates a well-tuned kernel reaches
    step_overhead_s: float = 2e-4   # kernel launches and synchronisation per step


@dataclass(frozen=True)
class ModelProfile:
    name: str
    num_params: float
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


HARDWARE = {
    "a100-80gb": HardwareProfile("NVIDIA A100 80GB (datasheet: 2.0 TB/s, 312 TFLOP/s bf16)", 2.039e12, 312e12, 80e9),
    "h100-sxm": HardwareProfile("NVIDIA H100 SXM (datasheet: 3.35 TB/s, 989 TFLOP/s bf16)", 3.35e12, 989e12, 80e9),
    "rtx-4090": HardwareProfile("NVIDIA RTX 4090 (datasheet: 1.0 TB/s, 165 TFLOP/s bf16)", 1.008e12, 165e12, 24e9),
    "laptop-cpu": HardwareProfile("laptop CPU (assumed: 50 GB/s, 1 TFLOP/s fp32)", 50e9, 1e12, 16e9,
                                  step_overhead_s=1e-3),
}

MODELS = {
    "llama-3-8b": ModelProfile("Llama-3-8B (bf16)", 8.03e9, 32, 32, 8, 128),
    "llama-2-7b": ModelProfile("Llama-2-7B (bf16)", 6.74e9, 32, 32, 32, 128),
    "llama-2-13b": ModelProfile("Llama-2-13B (bf16)", 13.0e9, 40, 40, 40, 128),
    "llama-3.2-1b": ModelProfile("Llama-3.2-1B (bf16)", 1.24e9, 16, 32, 8, 64),
    "smollm2-135m": ModelProfile("SmolLM2-135M (fp32)", 1.35e8, 30, 9, 3, 64, dtype_bytes=4),
}


def step_time(model: ModelProfile, hw: HardwareProfile, query_lens: list[int], seq_lens: list[int]) -> float:
    """Simulated seconds for one forward over a ragged batch (query_lens new tokens per sequence,
    seq_lens context lengths including them)."""
    if not query_lens:
        return 0.0
    new_tokens = sum(query_lens)
    kv_read = sum(seq_lens) * model.kv_bytes_per_token
    kv_write = new_tokens * model.kv_bytes_per_token
    bytes_moved = model.weight_bytes + kv_read + kv_write
    attn_pairs = sum(q * s for q, s in zip(query_lens, seq_lens))
    flops = 2 * model.num_params * new_tokens + 4 * model.num_layers * model.num_heads * model.head_dim * attn_pairs
    memory_s = bytes_moved / (hw.mem_bandwidth * hw.efficiency)
    compute_s = flops / (hw.compute * hw.efficiency)
    return max(memory_s, compute_s) + hw.step_overhead_s
