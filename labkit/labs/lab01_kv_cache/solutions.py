"""Lab 01 reference solutions: KV bytes per token and a first-fit contiguous allocator."""

from __future__ import annotations


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of KV cache one token occupies: one K and one V vector per KV head, in every layer.

        bytes/token = 2 (K and V) × num_layers × num_kv_heads × head_dim × dtype_bytes

    OPT-13B (40 layers, 40 heads, head_dim 128, fp16): 2·40·40·128·2 = 819,200 B ≈ 800 KB, the
    figure in the vLLM paper (Kwon et al., SOSP 2023, §2.3).
    """
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


class FirstFitAllocator:
    """Contiguous token slots: each request gets one unbroken run of slots, lowest start first.

    ``used[i]`` says whether slot i is taken; ``sizes[start]`` remembers each live region.
    """

    def __init__(self, num_slots: int) -> None:
        self.used = [False] * num_slots
        self.sizes: dict[int, int] = {}

    def allocate(self, size: int) -> int | None:
        """Start of the first run of ``size`` free slots (lowest start), or None if none fits."""
        run = 0
        for slot, taken in enumerate(self.used):
            run = 0 if taken else run + 1
            if run == size:
                start = slot - size + 1
                self.used[start:slot + 1] = [True] * size
                self.sizes[start] = size
                return start
        return None

    def free(self, start: int) -> None:
        """Release the region that ``allocate`` returned as ``start``."""
        size = self.sizes.pop(start)
        self.used[start:start + size] = [False] * size
