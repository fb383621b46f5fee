"""Lab 04 (speculative decoding), one concept per module:

- ``speedup``: one run's decode time, α, c, verify cost and both predictions (shared with ``bench/spec.py``);
- ``sweeps``: the experiments (speed-up vs k, per workload, per batch size) over cached engines;
- ``live`` / ``live_view``: one request step by step, each drafted token labelled, and its live view;
- ``lossless``: plain vs speculative sampling, chi-square test of homogeneity;
- ``latency``: TPOT vs ITL of one streamed request;
- ``views``: tables, figures and the verdicts computed from them; ``quiz``: the concept check;
- ``exercises`` (hidden checks) and ``solutions`` (reference solutions).
"""
