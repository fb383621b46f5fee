"""Lab 02 exercise: a paged KV block allocator with a FIFO free list and reference counts."""

from __future__ import annotations

import random

from labkit.assess.checks import Ref, ops_check
from labkit.assess.exercise import Exercise

# Ref(i) is the block id returned by op i (an allocate).
_BLOCK_SEQUENCES = [
    ({"zh": "按 0、1、2… 顺序分配，用完返回 None", "en": "blocks 0, 1, 2, … in order; None when none is left"},
     3, [("allocate", ()), ("num_free_blocks", ()), ("allocate", ()), ("allocate", ()),
         ("num_free_blocks", ()), ("allocate", ())]),
    ({"zh": "释放的块排到空闲队列末尾（FIFO）", "en": "a freed block goes to the back of the free list (FIFO)"},
     4, [("allocate", ()), ("allocate", ()), ("free", (Ref(0),)), ("num_free_blocks", ()),
         ("allocate", ()), ("allocate", ()), ("allocate", ()), ("allocate", ())]),
    ({"zh": "共享：引用计数归零前块不回到空闲队列", "en": "sharing: a block is not free until its count reaches 0"},
     4, [("allocate", ()), ("share", (Ref(0),)), ("ref_count", (Ref(0),)), ("free", (Ref(0),)),
         ("ref_count", (Ref(0),)), ("num_free_blocks", ()), ("free", (Ref(0),)), ("ref_count", (Ref(0),)),
         ("num_free_blocks", ()), ("allocate", ()), ("allocate", ()), ("allocate", ()), ("allocate", ())]),
]


def _random_block_ops(seed: int, num_blocks: int, num_ops: int) -> list[tuple]:
    """Random allocate/share/free with counts checked often; only live handles are shared or freed."""
    rng, ops, live = random.Random(seed), [], {}      # allocate op index → references it holds
    for _ in range(num_ops):
        roll = rng.random()
        if live and roll < 0.3:
            handle = rng.choice(sorted(live))
            live[handle] -= 1
            ops.append(("free", (Ref(handle),)))
            if live[handle] == 0:
                del live[handle]
        elif live and roll < 0.45:
            handle = rng.choice(sorted(live))
            live[handle] += 1
            ops += [("share", (Ref(handle),)), ("ref_count", (Ref(handle),))]
        else:
            if len(live) < num_blocks:
                live[len(ops)] = 1
            ops.append(("allocate", ()))
        ops.append(("num_free_blocks", ()))
    return ops


def block_allocator_exercise() -> Exercise:
    checks = [ops_check({lang: f"BlockAllocator({n}): {text}" for lang, text in note.items()}, (n,), ops)
              for note, n, ops in _BLOCK_SEQUENCES]
    checks += [ops_check({"zh": f"BlockAllocator(6)：随机序列 {s}", "en": f"BlockAllocator(6): random sequence {s}"},
                         (6,), _random_block_ops(s, 6, 40)) for s in range(3)]
    return Exercise(
        name="block_allocator",
        title={"zh": "练习：分页 KV 块分配器（空闲队列 + 引用计数）", "en": "Exercise: a paged KV block allocator (free list + ref counts)"},
        task={"zh": "实现类 BlockAllocator(num_blocks)：空闲队列初始为 0…num_blocks-1。allocate() 取队首的块、"
                    "引用计数置 1，没有空闲块时返回 None；share(block_id) 计数 +1；free(block_id) 计数 -1，"
                    "归零时块排到队尾；num_free_blocks() 与 ref_count(block_id) 返回当前值。",
              "en": "Write class BlockAllocator(num_blocks): the free list starts as 0…num_blocks-1. allocate() takes "
                    "the block at the front and sets its count to 1, or returns None when none is free; "
                    "share(block_id) adds 1; free(block_id) subtracts 1 and at 0 puts the block at the back; "
                    "num_free_blocks() and ref_count(block_id) report the current values."},
        checks=checks,
        reference="labkit.labs.lab02_paged_attention.solutions:BlockAllocator",
        hints=[{"zh": "collections.deque 很适合做空闲队列：popleft() 取队首，append() 放队尾。",
                "en": "collections.deque suits the free list: popleft() takes the front, append() adds at the back."},
               {"zh": "用一个列表 ref_counts[block_id] 记录计数；free 只在计数变成 0 时才把块放回空闲队列。",
                "en": "Keep ref_counts[block_id] in a list; free returns the block to the free list only when the count hits 0."}],
    )
