"""Lab 01 (KV cache): ``measure`` (cache vs recompute, bytes per token), ``fragmentation``
(contiguous-reservation waste; measuring the learner's first-fit allocator), ``preemption`` (the
misreading "the KV cache is disposable"), ``servers`` (the engines and traces it replays), ``views``
(its figures and tables), ``quiz``, ``exercises`` (hidden checks) and ``solutions``."""
