"""Lab 02 (PagedAttention): ``analogy`` (OS paging ↔ KV blocks, address translation), ``block_map``
(a recorded live block map and its replay player), ``layouts`` (paged vs contiguous on one trace:
waste, concurrency, throughput, outputs), ``sharing`` (prefix caching, parallel sampling with
copy-on-write), ``block_size`` (the block-size sweep), ``attention_cost`` (the price of
indirection), ``allocator_replay`` (the learner's allocator on the lab's workloads), ``views`` and
``figures``, ``quiz``, ``exercises`` (hidden checks) and ``solutions``."""
