"""Lab 02 exercises: slot mapping, a paged KV block allocator (free list, reference counts,
copy-on-write), and chained prefix hashes (optional)."""

from __future__ import annotations

import random
from pathlib import Path

from labkit.assess.bank import ExerciseText
from labkit.assess.checks import Check, Ref, call_check, first_wrong_step, ops_check, same_sequence
from labkit.assess.exercise import Exercise
from labkit.i18n import t

# Each exercise's title, task and hints: data a teacher edits, beside this file.
TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"),
                    ("block_allocator", "slot_mapping", "prefix_hash"))

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
    ({"zh": "写时复制：只有自己持有的块原地写", "en": "copy-on-write: a block held once is written in place"},
     3, [("allocate", ()), ("copy_on_write", (Ref(0),)), ("ref_count", (Ref(0),)), ("num_free_blocks", ())]),
    ({"zh": "写时复制：共享块先复制，旧块少一个引用", "en": "copy-on-write: a shared block is copied first; the old one loses a holder"},
     4, [("allocate", ()), ("share", (Ref(0),)), ("share", (Ref(0),)), ("copy_on_write", (Ref(0),)),
         ("ref_count", (Ref(0),)), ("ref_count", (Ref(3),)), ("copy_on_write", (Ref(0),)), ("ref_count", (Ref(0),)),
         ("copy_on_write", (Ref(0),)), ("ref_count", (Ref(0),)), ("num_free_blocks", ())]),
    ({"zh": "写时复制：没有空闲块时返回 None，共享块保持不变", "en": "copy-on-write with no free block: None, the shared block unchanged"},
     1, [("allocate", ()), ("share", (Ref(0),)), ("copy_on_write", (Ref(0),)), ("ref_count", (Ref(0),)),
         ("free", (Ref(0),)), ("copy_on_write", (Ref(0),)), ("num_free_blocks", ())]),
]


def _random_block_ops(seed: int, num_blocks: int, num_ops: int, cow: bool = False) -> list[tuple]:
    """Random allocate/share/free (and copy_on_write) with counts checked often, simulated on the
    reference so only references really held are shared, freed or written. A handle is the index
    of the op whose result is the block id (an allocate, or a copy_on_write that returned a copy)."""
    from labkit.labs.lab02_paged_attention.solutions import BlockAllocator

    rng, sim, ops, held = random.Random(seed), BlockAllocator(num_blocks), [], []   # held: (handle, block)
    for _ in range(num_ops):
        roll = rng.random()
        if held and roll < 0.3:
            handle, block = held.pop(rng.randrange(len(held)))
            sim.free(block)
            ops.append(("free", (Ref(handle),)))
        elif held and roll < 0.45:
            handle, block = rng.choice(held)
            sim.share(block)
            held.append((handle, block))
            ops += [("share", (Ref(handle),)), ("ref_count", (Ref(handle),))]
        elif cow and held and roll < 0.6:
            index = rng.randrange(len(held))
            handle, block = held[index]
            new = sim.copy_on_write(block)
            ops.append(("copy_on_write", (Ref(handle),)))
            if new is not None and new != block:
                held[index] = (len(ops) - 1, new)
            ops.append(("ref_count", (Ref(handle),)))
        else:
            block = sim.allocate()
            ops.append(("allocate", ()))
            if block is not None:
                held.append((len(ops) - 1, block))
        ops.append(("num_free_blocks", ()))
    return ops


def _diagnose_blocks(expected, got, _check) -> int | None:
    step = first_wrong_step(expected, got)
    if step is None:
        return None
    if step.call.startswith("copy_on_write"):
        return 2
    if step.call.startswith(("free", "ref_count", "share")):
        return 1
    return 0                                            # allocate / num_free_blocks: the free list's order


def block_allocator_exercise() -> Exercise:
    checks = [ops_check({lang: f"BlockAllocator({n}): {text}" for lang, text in note.items()}, (n,), ops)
              for note, n, ops in _BLOCK_SEQUENCES]
    checks += [ops_check({"zh": f"BlockAllocator(6)：随机序列 {s}", "en": f"BlockAllocator(6): random sequence {s}"},
                         (6,), _random_block_ops(s, 6, 40), reveal=False) for s in range(3)]
    checks += [ops_check({"zh": f"BlockAllocator(6)：含写时复制的随机序列 {s}",
                          "en": f"BlockAllocator(6): random sequence with copy-on-write {s}"},
                         (6,), _random_block_ops(10 + s, 6, 50, cow=True), reveal=False) for s in range(3)]
    return Exercise(
        **TEXT("block_allocator"),
        checks=checks,
        reference="labkit.labs.lab02_paged_attention.solutions:BlockAllocator",
        engine=["labkit.kv.block_pool"], diagnose=_diagnose_blocks, lab="02",
    )


# ------------------------------------------------------------------------------ slot mapping

