"""Measurement helpers the labs call, so notebook cells stay one or two lines (labs/README.md).

Shared by every lab:

- ``recorder``    ``StepRecorder``: per-step rows (tokens by kind, times) from ``StepEnd`` events;
- ``lazy``        ``once``: one measurement shared by a predict box and the cell after it;
- ``references``  ``cite(...)``: a row of data/reference/published-numbers.csv with its source;
- ``machine``     ``memory_budget()``, ``cpu_load()``: the learner's machine, without extra packages;
- ``figures``     plotly conventions (titles, labelled axes, one colour per state across labs);
- ``tables``      ``Table``: small HTML tables (JupyterLab and Voila alike).

Lab 01 (KV cache): ``kv_cache`` (cache vs recompute, bytes per token), ``fragmentation``
(contiguous-reservation waste; measuring the learner's first-fit allocator), ``preemption`` (the
misreading "the KV cache is disposable"), ``servers`` (the engines and traces it replays),
``kv_cache_views`` (its figures and tables), ``kv_cache_quiz``.

Helpers measure and return typed values; views draw them; neither prints.
"""
