from labkit.sample.sampler import sample_tokens, to_probs

__all__ = ["sample_tokens", "to_probs"]
