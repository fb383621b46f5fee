"""The exercise machinery in a real ipykernel, with the learner's functions defined in cells.

Slow (a kernel start, about 20 s): run with ``-m slow``. It checks what only a real kernel shows:
the error line counted within the cell, ``input()`` refused instead of talking to the kernel's
sockets, prints captured, and the kernel alive after a loop, a memory hog and a cheat.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CELLS = [
    "import time, torch\ntorch.set_num_threads(2); float((torch.randn(256, 256) @ torch.randn(256, 256)).sum())\n"
    "from labkit.labs.exercises import exercise\nex = exercise('kv_bytes_per_token')",
    "def kv(num_layers, num_kv_heads, head_dim, dtype_bytes):\n    shape = [num_layers]\n    return shape[3]\n"
    "r = ex.check(kv); print(r.failure.error.lineno, r.failure.error.line)",
    "import sys\ndef steal(*a):\n    f = sys._getframe().f_back\n    while f:\n        s = f.f_locals.get('self')\n"
    "        if hasattr(s, 'reference_solution'):\n            return s.reference_solution()(*a)\n        f = f.f_back\n"
    "print(ex.check(steal).failure.kind)",
    "def loops(*a):\n    while True: pass\nt0 = time.monotonic(); r = ex.check(loops); print(r.failure.kind, time.monotonic() - t0 < 8)",
    "def hog(*a):\n    xs = []\n    while True: xs.append(bytearray(64 * 2**20))\nprint(ex.check(hog).failure.kind)",
    "def asks(*a):\n    return int(input('n?'))\nprint(ex.check(asks).failure.error.type_name)",
    "def talks(*a):\n    print('hello from the learner')\n    return 0\nprint('hello from the learner' in ex.check(talks).message)",
    "def right(l, h, d, b):\n    return 2 * l * h * d * b\nprint(ex.check(right).passed, 'alive')",
]
EXPECTED = ["", "3 return shape[3]", "reference", "timeout True", "memory", "EOFError", "True", "True alive"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_exercises_in_a_real_kernel():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    client.execute(env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", LABKIT_LEARNER_ID="kernel-test"))
    printed = ["".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout").strip()
               for cell in nb.cells]
    assert printed == EXPECTED
