"""The typed report of a validation: per plan predicted against measured, and the summary figures."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from hsd_runtime.terms.choices import Mode

from ..choices import AcceptanceModel
from ..plan import Plan
from ..profiling.contention import Load
from ..store.validations import CoverageHistory
from .calibration import CalibrationRecord

__all__ = ["ERROR_GOAL", "SHIFT", "LevelResult", "PlanResult", "Shift", "ValidationReport", "prompts_for_error"]

# the median |speed-up error| a validation's draw is sized for: prompts_for_error reads how many
# held-out prompts bring the draw's expected error down to it
ERROR_GOAL = 0.05
SHIFT = 0.10  # a level of the pick drafted more than this off its prediction: the held-out prompts draft otherwise


@dataclass(frozen=True)
class LevelResult:
    """One level of a plan over all its runs; tokens per round for every level above level 0."""

    model: str
    forward_passes: int
    proposed: int
    accepted: int
    time_s: float  # model passes with their cache work (see hsd_runtime.LevelStats)
    measured_tokens_per_round: float | None = None
    predicted_tokens_per_round: float | None = None
    # a middle level: its rounds per round of the level above, m(T_k) predicted and measured (its
    # tokens per round are not comparable: the last round of each is cut to the tokens still needed)
    predicted_rounds: float | None = None
    measured_rounds: float | None = None
    forward_s: float = 0.0  # of time_s: inside the model
    cache_s: float = 0.0  # of time_s: prefix matching, rollback, logits bookkeeping
    draft_s: float = 0.0  # choosing drafted tokens from a level-0 model's logits
    verify_s: float = 0.0  # the verification rule over the batch from below
    steers: int = 0  # a steered level: the projections it ran (one per proposal)
    steer_s: float = 0.0  # ... and their time

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PlanResult:
    """One plan run on every held-out prompt, ``batch_size`` prompts in lockstep: the prediction
    and the measurement side by side."""

    plan_id: int | None  # the solve's stored plan (its schedule's included); None for a fixed chain
    kind: str  # a PlanKind ("schedule": the solve's plan for its batch size), or "fixed"
    plan: Plan  # chain, widths (a tree as a TreeShape) and prediction, its speed-up over the autoregressive plan's
    measured_ms_per_token: float
    measured_mean_accepted_length: float
    measured_speedup: float  # over autoregressive decoding measured in the same validation (on the same batches)
    prefill_ms: float
    tokens: int
    levels: list[LevelResult]
    measured_speedup_interval: tuple[float, float] | None = None  # 5th-95th percentile over bootstrap resamples of the prompts
    tied: bool | None = None  # the solve found its predicted interval overlapping the pick's
    calibrated_ms_per_token: float | None = None  # predicted from the profile scaled by the drift of each model and pass size
    calibrated_speedup: float | None = None  # over the autoregressive plan's calibrated prediction
    batch_size: int = 1  # sequences decoded in lockstep
    # the 90% interval of the predicted speed-up: the profiled prompts' spread (bootstrap) with the
    # profile's measured timing drift, at this validation's length, contexts and batch size
    predicted_speedup_interval: tuple[float, float] | None = None
    # the same before the misses of validations stored earlier widened it (the bootstrap's own):
    # the unit a later validation measures this plan's miss in
    bootstrap_speedup_interval: tuple[float, float] | None = None
    # at one sequence, the 90% interval of its tokens per target round over the same bootstrap:
    # where held-out sets drawn like the profiled prompts would put it
    predicted_accepted_interval: tuple[float, float] | None = None
    # the median |speed-up error| over the same bootstrap's predictions against the plan's: what the
    # draw of this many prompts and the profile's timing spread alone make, with a model exact on
    # the workload (None without an interval)
    expected_abs_speedup_error: float | None = None

    @property
    def covered(self) -> bool | None:
        """Whether the measured speed-up fell inside the predicted interval (None: no interval,
        or autoregressive decoding, whose speed-up is 1 by definition)."""
        if self.predicted_speedup_interval is None or not self.plan.depth:
            return None
        lo, hi = self.predicted_speedup_interval
        return lo <= self.measured_speedup <= hi

    @property
    def interval_width(self) -> float | None:
        """The predicted interval's width over the predicted speed-up (None without one)."""
        if self.predicted_speedup_interval is None or not self.plan.prediction.speedup:
            return None
        lo, hi = self.predicted_speedup_interval
        return (hi - lo) / self.plan.prediction.speedup

    # greedy decoding: of its text_runs sequences, how many made exactly the tokens of the
    # autoregressive run beside them (None: sampled, or autoregressive decoding itself). A pass over
    # several tokens rounds otherwise than one over a single token, so outside fp32 torch a flipped
    # near-tie can change the rest of a reply: the plan then drafts on text the profile never saw
    same_text: int | None = None
    text_runs: int | None = None
    other_cores: float | None = None  # cores other work kept busy during its runs, on average (None: not checked)
    busy_runs: int | None = None  # its runs during which other work contended for the cores (profiling.contention)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured ms per token."""
        return (self.plan.prediction.ms_per_token - self.measured_ms_per_token) / self.measured_ms_per_token

    @property
    def speedup_error(self) -> float:
        """Predicted over measured speed-up, minus one: both ratios taken within one run."""
        return self.plan.prediction.speedup / self.measured_speedup - 1.0

    @property
    def calibrated_error(self) -> float | None:
        """The error of the calibrated prediction (None when the validation had no reference passes)."""
        if self.calibrated_ms_per_token is None:
            return None
        return self.calibrated_ms_per_token / self.measured_ms_per_token - 1.0

    @property
    def calibrated_speedup_error(self) -> float | None:
        """Calibrated predicted over measured speed-up, minus one."""
        return None if self.calibrated_speedup is None else self.calibrated_speedup / self.measured_speedup - 1.0

    @property
    def predicted_tokens_per_s(self) -> float:
        """Tokens per second of the whole batch, predicted."""
        return 1000.0 * self.batch_size / self.plan.prediction.ms_per_token

    @property
    def measured_tokens_per_s(self) -> float:
        """Tokens per second of the whole batch, measured."""
        return 1000.0 * self.batch_size / self.measured_ms_per_token

    def to_dict(self) -> dict:
        """The plan's JSON in a validation report (and, the keys it has, its stored row)."""
        own = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("plan", "levels")}
        keys = (
            "error",
            "speedup_error",
            "calibrated_error",
            "calibrated_speedup_error",
            "predicted_tokens_per_s",
            "measured_tokens_per_s",
            "covered",
            "interval_width",
        )
        derived = {k: getattr(self, k) for k in keys}
        lo, hi = self.predicted_speedup_interval or (None, None)
        derived |= {"predicted_speedup_lo": lo, "predicted_speedup_hi": hi}
        lo, hi = self.bootstrap_speedup_interval or (None, None)
        derived |= {"bootstrap_speedup_lo": lo, "bootstrap_speedup_hi": hi}
        return {**own, **self.plan.to_dict(), **derived, "levels": [lv.to_dict() for lv in self.levels]}


