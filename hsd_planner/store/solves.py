"""A solve as stored: its options and the profile rows it read, its ranked plans, read back as records.

Solving itself (reading the profile, the solver, bootstrap intervals) is
:mod:`hsd_planner.solving`; this module stores what it found and reads solves back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ..choices import AcceptanceModel
from ..errors import StoreError
from ..plan import SolveConfig
from .measurements import hardware_record, setting_record
from .profiles import ProfileSource
from .records import RankedPlan, Ranking, SolveRecord, WorkloadRecord
from .repo import get_or_create
from .schema import Acceptance, Hardware, ModelRow, PlanRow, Setting, Solve, Workload

__all__ = ["acceptance_sample", "newest_solve", "profiled_length", "save_solve", "solve_record"]


def save_solve(db: Engine, source: ProfileSource, config: SolveConfig, context_len: int, ranked: Sequence[Ranking]) -> list[RankedPlan]:
    """Store a solve of the profile ``source`` with its ``ranked`` plans in rank order, in one
    transaction; return the plans as stored."""
    with Session(db) as s, s.begin():
        target_id = get_or_create(s, ModelRow, {"spec": source.target}, parameters=0).id
        row = Solve(
            target_id=target_id,
            workload_id=source.workload_id,
            setting_id=source.setting_id,
            hardware_id=source.hardware_id,
            acceptance_model=config.acceptance,
            t_max=config.t_max,
            max_depth=config.max_depth,
            context_len=context_len,
            max_new_tokens=config.max_new_tokens,
        )
        s.add(row)
        s.flush()
        stored = []
        for rank, ranking in enumerate(ranked):
            plan, kind, interval, tied = ranking
            lo, hi = interval or (None, None)
            plan_row = PlanRow(solve_id=row.id, rank=rank, kind=kind, **plan.to_dict(), speedup_lo=lo, speedup_hi=hi, tied=tied)
            s.add(plan_row)
            s.flush()
            stored.append(RankedPlan.of(plan_row.id, row.id, ranking))
        return stored


def profiled_length(db: Engine, setting_id: int) -> int:
    """The new tokens of each continuation the profile of ``setting_id`` measured acceptance on."""
    with Session(db) as s:
        return s.get_one(Setting, setting_id).max_new_tokens


def acceptance_sample(db: Engine, source: ProfileSource, chain: Sequence[str]) -> tuple[int, int] | None:
    """(fewest prompts, fewest positions) over the acceptance rows of the consecutive pairs of
    ``chain`` in the profile's workload and setting; None when it has no pair or a row is missing."""
    with Session(db) as s:
        ids = dict(s.execute(select(ModelRow.spec, ModelRow.id).where(ModelRow.spec.in_(list(chain)))).tuples().all())
        rows = []
        for drafter, verifier in zip(chain, chain[1:]):
            row = s.scalars(
                select(Acceptance).filter_by(
                    drafter_id=ids.get(drafter), verifier_id=ids.get(verifier), workload_id=source.workload_id, setting_id=source.setting_id
                )
            ).first()
            if row is None:
                return None
            rows.append(row)
        return (min(r.prompts for r in rows), min(r.positions for r in rows)) if rows else None


def solve_record(db: Engine, solve_id: int) -> SolveRecord:
    """Solve ``solve_id`` with the rows of the profile it read."""
    with Session(db) as s:
        solve = s.get(Solve, solve_id)
        if solve is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        return _solve(s, solve)


def newest_solve(db: Engine) -> SolveRecord:
    """The newest solve; a StoreError when there is none."""
    with Session(db) as s:
        solve = s.scalars(select(Solve).order_by(Solve.id.desc())).first()
        if solve is None:
            raise StoreError("there is no plan in the database; run hsd-plan solve first")
        return _solve(s, solve)


def _solve(s: Session, solve: Solve) -> SolveRecord:
    workload = s.get_one(Workload, solve.workload_id)  # foreign keys: a stored solve's rows exist
    return SolveRecord(
        id=solve.id,
        target=s.get_one(ModelRow, solve.target_id).spec,
        workload=WorkloadRecord(workload.name, workload.content_hash, workload.count),
        workload_id=solve.workload_id,
        setting_id=solve.setting_id,
        hardware_id=solve.hardware_id,
        acceptance_model=cast(AcceptanceModel, solve.acceptance_model),
        t_max=solve.t_max,
        max_depth=solve.max_depth,
        context_len=solve.context_len,
        max_new_tokens=solve.max_new_tokens,
        setting=setting_record(s.get_one(Setting, solve.setting_id)),
        hardware=hardware_record(s.get_one(Hardware, solve.hardware_id)),
    )
