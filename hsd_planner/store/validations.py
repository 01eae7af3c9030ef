"""What a validation reads and writes: the stored solves and plans it runs, and its own rows.

Which plans to run is the validation's decision (:mod:`hsd_planner.validation`); this module only
reads them back as typed records and stores what was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Engine, Select, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..stats import miss_score
from .plans import ranked_plan
from .records import RankedPlan, SolveRecord
from .schema import ModelRow, PlanRow, Solve, Validation, ValidationRun
from .solves import solve_record

__all__ = [
    "CoverageHistory",
    "StoredValidation",
    "ValidationEntry",
    "ValidationRunEntry",
    "coverage_history",
    "model_sources",
    "plans_by_id",
    "plans_of_solve",
    "save_validation",
    "speedup_scores",
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
    batch_size: int = 1  # sequences decoded in lockstep (validate --batch-sizes)
    predicted_speedup: float | None = None  # over autoregressive decoding's prediction
    predicted_speedup_lo: float | None = None  # the 90% interval of the predicted speed-up
    predicted_speedup_hi: float | None = None
    bootstrap_speedup_lo: float | None = None  # the bootstrap's own interval, before past validations widened it
    bootstrap_speedup_hi: float | None = None
    covered: bool | None = None  # the measured speed-up fell inside it
    same_text: int | None = None  # greedy: its sequences whose tokens equal the autoregressive run's
    text_runs: int | None = None  # the sequences compared


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
    coverage: float | None = None  # share of the plans with an interval whose measured speed-up fell inside it


@dataclass(frozen=True)
class StoredValidation:
    """A stored validation read back: its summary, the solve it ran and its runs."""

    id: int
    entry: ValidationEntry
    solve: SolveRecord
    runs: list[ValidationRunEntry]


def stored_validations(db: Engine) -> list[StoredValidation]:
    """Every stored validation, oldest first."""
    entry_fields = ValidationEntry.__dataclass_fields__
    run_fields = ValidationRunEntry.__dataclass_fields__
    out: list[tuple[int, ValidationEntry, list[ValidationRunEntry]]] = []
    with Session(db) as s:
        for v in s.scalars(select(Validation).order_by(Validation.id)):
            runs = s.scalars(select(ValidationRun).filter_by(validation_id=v.id).order_by(ValidationRun.id))
            entry = ValidationEntry(**{k: getattr(v, k) for k in entry_fields})
            out.append((v.id, entry, [ValidationRunEntry(**{k: getattr(r, k) for k in run_fields}) for r in runs]))
    return [StoredValidation(vid, entry, solve_record(db, entry.solve_id), runs) for vid, entry, runs in out]


def speedup_scores(db: Engine, target: str, hardware_id: int, workload_id: int | None = None) -> list[list[float]]:
    """The misses of the plans above autoregressive decoding that the stored validations ran for
    ``target`` on the machine ``hardware_id`` (one prompt at a time; with ``workload_id``, of
    solves on that workload's profile only), one list per validation, oldest first: log(measured / predicted speed-up) in units of the half-width of the bootstrap's
    own interval on the side it missed (:func:`~hsd_planner.stats.miss_score`). A validation's
    plans ran on the same prompts, so its misses stay together. Runs stored without a predicted
    speed-up or an interval are left out, and a validation with none of its own."""
    columns = (
        ValidationRun.validation_id,
        ValidationRun.chain,
        ValidationRun.predicted_speedup,
        ValidationRun.measured_speedup,
        ValidationRun.bootstrap_speedup_lo,
        ValidationRun.bootstrap_speedup_hi,
    )
    q = _runs_of(target, hardware_id, *columns).where(ValidationRun.batch_size == 1).order_by(ValidationRun.id)
    if workload_id is not None:
        q = q.where(Solve.workload_id == workload_id)
    with Session(db) as s:
        rows = s.execute(q).all()
    out: dict[int, list[float]] = {}  # validation id -> its misses (dicts keep the oldest first)
    for validation, chain, predicted, measured, lo, hi in rows:
        if len(chain) < 2 or predicted is None or lo is None or hi is None or min(predicted, measured, lo) <= 0:
            continue  # autoregressive decoding, or a run stored without a prediction or an interval
        score = miss_score(measured, predicted, (lo, hi))
        if score is not None:
            out.setdefault(validation, []).append(score)
    return list(out.values())


@dataclass(frozen=True)
class CoverageHistory:
    """How often the predicted 90% intervals held the measured speed-up, over the stored
    validations of one target on one machine. A validation's plans ran on the same prompts and
    hit or miss together, so ``validations`` says how many draws ``plans`` stand for."""

    validations: int  # with at least one plan that had an interval
    plans: int
    inside: int


def coverage_history(db: Engine, target: str, hardware_id: int) -> CoverageHistory:
    """Over every stored validation of ``target`` on the machine ``hardware_id``: the plans above
    autoregressive decoding that had a predicted interval, how many measured inside it, and how
    many validations they came from."""
    q = _runs_of(target, hardware_id, ValidationRun.validation_id, ValidationRun.covered).where(ValidationRun.covered.is_not(None))
    with Session(db) as s:
        rows = s.execute(q).all()
    return CoverageHistory(len({v for v, _ in rows}), len(rows), sum(bool(c) for _, c in rows))


def _runs_of(target: str, hardware_id: int, *columns: Any) -> Select:
    """``columns`` of every stored validation run of ``target`` on the machine ``hardware_id``."""
    return (
        select(*columns)
        .join(Validation, Validation.id == ValidationRun.validation_id)
        .join(Solve, Solve.id == Validation.solve_id)
        .join(ModelRow, ModelRow.id == Solve.target_id)
        .where(ModelRow.spec == target, Solve.hardware_id == hardware_id)
    )


def plans_by_id(db: Engine, plan_ids: Sequence[int]) -> list[RankedPlan]:
    """The plans ``plan_ids``, in that order; a StoreError names the first that does not exist."""
    with Session(db) as s:
        rows = [s.get(PlanRow, i) for i in plan_ids]
        missing = [i for i, r in zip(plan_ids, rows) if r is None]
        if missing:
            raise StoreError(f"no plan with id {missing[0]}; see hsd-plan solve for plan ids")
        return [ranked_plan(r) for r in rows if r is not None]


def plans_of_solve(db: Engine, solve_id: int) -> list[RankedPlan]:
    """Every ranked plan of a solve, by rank (best first, autoregressive decoding last); its
    schedule is :func:`~hsd_planner.store.schedule.load_batch_plans`."""
    with Session(db) as s:
        rows = s.scalars(select(PlanRow).filter_by(solve_id=solve_id).where(PlanRow.kind != "schedule").order_by(PlanRow.rank))
        return [ranked_plan(r) for r in rows]


def model_sources(db: Engine) -> dict[str, str | None]:
    """Every stored model spec with the fingerprint of the files it was measured from (None: no files)."""
    with Session(db) as s:
        return {m.spec: m.source_fingerprint for m in s.scalars(select(ModelRow))}


def save_validation(db: Engine, entry: ValidationEntry, runs: Sequence[ValidationRunEntry]) -> int:
    """Store a validation and its runs in one transaction; return its id."""
    with Session(db) as s, s.begin():
        row = Validation(**asdict(entry))
        s.add(row)
        s.flush()
        for run in runs:
            s.add(ValidationRun(validation_id=row.id, **asdict(run)))
        return row.id