@dataclass(frozen=True)
class Shift:
    """One level of the pick whose rounds went otherwise on the held-out prompts than the profile
    predicts: the target's tokens per round, or a middle level's rounds per round of the level above."""

    drafter: str  # the level below, whose batch this level verifies
    verifier: str
    what: str  # "tokens per round" or "rounds per round above"
    predicted: float
    measured: float
    spread: tuple[float, float] | None = None  # the 90% interval of the prediction over bootstrap resamples of the profiled prompts

    @property
    def change(self) -> float:
        """Measured over predicted, minus one."""
        return self.measured / self.predicted - 1.0


@dataclass(frozen=True)
class ValidationReport:
    """What ``hsd-plan validate`` measured and stored."""

    validation_id: int
    solve_id: int
    target: str
    workload: str
    prompts: str
    prompt_count: int
    context_len: int  # the median of ``context_lens``
    context_lens: list[int]  # per prompt: its length plus half the continuation
    mode: Mode
    acceptance: AcceptanceModel
    plans: list[PlanResult]
    pick: int  # plan id of the solver's pick among those run (the regret and the notes read it at the smallest batch size it ran at)
    calibration: CalibrationRecord | None = None  # the reference passes: per model, profiled ms and the samples now
    lenience: float = 1.0  # below 1 the plans ran with lossy verification
    skipped: list[str] = field(default_factory=list)  # plans left out at a batch size, and why
    interval_history: int = 0  # past validated plans whose misses widened the predicted intervals (0: the bootstrap alone)
    contention: Load | None = None  # other work over the whole measuring, reference passes included (None: not checked)
    profiled_prompts: int | None = None  # the prompts the intervals' bootstrap resampled (None: no bootstrap)
    # how often the intervals held over every stored validation of the target on this machine, this one included
    coverage_history: CoverageHistory | None = None

    @property
    def busy(self) -> bool:
        """Other work contended for the cores while the plans ran: the errors are then partly the
        machine's, not the latency model's."""
        return bool(self.contention and self.contention.contended) or any(p.busy_runs for p in self.plans)

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes run, ascending."""
        return sorted({p.batch_size for p in self.plans})

    def _pick(self) -> PlanResult:
        """The pick's result at the smallest batch size it ran at (the plans are ordered by batch size)."""
        return next(p for p in self.plans if p.plan_id == self.pick)

    def _beside_pick(self) -> list[PlanResult]:
        """The plans run at the pick's batch size."""
        b = self._pick().batch_size
        return [p for p in self.plans if p.batch_size == b]

    @property
    def median_abs_error(self) -> float:
        return _median([abs(p.error) for p in self.plans])

    @property
    def median_abs_error_calibrated(self) -> float:
        """The median |error| of the calibrated predictions (each model's curve scaled by its drift)."""
        return _median([abs(p.calibrated_error) for p in self.plans if p.calibrated_error is not None])

    @property
    def median_abs_speedup_error(self) -> float:
        """The median |speed-up error| of the plans above autoregressive decoding, predicted from the profile as measured."""
        return _median([abs(p.speedup_error) for p in self.plans if p.plan.depth])

    @property
    def median_abs_speedup_error_calibrated(self) -> float:
        """The same from the calibrated profile: what is left once the machine's change of state is taken out."""
        return _median([abs(p.calibrated_speedup_error) for p in self.plans if p.plan.depth and p.calibrated_speedup_error is not None])

    @property
    def expected_abs_speedup_error(self) -> float | None:
        """The median over the plans above autoregressive decoding of their expected |speed-up error|
        (see :attr:`PlanResult.expected_abs_speedup_error`): a median |speed-up error| near it is
        the luck of the prompts drawn; None where no plan has one."""
        found = [e for p in self.plans if p.plan.depth and (e := p.expected_abs_speedup_error) is not None]
        return statistics.median(found) if found else None

    @property
    def prompts_for_error_goal(self) -> int | None:
        """About how many held-out prompts a validation needs for the draw alone to expect a median
        |speed-up error| of :data:`ERROR_GOAL` (see :func:`prompts_for_error`); None without an
        expectation, or where no number of held-out prompts gets there."""
        expected = self.expected_abs_speedup_error
        if expected is None or not self.profiled_prompts:
            return None
        return prompts_for_error(expected, self.prompt_count, self.profiled_prompts)

    @property
    def coverage(self) -> float | None:
        """The share of plans above autoregressive decoding, among those with a predicted interval,
        whose measured speed-up fell inside it (None: no plan had one)."""
        hits = [p.covered for p in self.plans if p.covered is not None]
        return sum(hits) / len(hits) if hits else None

    @property
    def median_interval_width(self) -> float | None:
        """The median width of the plans' predicted intervals over their predicted speed-ups."""
        widths = [w for p in self.plans if p.plan.depth and (w := p.interval_width) is not None]
        return statistics.median(widths) if widths else None

    @property
    def regret(self) -> float:
        """Measured latency of the pick over the best measured among the plans run beside it, minus one."""
        pick = self._pick()
        return pick.measured_ms_per_token / min(p.measured_ms_per_token for p in self._beside_pick()) - 1.0

    @property
    def regret_untied(self) -> float:
        """The regret against the best plan the solve could tell apart from the pick (not tied)."""
        pick = self._pick()
        fair = [p.measured_ms_per_token for p in self._beside_pick() if p.plan_id == self.pick or not p.tied]
        return pick.measured_ms_per_token / min(fair) - 1.0

    @property
    def target_ratios(self) -> dict[int, float]:
        """The target's reference passes over the validation, median now over profiled, per pass size."""
        ref = self.calibration.models.get(self.target) if self.calibration else None
        return ref.ratios() if ref else {}

    @property
    def drift(self) -> float:
        """The target now over when profiled over the whole validation: the geometric mean of its
        reference ratios (1.0 without reference passes; one figure for the summary)."""
        ratios = list(self.target_ratios.values())
        return math.prod(ratios) ** (1.0 / len(ratios)) if ratios else 1.0

    @property
    def state_changed(self) -> bool:
        """The pick's calibrated speed-up differs from the profile's by more than 5%: the machine
        is in another state than when profiled (see :mod:`.calibration`)."""
        pick = self._pick()
        return pick.calibrated_speedup is not None and abs(pick.calibrated_speedup / pick.plan.prediction.speedup - 1.0) > 0.05

    @property
    def acceptance_shift(self) -> list[Shift]:
        """The pick's levels whose rounds on the held-out prompts differ from the profile's
        prediction by more than :data:`SHIFT`: these prompts draft otherwise than the profiled ones
        (the latency model's inputs beside the passes' costs; a middle level's shift shows as the
        rounds it runs, since its tokens per round are cut to what the level above still needs)."""
        pick = self._pick()
        chain, out = pick.plan.chain, []
        if pick.plan.depth and pick.batch_size == 1:
            out.append(
                Shift(
                    chain[-2],
                    chain[-1],
                    "tokens per round",
                    pick.plan.prediction.mean_accepted_length,
                    pick.measured_mean_accepted_length,
                    pick.predicted_accepted_interval,
                )
            )
        for k in range(1, len(chain) - 1):  # the middle levels
            level = pick.levels[k]
            if level.predicted_rounds is not None and level.measured_rounds is not None:
                out.append(Shift(chain[k - 1], chain[k], "rounds per round above", level.predicted_rounds, level.measured_rounds))
        return [x for x in out if x.predicted > 0 and abs(x.change) > SHIFT]

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "plans"} | {"batch_sizes": self.batch_sizes}
        out["calibration"] = self.calibration.to_dict() if self.calibration else None
        out["contention"] = self.contention.to_dict() if self.contention else None
        out["coverage_history"] = asdict(self.coverage_history) if self.coverage_history else None
        keys = (
            "median_abs_error",
            "median_abs_error_calibrated",
            "median_abs_speedup_error",
            "median_abs_speedup_error_calibrated",
            "expected_abs_speedup_error",
            "prompts_for_error_goal",
            "regret",
            "regret_untied",
            "drift",
            "state_changed",
            "coverage",
            "median_interval_width",
            "busy",
        )
        summary = {k: getattr(self, k) for k in keys}
        summary["acceptance_shift"] = [{**asdict(x), "change": x.change} for x in self.acceptance_shift]
        return {**out, **summary, "plans": [p.to_dict() for p in self.plans]}


