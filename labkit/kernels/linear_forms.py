"""Which form each CPU product ``x @ Wᵀ`` takes on this machine: the names the benchmarks, the class
cache's set-up and the tests call. The work is in `labkit.kernels.tuning`, one concern a module:

    tuning/forms.py    the fp32 forms (`Form`) and the gate that says which give which bits
    tuning/fp32.py     the one batch-invariant fp32 form, chosen by a timing probe; the fp32 product
    tuning/bf16.py     the one row-invariant bf16 form (`Bf16Form`), offered by a gate, chosen by timing
    tuning/walks.py    up to how many rows the C kernels walk a weight sequentially
    tuning/timing.py   how a probe times forms, and the rule that keeps the faster
    tuning/cache.py    the disk cache every probe goes through (`cached_or_probe`)

`labkit.kernels.ops` calls those modules directly, so a test replaces a function in its module (as
tests/kernels/test_form_invariance.py replaces ``tuning.bf16.bf16_form``), never here. `LlamaModel.tune()`, called
where the engine is built, registers the model's weights with them.
"""

from __future__ import annotations

from labkit.kernels.tuning import bf16, fp32
from labkit.kernels.tuning.bf16 import (
    BF16_ENV,
    Bf16Form,
    bf16_form,
    bf16_offered,
    bf16_report,
    bf16_timings,
    bf16_torch_refused,
    bf16_uses_kernel,
    choose_bf16,
    prepare_bf16,
    warn_once,
)
from labkit.kernels.tuning.cache import timed_while_busy
from labkit.kernels.tuning.forms import INVARIANT, Form, candidates, exact_forms, order_probe, pad_rows, probe_rows
from labkit.kernels.tuning.fp32 import ENV, describe, forced, invariant_product, prepare
from labkit.kernels.tuning.walks import WALK_ROWS, prepare_q8, sequential_up_to

__all__ = [
    "BF16_ENV", "ENV", "INVARIANT", "WALK_ROWS", "Bf16Form", "Form", "bf16_form", "bf16_offered", "bf16_report",
    "bf16_timings", "bf16_torch_refused", "bf16_uses_kernel", "candidates", "choose_bf16", "describe",
    "exact_forms", "forced", "forget", "invariant_product", "order_probe", "pad_rows", "prepare", "prepare_bf16",
    "prepare_q8", "probe_rows", "sequential_up_to", "timed_while_busy", "warn_once",
]


def forget() -> None:
    """Drop what this process registered and chose, fp32 and bf16 (tests; the disk cache stays)."""
    fp32.forget()
    bf16.forget()
