"""What this CPU offers, read once: fast paths are chosen from the machine we run on, never from
one machine's table (our lab machines differ: one has AMX, the next does not)."""

from __future__ import annotations

import functools
import platform

import torch


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def has_amx() -> bool:
    """Intel AMX tiles (Sapphire Rapids and later): bf16 matmuls run on the matrix units. Cached: a
    bf16 linear asks on every call (``labkit.kernels.ops.torch_ops.linear``)."""
    return "amx_tile" in cpu_flags() and "amx_bf16" in cpu_flags()


def describe_cpu() -> str:
    """One line for benchmark tables: model name, torch's vector ISA level, AMX / AVX-512 BF16."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    bf16 = "AVX512_BF16" if "avx512_bf16" in cpu_flags() else "no AVX512_BF16"
    return (f"{name}; torch ISA {torch.backends.cpu.get_cpu_capability()}; "
            f"{'AMX' if has_amx() else 'no AMX'}; {bf16}")
