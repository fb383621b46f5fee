from labkit.sample.sampler import Sampler, sample_tokens, to_probs

__all__ = ["Sampler", "sample_tokens", "to_probs"]
