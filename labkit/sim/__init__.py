"""A labelled cost model ("virtual GPU"): the real scheduler and KV bookkeeping, a simulated forward.

Everything it reports carries ``simulated=True``. Use it for sweeps too large to run for real
(thousands of requests, 4k-token contexts, an A100-sized KV pool) and to see where the Python
scheduler's CPU time starts to dominate a fast accelerator's step time.
"""

from labkit.sim.cost import HARDWARE, MODELS, HardwareProfile, ModelProfile, step_time

__all__ = ["HARDWARE", "MODELS", "HardwareProfile", "ModelProfile", "step_time"]
