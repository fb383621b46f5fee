"""Weights in 2 MiB pages: a decode step reads every weight once, so its speed is the memory's read rate,
and with 4 KiB pages a one-row sweep through 538 MB crosses 131,000 pages, each a TLB miss and a page
walk. Transparent huge pages cut that 512-fold.

Measured (``python -m bench.linear_rows``, labkit's C kernel, one thread): on a 2-core AMD EPYC a
one-row sweep of the default model's fp32 weights took 16.8 ms in 4 KiB pages and 15.2 ms in huge
pages (32.0 -> 35.3 GB/s, 10 %); on an Intel Xeon with AMX the difference was within the noise. The
bits are the same either way, and the cost is at most one partly used 2 MiB page, so labkit asks for
them wherever Linux offers them (``/sys/kernel/mm/transparent_hugepage/enabled`` set to ``always`` or
``madvise``) and otherwise leaves the weights where they are. ``LABKIT_HUGE_PAGES=0`` switches it off.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import torch
from torch import nn

ENV = "LABKIT_HUGE_PAGES"
HUGE_PAGE = 2 << 20
ALIGN = 64                  # each tensor starts on a cache line
SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def offered() -> bool:
    """Whether this system gives huge pages to a mapping that asks for them (and they are not switched off)."""
    if os.environ.get(ENV, "1") == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = SETTING.read_text(encoding="ascii")
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def move_to_huge_pages(params: list[nn.Parameter]) -> bool:
    """Copy these CPU parameters into one anonymous mapping advised ``MADV_HUGEPAGE`` and point each
    parameter at its copy (a tied weight, listed once, moves once). Returns whether they moved. The old
    storage is freed as each parameter lets go of it, so the peak is one tensor above the weights."""
    params = list({id(p): p for p in params if p.device.type == "cpu" and p.numel()}.values())
    if not params or not offered():
        return False
    sizes = [(p.numel() * p.element_size() + ALIGN - 1) // ALIGN * ALIGN for p in params]
    total = (sum(sizes) + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE + HUGE_PAGE    # room to align the start
    try:
        region = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):
        return False
    raw = torch.frombuffer(region, dtype=torch.uint8)          # keeps the mapping alive while in use
    offset = -raw.data_ptr() % HUGE_PAGE                        # only whole, aligned 2 MiB pages can be huge
    with torch.no_grad():
        for p, size in zip(params, sizes):
            nbytes = p.numel() * p.element_size()
            view = raw[offset:offset + nbytes].view(p.dtype).view(p.shape)
            view.copy_(p.data)
            p.data = view
            offset += size
    return True
