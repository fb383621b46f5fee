"""``AcceptanceView``: how many draft tokens the target accepts, and what that buys.

Counts (vLLM's names)::

    acceptance rate         = accepted / drafted      (spec_decode_num_accepted_tokens / ..._num_draft_tokens)
    mean acceptance length  = 1 + accepted / drafts   (tokens per verify step, bonus token included)
    per-position rate[i]    = drafts whose position i was accepted / drafts that proposed position i

Predicted speed-up (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via
Speculative Decoding", eq. (1) and Theorem 3.8) for a per-token acceptance probability α, k draft
tokens per step and cost ratio c = time(one draft step) / time(one target step)::

    E[tokens per target step] = (1 − α^(k+1)) / (1 − α)
    speed-up                  = (1 − α^(k+1)) / ((1 − α)(k·c + 1))

α is not the acceptance rate: verification stops at the first rejection, so the positions after it
are never tested, and accepted / drafted underestimates α (α = 0.8, k = 4 gives 0.59). Under the
paper's model every tested position passes with probability α, so the estimate is the share of
tested positions that passed::

    α̂ = accepted / (accepted + rejections)       rejections = drafts that stopped before k

Measured speed-up = baseline TPOT (same workload without speculation, set ``baseline_tpot_s``) /
mean TPOT of the requests finished while this view listened (``RequestFinished.timings``).

c, when not given: measured from the run, as the paper defines it (one draft step over one target
step). Each step's ``StepStats.propose_s`` is the proposer drafting k tokens for the next step, and a
target step costs the baseline TPOT (a plain decode step makes one token), so::

    c = mean proposer time per drafting step / (k · baseline TPOT)

For n-gram lookup c is close to 0; for a draft model it is its k forwards' share of a target step.
Only a view with ``show_inputs=True`` listens to ``StepEnd`` for this.

The speed-up-vs-k panel is drawn only once there is a curve to draw (c is known); until then the
view shows the two acceptance panels. With ``show_inputs=False`` (a caller that measures c and
the baseline TPOT itself, e.g. lab 04's live demo) the two number inputs are hidden and the stats
say the values come from the run.
"""

from __future__ import annotations

from collections import deque

import traitlets

from labkit.events import RequestFinished, SpecVerified, StepEnd
from labkit.i18n import t
from labkit.widgets.base import LiveView, bundle_esm

PREDICTED_K_MAX = 8   # the speed-up-vs-k curve covers k = 1 .. max(8, k seen)


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """(1 − α^(k+1)) / (1 − α): Leviathan et al. 2023, eq. (1); k + 1 when α = 1."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Expected walltime improvement (1 − α^(k+1)) / ((1 − α)(k·c + 1)), Theorem 3.8."""
    if not 0.0 <= alpha <= 1.0 or k < 0 or c < 0:
        raise ValueError(f"need 0 <= alpha <= 1, k >= 0, c >= 0; got alpha={alpha}, k={k}, c={c}")
    return expected_tokens_per_step(alpha, k) / (k * c + 1.0)


def estimate_alpha(num_accepted: int, num_rejections: int) -> float | None:
    """Share of tested draft positions that passed (see the module docstring); None untested."""
    tested = num_accepted + num_rejections
    return None if tested == 0 else num_accepted / tested


