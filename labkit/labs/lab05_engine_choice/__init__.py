"""Lab 05: choosing an engine — vLLM and TensorRT-LLM's design philosophies with cited facts, what
each labkit optimisation costs and buys (measured through ``labkit serve`` / ``labkit bench``), your
own engine, a scenario advisor, diagnosing a service from /metrics, and the chapter in one figure.

    facts      cited rows, cost per million tokens, engineering cost
    ablation   one switch at a time, served and benchmarked (typed rows)
    compare    gains, rankings and the sentences about them
    diagnose   /metrics sampling; memory and host time against load
    chapter    the chapter's stages with a number each
    external   labkit bench against the learner's own engine
    advisor    the scenario rules (Recommendation, Reason)
    views      tables, figures, the advisor widget
    quiz, exercises, solutions
"""
