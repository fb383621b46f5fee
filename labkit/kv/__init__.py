"""KV cache bookkeeping (pure Python: ints, lists, dicts) and the device tensors that hold K/V."""
