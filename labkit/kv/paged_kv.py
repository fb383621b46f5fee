"""The device tensors that hold K and V: one [num_blocks, block_size, kv_heads, head_dim] pair per layer."""

from __future__ import annotations

import torch


def num_blocks_for_bytes(kv_cache_bytes: int, bytes_per_block: int) -> int:
    n = kv_cache_bytes // bytes_per_block
    if n < 1:
        raise ValueError(f"kv_cache_bytes must hold at least one block ({bytes_per_block} bytes), "
                         f"got {kv_cache_bytes}")
    return n


class PagedKVCache:
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str):
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self.tensor = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks, self.block_size = num_blocks, block_size
        self._views: dict[int, tuple] = {}     # meta_block_size -> (tensor, its per-layer views)

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()

    def layer_caches(self, meta_block_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (key_cache, value_cache) views with ``meta_block_size`` slots per block (the
        contiguous layout addresses single slots, i.e. block size 1)."""
        cached = self._views.get(meta_block_size)
        if cached is not None and cached[0] is self.tensor:   # views of the same tensor: reuse them
            return cached[1]
        L, _, _, _, H, D = self.tensor.shape
        view = self.tensor.view(L, 2, -1, meta_block_size, H, D)
        views = [(view[i, 0], view[i, 1]) for i in range(L)]
        self._views[meta_block_size] = (self.tensor, views)
        return views

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: duplicate whole blocks (all layers, K and V)."""
        if copies:
            src = torch.tensor([s for s, _ in copies], device=self.tensor.device)
            dst = torch.tensor([d for _, d in copies], device=self.tensor.device)
            self.tensor[:, :, dst] = self.tensor[:, :, src]
