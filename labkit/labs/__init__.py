"""Lab content, one package per lab; the helpers every lab shares sit in ``common``.

    labs/common/             display (show_source, predict, FAST/fast), lazy (once), references (cite),
                             machine (memory_budget, cpu_load), figures (plotly conventions), tables (Table)
    labs/lab01_kv_cache/     measure, fragmentation, preemption, servers, views, quiz, exercises, solutions
    labs/lab02_paged_attention/ ...   labs/lab03_batching/ ...   labs/lab04_speculative/ ...
    labs/exercises.py        the registry: ``exercise("name")`` for every lab's exercises

Inside a lab package: measurement modules return typed values and never print; ``views`` draws
them; ``quiz`` holds the concept questions; ``exercises`` the hidden checks and ``solutions`` the
reference solutions (shown only by ``exercise.show_solution()``). Measurement code two labs need
lives in the engine's own modules (``labkit.metrics.StepRecorder``, ``labkit.kv.breakdown``,
``labkit.replay``), not here. Tests: ``tests/labs/test_labNN.py``.
"""