# (block_tables, seq_ids, positions, block_size), note
_SLOT_CASES = [
    (([[7, 2, 9]], [0, 0, 0, 0], [0, 15, 16, 40], 16), {"zh": "一个序列，块表 [7, 2, 9]", "en": "one sequence, table [7, 2, 9]"}),
    (([[3], [0, 5]], [1, 0, 1], [17, 2, 3], 16), {"zh": "两个序列交错", "en": "two sequences, interleaved"}),
    (([[4, 1, 6, 0]], [0] * 8, list(range(8)), 2), {"zh": "块大小 2", "en": "block size 2"}),
    (([[5, 3, 8]], [0, 0, 0], [0, 1, 2], 1), {"zh": "块大小 1：每个 token 一个块", "en": "block size 1: one block per token"}),
    (([[12, 30], [30, 4]], [0, 1, 1], [31, 0, 20], 16), {"zh": "两个块表指向同一个物理块（共享）", "en": "two tables point at one physical block (shared)"}),
    (([[2, 0, 1]], [0, 0], [47, 32], 16), {"zh": "最后一个块的第一个和最后一个槽位", "en": "first and last slot of the last block"}),
]


def _as_int_list(value) -> list[int] | None:
    """A list, tuple, numpy array or tensor of ints as a plain list (None if it is none of these)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _explain_slots(expected, got) -> str:
    got = _as_int_list(got)
    if got is None:
        return t("请返回一个整数列表（也可以是张量），每个 token 一个槽位。",
                 "Return a list of ints (a tensor works too), one slot per token.")
    if len(got) != len(expected):
        return t(f"应当每个 token 返回一个槽位：期望 {len(expected)} 个，得到 {len(got)} 个。",
                 f"One slot per token: expected {len(expected)}, got {len(got)}.")
    return t("对照公式：slot = block_table[pos // block_size] * block_size + pos % block_size。"
             "块表给出的是物理块号，还要乘以块大小、加上块内偏移。",
             "Check the formula: slot = block_table[pos // block_size] * block_size + pos % block_size; "
             "the table gives a physical block number, times the block size, plus the offset inside it.")


def _slot_check(args: tuple, note: dict) -> Check:
    """The sandbox hands back plain data (a tensor arrives as a list); a tuple is fine too."""
    return call_check("slot_mapping", args, note, compare=lambda got, expected: _as_int_list(got) == expected,
                      explain=_explain_slots)


def slot_mapping_exercise() -> Exercise:
    checks = [_slot_check(args, note) for args, note in _SLOT_CASES]
    return Exercise(
        **TEXT("slot_mapping"),
        checks=checks,
        reference="labkit.labs.lab02_paged_attention.solutions:slot_mapping",
        engine=["labkit.kv.slots", "labkit.kv.kv_cache_manager:KVCacheManager.slot_mapping",
                "labkit.labs.lab02_paged_attention.analogy:address_rows"],
        diagnose=lambda expected, got, _c: 1 if _as_int_list(got) is not None and len(_as_int_list(got)) == len(expected) else None,
        lab="02",
    )


# ------------------------------------------------------------------------------ prefix hashes

_HASH_CASES = [
    ((list(range(40)), 16), {"zh": "40 个 token：两个满块，最后 8 个不算", "en": "40 tokens: two full blocks, the last 8 not hashed"}),
    ((list(range(32)), 16), {"zh": "正好两个满块", "en": "exactly two full blocks"}),
    (([5] * 15, 16), {"zh": "不满一块：没有键", "en": "under one block: no key"}),
    (([1, 2, 3, 4, 1, 2, 3, 4], 4), {"zh": "内容相同的两块，键不同（前缀不同）", "en": "two blocks with equal tokens get different keys (different prefixes)"}),
    (([9, 8, 7, 6, 5, 4], 1), {"zh": "块大小 1", "en": "block size 1"}),
]


def _explain_hashes(expected, got) -> str:
    got = list(got) if isinstance(got, tuple) else got
    if isinstance(got, list) and len(got) == len(expected) + 1:
        return t("最后一个不满的块还在填充，不能进入前缀缓存。", "The trailing partial block is still filling; it gets no key.")
    if isinstance(got, list) and len(got) == len(expected) and got and got[0] == expected[0]:
        return t("第一块对了，后面的块要把父块的键串进来：hash((上一块的键, 本块的 token 元组))。",
                 "Block 0 is right; later blocks must chain their parent's key: hash((parent key, tuple of tokens)).")
    return ""


def _diagnose_hashes(expected, got, _check) -> int | None:
    if isinstance(got, (list, tuple)) and len(got) == len(expected) + 1:
        return 0
    if isinstance(got, (list, tuple)) and len(got) == len(expected) and got and list(got)[:1] == expected[:1]:
        return 1
    return None


def prefix_hash_exercise() -> Exercise:
    return Exercise(
        **TEXT("prefix_hash"),
        checks=[call_check("block_hashes", args, note, explain=_explain_hashes, compare=same_sequence)
                for args, note in _HASH_CASES],
        reference="labkit.labs.lab02_paged_attention.solutions:block_hashes",
        engine=["labkit.kv.kv_cache_manager:hash_block"], diagnose=_diagnose_hashes, lab="02",
    )
