"""labkit's kernels: the C sources (``csrc/``) and their ctypes build and loader (``native``), the CPU's
features (``cpu_features``), the row-invariance gate (``invariance``), the choice of a product form per
weight shape (``tuning``, ``linear_forms``), and the ops a forward calls behind one interface (``ops``:
PyTorch's and labkit's C implementation).

The layering rule (tests/project/test_layering.py holds it): nothing here imports the model, the attention
backends or anything above them; ``labkit.model`` and ``labkit.attention`` import the kernels, and the
Llama forward reaches them only through ``ops``.
"""
