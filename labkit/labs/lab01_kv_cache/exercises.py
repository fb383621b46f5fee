"""Lab 01 exercises: KV bytes per token, and a first-fit contiguous allocator."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from labkit.assess.bank import ExerciseText
from labkit.assess.checks import Ref, call_check, first_wrong_step, ops_check
from labkit.assess.exercise import Exercise
from labkit.i18n import t

# Each exercise's title, task and hints: data a teacher edits, beside this file.
TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"),
                    ("kv_bytes_per_token", "first_fit_allocator"))

# (num_layers, num_kv_heads, head_dim, dtype_bytes), note: shapes from each model's config.json
_KV_CASES = [
    ((30, 3, 64, 2), {"zh": "SmolLM2-135M，bf16", "en": "SmolLM2-135M, bf16"}),
    ((30, 3, 64, 4), {"zh": "SmolLM2-135M，fp32", "en": "SmolLM2-135M, fp32"}),
    ((40, 40, 128, 2), {"zh": "OPT-13B，fp16（vLLM 论文：约 800 KB）", "en": "OPT-13B, fp16 (vLLM paper: ~800 KB)"}),
    ((32, 32, 128, 2), {"zh": "Llama-2-7B，fp16，MHA", "en": "Llama-2-7B, fp16, MHA"}),
    ((32, 8, 128, 2), {"zh": "Llama-3-8B，bf16，GQA", "en": "Llama-3-8B, bf16, GQA"}),
    ((1, 1, 1, 1), {"zh": "最小的情形", "en": "the smallest case"}),
]


def _explain_kv(args: tuple, expected, got) -> str:
    if isinstance(got, (int, float)) and got * 2 == expected:
        if args[3] == 2:                               # half: K or V left out, or the 2 bytes per number
            return t("正好少了一半：每个 token 在每层既要存 K，也要存 V——或者少乘了每个数的字节数 dtype_bytes = 2。",
                     "Exactly half: every token stores both a K and a V vector in every layer, or the "
                     "dtype_bytes = 2 per number is missing.")
        return t("正好少了一半：每个 token 在每层既要存 K，也要存 V。",
                 "Exactly half: every token stores both a K and a V vector in every layer.")
    if isinstance(got, (int, float)) and got * args[3] == expected:
        return t("少乘了每个数的字节数 dtype_bytes：要的是字节数，不是数的个数。",
                 "dtype_bytes per number is missing: the answer counts bytes, not numbers.")
    if isinstance(got, (int, float)) and got * 1024 == expected:
        return t("单位应当是字节（bytes），不是 KB。", "The unit is bytes, not KB.")
    return ""


def _diagnose_kv(args: tuple, expected, got) -> int | None:
    if not isinstance(got, (int, float)) or isinstance(got, bool) or got == 0:
        return None
    if got * 2 == expected and args[3] != 2:
        return 0                                       # K or V left out: how many vectors per head?
    if expected % got == 0 and expected // got in (2, 4, 8):
        return 1                                       # a factor (dtype bytes, K and V) left out
    return None


def kv_bytes_per_token_exercise() -> Exercise:
    return Exercise(
        **TEXT("kv_bytes_per_token"),
        checks=[call_check("kv_bytes_per_token", args, note, explain=functools.partial(_explain_kv, args),
                           diagnose=functools.partial(_diagnose_kv, args)) for args, note in _KV_CASES],
        reference="labkit.labs.lab01_kv_cache.solutions:kv_bytes_per_token",
        engine=["labkit.model.model_config:ModelConfig.kv_bytes_per_token", "labkit.sim.cost",
                "labkit.labs.lab01_kv_cache.measure:KVShape"],
        lab="01",
    )


# Hand-written sequences: (num_slots, ops). Ref(i) is the start returned by op i.
_FIRST_FIT_SEQUENCES = [
    ({"zh": "依次分配，放不下时返回 None", "en": "allocate in order; None when nothing fits"},
     10, [("allocate", (4,)), ("allocate", (3,)), ("allocate", (4,)), ("allocate", (3,)), ("allocate", (1,))]),
    ({"zh": "释放后，最低的空洞优先", "en": "after a free, the lowest hole comes first"},
     10, [("allocate", (4,)), ("allocate", (3,)), ("free", (Ref(0),)), ("allocate", (2,)),
          ("allocate", (3,)), ("allocate", (2,)), ("allocate", (1,))]),
    ({"zh": "外部碎片：总空闲够，但没有连续的一段够", "en": "external fragmentation: enough free in total, no run long enough"},
     12, [("allocate", (3,)), ("allocate", (3,)), ("allocate", (3,)), ("allocate", (3,)),
          ("free", (Ref(0),)), ("free", (Ref(2),)), ("allocate", (4,)), ("allocate", (3,))]),
    ({"zh": "相邻的空洞合成一段", "en": "neighbouring holes join into one run"},
     9, [("allocate", (3,)), ("allocate", (3,)), ("allocate", (3,)), ("free", (Ref(1),)),
         ("free", (Ref(0),)), ("allocate", (6,)), ("allocate", (1,))]),
    ({"zh": "恰好占满整个区域", "en": "exactly fills the whole arena"},
     8, [("allocate", (8,)), ("allocate", (1,)), ("free", (Ref(0),)), ("allocate", (9,)), ("allocate", (8,))]),
]


def _random_first_fit_ops(seed: int, num_slots: int, num_ops: int) -> list[tuple]:
    """Random allocate/free sequence; frees refer only to live regions (simulated on the reference)."""
    from labkit.labs.lab01_kv_cache.solutions import FirstFitAllocator
    rng, sim, live, ops = random.Random(seed), FirstFitAllocator(num_slots), [], []
    for index in range(num_ops):
        if live and rng.random() < 0.4:
            op_index, start = live.pop(rng.randrange(len(live)))
            sim.free(start)
            ops.append(("free", (Ref(op_index),)))
            continue
        size = rng.randint(1, num_slots // 3)
        start = sim.allocate(size)
        ops.append(("allocate", (size,)))
        if start is not None:
            live.append((index, start))
    return ops


def _diagnose_first_fit(expected, got, _check) -> int | None:
    step = first_wrong_step(expected, got)
    if step is None:
        return None
    if step.call.startswith("free"):
        return 2
    return 1                                            # an allocate returned the wrong start (or None)


def first_fit_allocator_exercise() -> Exercise:
    checks = [ops_check({lang: f"FirstFitAllocator({n}): {text}" for lang, text in note.items()}, (n,), ops)
              for note, n, ops in _FIRST_FIT_SEQUENCES]
    checks += [ops_check({"zh": f"FirstFitAllocator(32)：随机序列 {s}", "en": f"FirstFitAllocator(32): random sequence {s}"},
                         (32,), _random_first_fit_ops(s, 32, 40), reveal=False) for s in range(3)]
    return Exercise(
        **TEXT("first_fit_allocator"),
        checks=checks,
        reference="labkit.labs.lab01_kv_cache.solutions:FirstFitAllocator",
        engine=["labkit.kv.contiguous"], diagnose=_diagnose_first_fit, lab="01",
    )
