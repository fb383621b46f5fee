"""One way to time, compare and conclude in every lab (labs/README.md, "Measuring and concluding").

A lab's lesson must survive a learner's busy laptop. Every timed comparison a lab prints goes
through :func:`compare`, and every conclusion sentence is rendered from the :class:`Verdict` it
returns, never from a bare number::

    with measuring():                        # torch on LABKIT_THREADS threads (default 1)
        c = compare({"plain": run_plain, "ngram": run_ngram}, baseline="plain", rounds=5,
                    quantity="speed", work=lambda name, out: out.tokens, id="ngram_copy",
                    claim=("n-gram 的加速比", "n-gram speed-up"), lab="04")
    print(c.verdict.sentence(greater=("n-gram 比普通解码快", "n-gram decodes faster"),
                             less=("n-gram 比普通解码慢", "n-gram decodes slower"),
                             same=("两者一样快", "both are as fast")))

One job per module; every name is importable from here (``from labkit.labs.common.measure import X``):

    clocks.py     the measuring clocks and threads; the hook that injects contention (clock_override)
    load.py       the machine: load, cores, CPU
    verdict.py    Verdict and the rule that concludes one from per-round ratios
    sentences.py  a verdict read out in Chinese or English: sentences, table marks, the busy warning
    compare.py    interleaved rounds of timed arms, their verdicts, the lab's record of them

Tests inject contention through :func:`clock_override` (a :class:`ContendedClock` slows random
stretches of time 1–10×) and check that no verdict turns clear in the direction opposite to the
noiseless run.
"""

from __future__ import annotations

from labkit.labs.common.measure.clocks import (
    Clock,
    ContendedClock,
    as_clock,
    clock_override,
    cpu_clock,
    measure_threads,
    measuring,
    wall_clock,
)
from labkit.labs.common.measure.compare import (
    QUANTITIES,
    ArmValues,
    Comparison,
    Sample,
    compare,
    record_verdict,
)
from labkit.labs.common.measure.load import cores, describe_machine, machine_load
from labkit.labs.common.measure.sentences import CONFIDENCE_LABELS, busy_warning, render
from labkit.labs.common.measure.verdict import (
    CONFIDENCES,
    DEFAULT_MARGIN,
    DEFAULT_MAX_SPREAD,
    DIRECTIONS,
    Verdict,
    verdict_from_ratios,
)

__all__ = ["CONFIDENCES", "CONFIDENCE_LABELS", "DEFAULT_MARGIN", "DEFAULT_MAX_SPREAD", "DIRECTIONS", "QUANTITIES",
           "ArmValues", "Clock", "Comparison", "ContendedClock", "Sample", "Verdict", "as_clock", "busy_warning",
           "clock_override", "compare", "cores", "cpu_clock", "describe_machine", "machine_load", "measure_threads",
           "measuring", "record_verdict", "render", "verdict_from_ratios", "wall_clock"]
