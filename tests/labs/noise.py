"""Contention injected into a lab's own measuring code path.

A test makes a lab's timed work advance a :class:`WorkClock` by a known cost per call, so the
noiseless run has a known, clear answer; then it reruns the same code path with a
``ContendedClock`` over that work clock (random stretches slowed 1–10×) and checks that no verdict
comes out *clear* in the direction opposite to the noiseless one, while the noise is strong enough
to flip a single round (what a bare one-round number would have printed).
"""

from __future__ import annotations

from labkit.labs.common.measure import Clock, ContendedClock, clock_override

OPPOSITE = {"greater": ("less",), "less": ("greater",), "same": ("greater", "less")}
SEEDS = range(5)


class WorkClock:
    """Time that passes only when the test says work was done."""

    name = "work clock"

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def quiet(work: WorkClock):
    return clock_override(Clock("work clock", work))


def contended(work: WorkClock, seed: int, episode: tuple[float, float] = (0.5, 5.0)):
    """The contention of lab 04's test: half the stretches slowed 1–10×, each 0.5–5 units long (a
    unit: one forward pass there; pass ``episode`` to scale it to another lab's unit of work)."""
    return clock_override(ContendedClock(work, seed=seed, p=0.5, slow=(1, 10), episode=episode))


def assert_never_clearly_opposite(work: WorkClock, measure, expected: str, verdict_of=lambda r: r.verdict,
                                  round_ratios_of=None, seeds=SEEDS, episode: tuple[float, float] = (0.5, 5.0)):
    """``measure()`` runs the lab's code path (its timed work advancing ``work``) and returns its
    result; ``verdict_of(result)`` is its Verdict; ``round_ratios_of(result)`` the per-round ratios
    (default: the verdict's min and max). The quiet run must be clear in ``expected``; under
    contention (stretches of ``episode`` work-clock seconds) no run may be clear in the opposite
    direction, and some round must fall on the opposite side of 1 (else the noise proved nothing)."""
    round_ratios_of = round_ratios_of or (lambda r: (verdict_of(r).ratio_min, verdict_of(r).ratio_max))
    with quiet(work):
        v = verdict_of(measure())
    assert (v.direction, v.confidence) == (expected, "clear"), v
    fooled = False
    for seed in seeds:
        with contended(work, seed, episode):
            result = measure()
        v = verdict_of(result)
        assert not (v.clear and v.direction in OPPOSITE[expected]), (seed, v)
        ratios = list(round_ratios_of(result))
        if expected == "greater":
            fooled |= min(ratios) < 1
        elif expected == "less":
            fooled |= max(ratios) > 1
        else:
            fooled |= min(ratios) < 1 - v.margin or max(ratios) > 1 + v.margin
    assert fooled, "the injected noise should be strong enough to fool a single round"
