"""Lab 04's import path for the verifier (``from labkit.spec_decode.rejection_sampler import
rejection_sample``). The rejection sampler lives in ``labkit.sample.rejection_sampler``, beside the sampler
whose processed distributions it compares (vLLM keeps it in ``v1/sample`` too): speculative decoding sits
above sampling, so ``sample`` never imports ``spec_decode``.
"""

from labkit.sample.rejection_sampler import (
    greedy_verify,
    greedy_verify_batch,
    rejection_sample,
    rejection_sample_batch,
)

__all__ = ["greedy_verify", "greedy_verify_batch", "rejection_sample", "rejection_sample_batch"]
