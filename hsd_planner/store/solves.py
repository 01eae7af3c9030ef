"""Solving on the stored profile and storing the ranked plans (``hsd-plan solve``).

Widths are a JSON list per plan: a number of tokens stays a number, a draft tree (only ever the
first width) is stored as its text, ``"3x2x1"``; :func:`widths_from_json` reads either back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime.shape import TreeShape, Width, format_width, parse_width

from ..errors import ChainError, StoreError
from ..plan import SOLVE_DEFAULTS, Plan, Profile, SolveConfig, format_chain, predict, solve
from ..plan.config import DEFAULT_CONTEXT
from ..vocab import AcceptanceModel, Mode, PlanKind
from .bootstrap import bootstrap_profiles
from .reader import ProfileSource, load_profile
from .repo import get_or_create
from .schema import Acceptance, ModelRow, PlanRow, Solve

__all__ = ["THIN_PROMPTS", "PlanReport", "SolveReport", "solve_and_store", "widths_from_json", "widths_to_json"]

# Fewer profiled prompts than this and the pick's acceptance is a thin sample: on the Qwen family,
# 4 prompts per Spec-Bench category predicted a 1.64x pick that held-out prompts ran at 0.88x,
# with a 90% interval of 1.56-1.82 (see BENCHMARKS.md)
THIN_PROMPTS = 10


def widths_to_json(widths: Sequence[Width]) -> list[int | str]:
    """Widths as stored and printed: numbers stay numbers, a tree becomes ``"3x2x1"``.

    >>> widths_to_json([TreeShape((3, 2, 1)), 4])
    ['3x2x1', 4]
    """
    return [w if isinstance(w, int) else format_width(w) for w in widths]


def widths_from_json(values: Sequence[int | str]) -> list[Width]:
    """The widths :func:`widths_to_json` wrote (a stored plan's ``widths``), trees as TreeShape.

    >>> widths_from_json(["3x2x1", 4])
    [TreeShape(branching=(3, 2, 1)), 4]
    """
    out: list[Width] = []
    for v in values:
        try:
            out.append(v if isinstance(v, int) else parse_width(v))
        except ChainError as exc:
            raise StoreError(f"a stored plan has a width that cannot be read back: {exc}") from None
    return out


@dataclass(frozen=True)
class PlanReport:
    """One stored plan of a solve, with its prediction."""

    id: int | None
    kind: PlanKind
    chain: list[str]
    widths: list[Width]  # the first may be a draft tree
    predicted_ms_per_token: float
    predicted_mean_accepted_length: float
    predicted_speedup: float
    speedup_interval: tuple[float, float] | None = None  # 5th-95th percentile over bootstrap resamples of the prompts
    tied: bool | None = None  # the interval overlaps the pick's: the profile cannot tell them apart

    @classmethod
    def of(
        cls, plan: Plan, kind: PlanKind, plan_id: int | None = None, interval: tuple[float, float] | None = None, tied: bool | None = None
    ) -> PlanReport:
        p = plan.prediction
        return cls(plan_id, kind, list(plan.chain), list(plan.widths), p.ms_per_token, p.mean_accepted_length, p.speedup, interval, tied)

    @property
    def label(self) -> str:
        return format_chain(self.chain, self.widths)

    def to_dict(self) -> dict:
        return {**vars(self), "widths": widths_to_json(self.widths)}


@dataclass(frozen=True)
class SolveReport:
    """What ``hsd-plan solve`` stored: the solve's context and its plans, best first."""

    solve_id: int
    target: str
    workload: str
    hardware: str
    mode: Mode
    temperature: float | None  # None for greedy decoding
    acceptance: str
    context_len: int  # the one named, or the median of the workload's contexts the costs were averaged over
    plans: list[PlanReport]  # best, top, singles, autoregressive
    # what the pick's acceptance rests on: the fewest prompts and positions over its pairs (None for
    # autoregressive decoding, or a profile file without them)
    sample_prompts: int | None = None
    sample_positions: int | None = None

    @property
    def thin_sample(self) -> bool:
        """The pick's acceptance rests on fewer than THIN_PROMPTS prompts: prompts vary more than so
        few show, and a bootstrap over them gives intervals too narrow to trust."""
        return self.sample_prompts is not None and self.sample_prompts < THIN_PROMPTS

    @property
    def best(self) -> PlanReport:
        return self.plans[0]

    def to_dict(self) -> dict:
        best = self.best
        return {
            **{
                k: getattr(self, k)
                for k in (
                    "solve_id",
                    "target",
                    "workload",
                    "hardware",
                    "mode",
                    "temperature",
                    "acceptance",
                    "context_len",
                    "sample_prompts",
                    "sample_positions",
                    "thin_sample",
                )
            },
            **{
                k: v
                for k, v in best.to_dict().items()
                if k in ("chain", "widths", "predicted_ms_per_token", "predicted_mean_accepted_length", "predicted_speedup")
            },
            "plans": [p.to_dict() for p in self.plans],
        }


def solve_and_store(
    engine: Engine,
    target: str | None = None,
    workload: str | None = None,
    mode: Mode = "greedy",
    temperature: float = 1.0,
    config: SolveConfig = SOLVE_DEFAULTS,
    hardware: str | Sequence[str] | None = None,
) -> SolveReport:
    """Solve on the newest matching profile, store the solve and its plans, return a report.

    ``hardware``: the fingerprint(s) whose latency to use (None: the newest of any).
    """
    profile, source = load_profile(engine, target, workload, mode, temperature, hardware)
    c = config
    # the workload's own contexts unless one is named: each prompt plus half its continuation
    contexts: int | list[int] = c.context_len or source.contexts or DEFAULT_CONTEXT
    context_len = contexts if isinstance(contexts, int) else int(statistics.median(contexts))
    solution = solve(profile, c.t_max, c.top_k, c.max_depth, c.acceptance, contexts, c.exclude, c.require, c.trees, c.tree_budget)
    ranked: list[tuple[Plan, PlanKind]] = [(p, "best" if i == 0 else "top") for i, p in enumerate(solution.top)]
    ranked += [(p, "single") for p in solution.singles] + [(solution.autoregressive, "autoregressive")]
    intervals = _intervals(bootstrap_profiles(engine, profile, source), [p for p, _ in ranked], c.acceptance, contexts)
    with Session(engine) as s, s.begin():
        target_id = get_or_create(s, ModelRow, {"spec": source.target}, parameters=0).id
        row = Solve(
            target_id=target_id,
            workload_id=source.workload_id,
            setting_id=source.setting_id,
            hardware_id=source.hardware_id,
            acceptance_model=c.acceptance,
            t_max=c.t_max,
            max_depth=c.max_depth,
            context_len=context_len,
        )
        s.add(row)
        s.flush()
        plans = []
        for rank, (plan, kind) in enumerate(ranked):
            p = plan.prediction
            pr = PlanRow(
                solve_id=row.id,
                rank=rank,
                kind=kind,
                chain=list(plan.chain),
                widths=widths_to_json(plan.widths),
                predicted_ms_per_token=p.ms_per_token,
                predicted_mean_accepted_length=p.mean_accepted_length,
                predicted_speedup=p.speedup,
            )
            interval, pick = (intervals[rank], intervals[0]) if intervals else (None, None)
            if interval is not None:
                pr.speedup_lo, pr.speedup_hi = interval
            if interval is not None and pick is not None:
                same_as_pick = (plan.chain, plan.widths) == (ranked[0][0].chain, ranked[0][0].widths)
                pr.tied = not same_as_pick and interval[1] >= pick[0]  # overlaps the pick's interval (rank 0)
            s.add(pr)
            s.flush()
            plans.append(PlanReport.of(plan, kind, pr.id, interval, pr.tied))
        solve_id = row.id
        sample = _acceptance_sample(s, source, ranked[0][0].chain)
    return SolveReport(
        solve_id=solve_id,
        target=source.target,
        workload=source.workload,
        hardware=source.hardware,
        mode=mode,
        temperature=temperature if mode == "sample" else None,
        acceptance=c.acceptance,
        context_len=context_len,
        plans=plans,
        sample_prompts=sample[0] if sample else None,
        sample_positions=sample[1] if sample else None,
    )


def _acceptance_sample(session: Session, source: ProfileSource, chain: Sequence[str]) -> tuple[int, int] | None:
    """(fewest prompts, fewest positions) over the acceptance rows of the consecutive pairs of
    ``chain`` in the solve's workload and setting; None when it has no pair or a row is missing."""
    ids = dict(session.execute(select(ModelRow.spec, ModelRow.id).where(ModelRow.spec.in_(list(chain)))).tuples().all())
    rows = []
    for drafter, verifier in zip(chain, chain[1:]):
        row = session.scalars(
            select(Acceptance).filter_by(
                drafter_id=ids.get(drafter), verifier_id=ids.get(verifier), workload_id=source.workload_id, setting_id=source.setting_id
            )
        ).first()
        if row is None:
            return None
        rows.append(row)
    return (min(r.prompts for r in rows), min(r.positions for r in rows)) if rows else None


def _intervals(
    profiles: list[Profile], plans: list[Plan], acceptance: AcceptanceModel, contexts: int | list[int]
) -> list[tuple[float, float] | None] | None:
    """Per plan, the 5th and 95th percentile of its predicted speed-up over the bootstrap profiles;
    None for a tree plan whose sibling curve the resamples do not carry (a fixed curve would
    shrink the interval to the upper levels' uncertainty and claim a certainty never measured)."""
    if not profiles:
        return None
    out: list[tuple[float, float] | None] = []
    for plan in plans:
        if not all(_predictable(b, plan) for b in profiles):
            out.append(None)
            continue
        speedups = [predict(b, plan.chain, plan.widths, acceptance, contexts).speedup for b in profiles]
        out.append((float(np.percentile(speedups, 5)), float(np.percentile(speedups, 95))))
    return out


def _predictable(profile: Profile, plan: Plan) -> bool:
    """Whether ``profile`` has what ``plan`` needs beyond run lengths: the first pair's sibling
    curve when the first drafter drafts a tree."""
    if not plan.widths or not isinstance(plan.widths[0], TreeShape):
        return True
    return (plan.chain[0], plan.chain[1]) in profile.siblings_curves()
