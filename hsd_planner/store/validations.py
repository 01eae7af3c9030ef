"""What a validation reads and writes: the stored solves and plans it runs, and its own rows.

Which plans to run is the validation's decision (:mod:`hsd_planner.validation`); this module only
reads them back as typed records and stores what was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..vocab import AcceptanceModel, PlanKind
from .measurements import hardware_record, setting_record
from .records import PlanRecord, SolveRecord
from .schema import Hardware, ModelRow, PlanRow, Setting, Solve, Validation, ValidationRun, Workload
from .solves import widths_from_json

__all__ = [
    "StoredValidation",
    "ValidationEntry",
    "ValidationRunEntry",
    "model_sources",
    "newest_solve",
    "plans_by_id",
    "plans_of_solve",
    "save_validation",
    "solve_record",
    "stored_validations",
]


@dataclass(frozen=True)
class ValidationRunEntry:
    """One plan's run in a validation, as stored (``widths`` as JSON: a tree as ``"3x2x1"``)."""

    plan_id: int | None
    chain: list[str]
    widths: list[int | str]
    predicted_ms_per_token: float
    calibrated_ms_per_token: float | None
    measured_ms_per_token: float
    error: float
    measured_speedup: float
    predicted_mean_accepted_length: float
    measured_mean_accepted_length: float
    prefill_ms: float
    tokens: int
    levels: list[dict]


@dataclass(frozen=True)
class ValidationEntry:
    """A validation's summary, as stored beside its runs."""

    solve_id: int
    prompts_name: str
    prompts: int
    max_new_tokens: int
    repeats: int
    median_abs_error: float | None
    regret: float | None
    median_abs_speedup_error: float | None
    median_abs_error_calibrated: float | None
    median_abs_speedup_error_calibrated: float | None
    calibration: dict | None


@dataclass(frozen=True)
class StoredValidation:
    """A stored validation read back: its summary, the solve it ran and its runs."""

    id: int
    entry: ValidationEntry
    solve: SolveRecord
    runs: list[ValidationRunEntry]


def stored_validations(engine: Engine) -> list[StoredValidation]:
    """Every stored validation, oldest first."""
    entry_fields = ValidationEntry.__dataclass_fields__
    run_fields = ValidationRunEntry.__dataclass_fields__
    out = []
    with Session(engine) as s:
        for v in s.scalars(select(Validation).order_by(Validation.id)):
            runs = s.scalars(select(ValidationRun).filter_by(validation_id=v.id).order_by(ValidationRun.id))
            out.append(
                StoredValidation(
                    v.id,
                    ValidationEntry(**{k: getattr(v, k) for k in entry_fields}),
                    _solve(s, s.get_one(Solve, v.solve_id)),
                    [ValidationRunEntry(**{k: getattr(r, k) for k in run_fields}) for r in runs],
                )
            )
    return out


def solve_record(engine: Engine, solve_id: int) -> SolveRecord:
    """Solve ``solve_id`` with the rows of the profile it read."""
    with Session(engine) as s:
        solve = s.get(Solve, solve_id)
        if solve is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        return _solve(s, solve)


def newest_solve(engine: Engine) -> SolveRecord:
    """The newest solve; a StoreError when there is none."""
    with Session(engine) as s:
        solve = s.scalars(select(Solve).order_by(Solve.id.desc())).first()
        if solve is None:
            raise StoreError("there is no plan in the database; run hsd-plan solve first")
        return _solve(s, solve)


def plans_by_id(engine: Engine, plan_ids: Sequence[int]) -> list[PlanRecord]:
    """The plans ``plan_ids``, in that order; a StoreError names the first that does not exist."""
    with Session(engine) as s:
        rows = [s.get(PlanRow, i) for i in plan_ids]
        missing = [i for i, r in zip(plan_ids, rows) if r is None]
        if missing:
            raise StoreError(f"no plan with id {missing[0]}; see hsd-plan solve for plan ids")
        return [_plan(r) for r in rows if r is not None]


def plans_of_solve(engine: Engine, solve_id: int) -> list[PlanRecord]:
    """Every plan of a solve, by rank (best first, autoregressive decoding last)."""
    with Session(engine) as s:
        return [_plan(r) for r in s.scalars(select(PlanRow).filter_by(solve_id=solve_id).order_by(PlanRow.rank))]


def model_sources(engine: Engine) -> dict[str, str | None]:
    """Every stored model spec with the fingerprint of the files it was measured from (None: no files)."""
    with Session(engine) as s:
        return {m.spec: m.source_fingerprint for m in s.scalars(select(ModelRow))}


def save_validation(engine: Engine, entry: ValidationEntry, runs: Sequence[ValidationRunEntry]) -> int:
    """Store a validation and its runs in one transaction; return its id."""
    with Session(engine) as s, s.begin():
        row = Validation(**asdict(entry))
        s.add(row)
        s.flush()
        for run in runs:
            s.add(ValidationRun(validation_id=row.id, **asdict(run)))
        return row.id


def _solve(s: Session, solve: Solve) -> SolveRecord:
    # foreign keys: a stored solve's rows exist
    return SolveRecord(
        id=solve.id,
        target=s.get_one(ModelRow, solve.target_id).spec,
        workload=s.get_one(Workload, solve.workload_id).name,
        workload_id=solve.workload_id,
        setting_id=solve.setting_id,
        hardware_id=solve.hardware_id,
        acceptance_model=cast(AcceptanceModel, solve.acceptance_model),
        t_max=solve.t_max,
        max_depth=solve.max_depth,
        context_len=solve.context_len,
        setting=setting_record(s.get_one(Setting, solve.setting_id)),
        hardware=hardware_record(s.get_one(Hardware, solve.hardware_id)),
    )


def _plan(row: PlanRow) -> PlanRecord:
    interval = (row.speedup_lo, row.speedup_hi) if row.speedup_lo is not None and row.speedup_hi is not None else None
    return PlanRecord(
        id=row.id,
        solve_id=row.solve_id,
        rank=row.rank,
        kind=cast(PlanKind, row.kind),
        chain=list(row.chain),
        widths=widths_from_json(row.widths),
        predicted_ms_per_token=row.predicted_ms_per_token,
        predicted_mean_accepted_length=row.predicted_mean_accepted_length,
        predicted_speedup=row.predicted_speedup,
        speedup_interval=interval,
        tied=row.tied,
    )