def prompts_for_error(expected: float, drawn: int, profiled: int, goal: float = ERROR_GOAL) -> int | None:
    """About how many held-out prompts make the expected |speed-up error| ``goal``, from an expected
    error ``expected`` over ``drawn`` prompts and a bootstrap of ``profiled`` ones. Each bootstrap
    profile pools ``drawn`` prompts of a resample of the profiled, so its spread goes as
    sigma^2 (1/drawn + 1/profiled): more held-out prompts shrink the first term only, and where the
    second alone is above ``goal`` (the profiled prompts' own uncertainty) no count gets there: None.

    >>> prompts_for_error(0.113, 4, 48)  # a draw of 4 expecting 11.3 %: about 32 prompts expect 5 %
    32
    >>> prompts_for_error(0.03, 6, 24)  # already there: fewer prompts would do
    2
    >>> prompts_for_error(0.2, 4, 8) is None  # 8 profiled prompts alone leave more than 5 %
    True
    >>> prompts_for_error(0.0, 2, 1)  # no spread at all: one prompt will do
    1
    """
    sigma2 = expected**2 / (1.0 / drawn + 1.0 / profiled)
    if sigma2 == 0.0:  # the resamples all predict alike (one profiled prompt, or plans that draft nothing): any draw
        return 1
    rest = goal**2 / sigma2 - 1.0 / profiled
    return max(1, math.ceil(1.0 / rest)) if rest > 0 else None


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
