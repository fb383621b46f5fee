"""Weights moved into one huge-page mapping: same values, same ties, and really in 2 MiB pages where
Linux offers them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from labkit.model import huge_pages


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    a = nn.Parameter(torch.randn(1000, 576, generator=g), requires_grad=False)
    b = nn.Parameter(torch.randn(3, 7, generator=g).bfloat16(), requires_grad=False)
    return [a, b, a]            # a listed twice, as a tied embedding and LM head are


def anon_huge_kb(address: int) -> int:
    """AnonHugePages of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(not huge_pages.offered(), reason="this system offers no transparent huge pages")
def test_weights_move_into_huge_pages_with_their_values_and_ties():
    ps = params()
    before = [p.detach().clone() for p in ps[:2]]
    assert huge_pages.move_to_huge_pages(ps)
    assert ps[0] is ps[2] and all(torch.equal(p, q) for p, q in zip(ps[:2], before))
    assert ps[0].dtype == torch.float32 and ps[1].dtype == torch.bfloat16 and ps[1].shape == (3, 7)
    assert ps[0].data_ptr() % huge_pages.HUGE_PAGE == 0            # the first starts a huge page
    assert ps[1].data_ptr() - ps[0].data_ptr() == 1000 * 576 * 4    # one region, in order
    assert anon_huge_kb(ps[0].data_ptr()) >= 2048


def test_switched_off_the_weights_stay_where_they_are(monkeypatch):
    monkeypatch.setenv(huge_pages.ENV, "0")
    ps = params(1)
    where = [p.data_ptr() for p in ps]
    assert not huge_pages.move_to_huge_pages(ps)
    assert [p.data_ptr() for p in ps] == where


def test_the_default_model_reads_its_weights_from_huge_pages(llm):
    if not huge_pages.offered():
        pytest.skip("this system offers no transparent huge pages")
    net = llm.engine.runner.model
    assert net.lm_head is net.embed_tokens
    assert anon_huge_kb(net.layers[0].qkv_proj.data_ptr()) > 100_000