class AcceptanceView(LiveView):
    """Accepted vs rejected draft tokens and measured vs predicted speed-up."""

    _esm = bundle_esm("acceptance_view.js")
    EVENT_TYPES = (SpecVerified, RequestFinished, StepEnd)

    c = traitlets.Float(None, allow_none=True).tag(sync=True)                # draft/target cost ratio
    baseline_tpot_s = traitlets.Float(None, allow_none=True).tag(sync=True)  # TPOT without speculation
    window = traitlets.Int(200, min=1).tag(sync=True)          # verify events kept in `history`
    history = traitlets.List().tag(sync=True)                  # [[accepted, drafted], ...] oldest first
    k = traitlets.Int(0).tag(sync=True)                        # most draft tokens seen in one step
    num_drafts = traitlets.Int(0).tag(sync=True)
    num_draft_tokens = traitlets.Int(0).tag(sync=True)
    num_accepted_tokens = traitlets.Int(0).tag(sync=True)
    accepted_per_pos = traitlets.List().tag(sync=True)         # per position: drafts that accepted it
    drafts_per_pos = traitlets.List().tag(sync=True)           # per position: drafts that proposed it
    acceptance_per_pos = traitlets.List().tag(sync=True)       # ratio of the two, 0..1
    acceptance_rate = traitlets.Float(None, allow_none=True).tag(sync=True)
    alpha = traitlets.Float(None, allow_none=True).tag(sync=True)
    mean_acceptance_length = traitlets.Float(None, allow_none=True).tag(sync=True)
    predicted_speedup = traitlets.Float(None, allow_none=True).tag(sync=True)   # at (α̂, k, c)
    predicted_curve = traitlets.List().tag(sync=True)          # [[k, speed-up], ...] at (α̂, c)
    tpot_s = traitlets.Float(None, allow_none=True).tag(sync=True)              # mean, speculative
    measured_speedup = traitlets.Float(None, allow_none=True).tag(sync=True)
    show_inputs = traitlets.Bool(True).tag(sync=True)          # False: c and the baseline come from the caller
    c_measured = traitlets.Float(None, allow_none=True).tag(sync=True)   # c from this run (module docstring)

    def __init__(self, engine: object | None = None, *, c: float | None = None,
                 baseline_tpot_s: float | None = None, window: int = 200, show_inputs: bool = True,
                 **kwargs) -> None:
        self._history: deque[tuple[int, int]] = deque(maxlen=window)
        self._num_drafts = self._num_draft_tokens = self._num_accepted = self._num_rejections = 0
        self._accepted_per_pos: list[int] = []
        self._drafts_per_pos: list[int] = []
        self._tpot_sum, self._tpot_count = 0.0, 0
        self._propose_sum, self._propose_count = 0.0, 0
        if not show_inputs:      # the caller measures c itself: no per-step event (and block-map snapshot) needed
            self.EVENT_TYPES = (SpecVerified, RequestFinished)
        super().__init__(engine, c=c, baseline_tpot_s=baseline_tpot_s, window=window, show_inputs=show_inputs,
                         **kwargs)

    def ingest(self, event: SpecVerified | RequestFinished | StepEnd) -> None:
        if isinstance(event, RequestFinished):
            self._ingest_timing(event)
        elif isinstance(event, StepEnd):
            if event.stats.propose_s > 0:
                self._propose_sum += event.stats.propose_s
                self._propose_count += 1
        elif event.drafted > 0:    # a step where the proposer had nothing to offer is no draft
            self._ingest_verify(event)

    def _ingest_verify(self, event: SpecVerified) -> None:
        self._history.append((event.accepted, event.drafted))
        self._num_drafts += 1
        self._num_draft_tokens += event.drafted
        self._num_accepted += event.accepted
        self._num_rejections += event.accepted < event.drafted
        grow = event.drafted - len(self._drafts_per_pos)
        if grow > 0:
            self._drafts_per_pos += [0] * grow
            self._accepted_per_pos += [0] * grow
        for pos, ok in enumerate(event.per_position[:event.drafted]):
            self._drafts_per_pos[pos] += 1
            self._accepted_per_pos[pos] += bool(ok)

    def _ingest_timing(self, event: RequestFinished) -> None:
        tpot = event.timings.tpot_s
        if tpot is not None:
            self._tpot_sum += tpot
            self._tpot_count += 1

    def sync(self) -> None:
        self.history = [list(pair) for pair in self._history]
        self.k = len(self._drafts_per_pos)
        self.num_drafts, self.num_draft_tokens = self._num_drafts, self._num_draft_tokens
        self.num_accepted_tokens = self._num_accepted
        self.accepted_per_pos, self.drafts_per_pos = list(self._accepted_per_pos), list(self._drafts_per_pos)
        self.acceptance_per_pos = [a / d for a, d in zip(self._accepted_per_pos, self._drafts_per_pos)]
        drafted, drafts = self._num_draft_tokens, self._num_drafts
        self.acceptance_rate = self._num_accepted / drafted if drafted else None
        self.mean_acceptance_length = 1.0 + self._num_accepted / drafts if drafts else None
        self.alpha = estimate_alpha(self._num_accepted, self._num_rejections)
        self._sync_speedups()

    def _measured_c(self) -> float | None:
        if not self._propose_count or not self.baseline_tpot_s or self.k < 1:
            return None
        return self._propose_sum / self._propose_count / (self.k * self.baseline_tpot_s)

    def _sync_speedups(self) -> None:
        self.c_measured = self._measured_c()
        alpha, c = self.alpha, (self.c if self.c is not None else self.c_measured)
        if alpha is None or c is None:
            self.predicted_speedup, self.predicted_curve = None, []
        else:
            ks = range(1, max(PREDICTED_K_MAX, self.k) + 1)
            self.predicted_speedup = leviathan_speedup(alpha, self.k, c)
            self.predicted_curve = [[k, leviathan_speedup(alpha, k, c)] for k in ks]
        self.tpot_s = self._tpot_sum / self._tpot_count if self._tpot_count else None
        if self.baseline_tpot_s is None or not self.tpot_s:
            self.measured_speedup = None
        else:
            self.measured_speedup = self.baseline_tpot_s / self.tpot_s

    @traitlets.observe("c", "baseline_tpot_s")
    def _inputs_changed(self, _change: dict) -> None:
        if hasattr(self, "_throttle"):   # not during construction
            self.flush()

    @traitlets.observe("window")
    def _resize_window(self, change: dict) -> None:
        self._history = deque(self._history, maxlen=change["new"])

    def make_labels(self) -> dict[str, str]:
        return {
            "title": t("投机解码：草稿接受情况", "Speculative decoding: draft acceptance"),
            "waiting": t("等待第一次验证…", "Waiting for the first verification…"),
            "drafts": t("草稿次数", "drafts"),
            "acceptance_rate": t("接受率", "acceptance rate"),
            "alpha": t("α (逐 token 接受概率)", "α (per-token acceptance)"),
            "mean_length": t("平均接受长度", "mean acceptance length"),
            "predicted": t("预测加速比", "predicted speed-up"),
            "measured": t("实测加速比", "measured speed-up"),
            "tpot": t("投机 TPOT", "speculative TPOT"),
            "c_input": t("c = 草稿步/目标步耗时比", "c = draft step / target step time"),
            "baseline_input": t("基线 TPOT (ms, 无投机)", "baseline TPOT (ms, no speculation)"),
            "need_c": t("设置 c 以显示预测", "set c to see the prediction"),
            "need_baseline": t("设置基线 TPOT 以显示实测", "set the baseline TPOT to see the measurement"),
            "from_run": t("运行结束后由本次测量给出", "measured by this run when it ends"),
            "c": "c",
            "c_measured": t("（本次实测）", " (measured in this run)"),
            "per_verify": t("每次验证 (最近)", "per verification (recent)"),
            "accepted": t("接受", "accepted"),
            "rejected": t("拒绝", "rejected"),
            "per_position": t("各位置接受率", "acceptance rate by position"),
            "position": t("草稿位置", "draft position"),
            "speedup_vs_k": t("加速比 vs k", "speed-up vs k"),
            "k": t("k (每步草稿 token 数)", "k (draft tokens per step)"),
            "tokens": t("token 数", "tokens"),
            "rate": t("接受率", "rate"),
            "speedup": t("加速比 (×)", "speed-up (×)"),
        }
