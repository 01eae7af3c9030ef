"""What a profiling run reads and writes: its keys, latency points, continuations, per-prompt acceptance.

Every write is its own transaction, so an interrupted profile keeps what it finished; every read
hands back typed records (:mod:`.records`). The measuring itself lives in
:mod:`hsd_planner.profiling`, which calls these functions and never opens a session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import cast

from sqlalchemy import Engine, UniqueConstraint, func, select, update
from sqlalchemy.orm import Session

from hsd_runtime.terms.choices import Mode

from ..plan import LatencyCurve
from .profiles import stored_curves
from .records import (
    ContinuationKey,
    HardwareRecord,
    LatencyKey,
    LatencyPoint,
    ModelFacts,
    PairAcceptanceRecord,
    PromptAcceptance,
    PromptPairKey,
    RunKeys,
    SettingRecord,
    WorkloadRecord,
)
from .repo import hardware_row, model_row, record_probe, setting_row, workload_row
from .schema import Acceptance, AcceptancePrompt, Continuation, Hardware, Latency, ModelRow, Setting, Workload
from .writes import record_acceptance_prompt, record_continuation, record_latency

__all__ = [
    "continuations_of",
    "hardware_record",
    "key_counts",
    "latency_curves",
    "latency_points",
    "measured_prompts",
    "pair_acceptance",
    "record_floor_probe",
    "register_run",
    "rewrite_latency",
    "run_records",
    "save_continuation",
    "save_latency",
    "save_prompt_acceptance",
    "set_floors",
    "set_host_cost",
    "stored_continuation",
    "stored_latency",
]


def register_run(
    db: Engine,
    hardware: HardwareRecord,
    workload: WorkloadRecord,
    prompt_tokens: list[int],
    setting: SettingRecord,
    models: Sequence[tuple[str, ModelFacts | None, str | None]],
    replace: bool = False,
) -> tuple[RunKeys, list[int]]:
    """The keys of a profiling run and the row id of each model, inserted where missing.

    ``models`` holds (spec, what loading it revealed or None for ngram, the fingerprint of its
    files); a model measured from other files is refused unless ``replace`` (see
    :func:`~hsd_planner.store.repo.model_row`). The workload keeps its prompts' token lengths,
    for solves that do not name a context.
    """
    with Session(db) as s, s.begin():
        keys = RunKeys(
            hardware_row(s, hardware).id,
            workload_row(s, workload).id,
            setting_row(s, setting.mode, setting.temperature, setting.top_p, setting.dtype, setting.max_new_tokens, setting.lenience).id,
        )
        ids = [model_row(s, spec, facts, source, replace=replace).id for spec, facts, source in models]
        row = s.get_one(Workload, keys.workload_id)
        if row.prompt_tokens is None:
            row.prompt_tokens = list(prompt_tokens)
    return keys, ids


def record_floor_probe(db: Engine, hardware_id: int, probe: object) -> None:
    """Keep ``probe`` (a :class:`~hsd_planner.profiling.floor.FloorProbe`) as the machine's newest floor."""
    with Session(db) as s, s.begin():
        record_probe(s.get_one(Hardware, hardware_id, with_for_update=True), probe)  # another machine's probe may merge in too


def stored_latency(db: Engine, keys: Iterable[LatencyKey]) -> dict[LatencyKey, LatencyPoint]:
    """The stored points among ``keys``."""
    out = {}
    with Session(db) as s:
        for key in keys:
            row = s.scalars(select(Latency).filter_by(**asdict(key))).first()
            if row is not None:
                out[key] = _point(row)
    return out


def set_floors(db: Engine, floors: Mapping[LatencyKey, float | None]) -> None:
    """Fill in the floor of stored points measured before the floor probe existed."""
    if not floors:
        return
    with Session(db) as s, s.begin():
        for key, value in floors.items():
            row = s.scalars(select(Latency).filter_by(**asdict(key))).first()
            if row is not None:
                row.floor_ms = value


def set_host_cost(db: Engine, model_id: int, hardware_id: int, dtype: str, host_ms: float) -> None:
    """Store a model's host work per pass (the decoding loop's, beside the pass) on every row of
    its curves on ``hardware_id`` in ``dtype``."""
    with Session(db) as s, s.begin():
        s.execute(update(Latency).filter_by(model_id=model_id, hardware_id=hardware_id, dtype=dtype).values(host_ms=host_ms))


def save_latency(db: Engine, key: LatencyKey, point: LatencyPoint) -> None:
    """Store ``point`` under ``key``, replacing what was there (one upsert: safe beside other profilers)."""
    with Session(db) as s, s.begin():
        record_latency(
            s,
            asdict(key),
            median_ms=point.median_ms,
            p10_ms=point.p10_ms if point.p10_ms is not None else point.median_ms,
            p90_ms=point.p90_ms if point.p90_ms is not None else point.median_ms,
            repeats=len(point.samples_ms),
            samples_ms=list(point.samples_ms),
            floor_ms=point.floor_ms,
        )


def latency_points(
    db: Engine, model_id: int | None = None, hardware_id: int | None = None, batch_size: int | None = 1
) -> list[tuple[str, LatencyPoint]]:
    """Every stored latency point, with its model's spec (only one model's or machine's when given);
    the plain curves c(n) (``batch_size`` 1) unless another batch size, or None for every one, is asked for."""
    query = select(Latency, ModelRow.spec).join(ModelRow, Latency.model_id == ModelRow.id).order_by(Latency.id)
    if batch_size is not None:
        query = query.where(Latency.batch_size == batch_size)
    if model_id is not None:
        query = query.where(Latency.model_id == model_id)
    if hardware_id is not None:
        query = query.where(Latency.hardware_id == hardware_id)
    with Session(db) as s:
        return [(spec, _point(row)) for row, spec in s.execute(query).tuples()]


def rewrite_latency(db: Engine, update: Callable[[LatencyPoint], LatencyPoint]) -> None:
    """Replace every stored latency point by ``update(point)`` (its median, spread and samples)."""
    with Session(db) as s, s.begin():
        for row in s.scalars(select(Latency)):
            new = update(_point(row))
            row.median_ms, row.samples_ms = new.median_ms, list(new.samples_ms)
            row.p10_ms = new.p10_ms if new.p10_ms is not None else new.median_ms
            row.p90_ms = new.p90_ms if new.p90_ms is not None else new.median_ms
            row.repeats, row.floor_ms = len(new.samples_ms), new.floor_ms


def latency_curves(db: Engine, hardware_id: int, dtypes: Mapping[int, str]) -> dict[int, LatencyCurve]:
    """Each model's cost curve c(n) as stored (model id -> curve), read in the dtype ``dtypes[id]`` it runs in."""
    with Session(db) as s:
        curves = {mid: stored_curves(s, mid, hardware_id, dtype).get(1) for mid, dtype in dtypes.items()}
    return {mid: curve for mid, curve in curves.items() if curve is not None}


def measured_prompts(db: Engine, keys: Iterable[PromptPairKey]) -> set[PromptPairKey]:
    """The keys among ``keys`` whose per-prompt acceptance is stored."""
    with Session(db) as s:
        return {key for key in keys if s.scalars(select(AcceptancePrompt.id).filter_by(**asdict(key))).first() is not None}


def save_prompt_acceptance(db: Engine, key: PromptPairKey, sums: PromptAcceptance) -> None:
    """Store one prompt's acceptance sums (replacing what was there) and pool the pair's workload row again."""
    with Session(db) as s, s.begin():
        record_acceptance_prompt(s, asdict(key), **asdict(sums))


def stored_continuation(db: Engine, key: ContinuationKey) -> list[int] | None:
    """The stored continuation of ``key`` (None when there is none)."""
    with Session(db) as s:
        row = s.scalars(select(Continuation).filter_by(**asdict(key))).first()
        return None if row is None else list(row.tokens)


def save_continuation(db: Engine, key: ContinuationKey, tokens: list[int]) -> None:
    """Store the continuation of ``key``, replacing what was there."""
    with Session(db) as s, s.begin():
        record_continuation(s, asdict(key), tokens)


def continuations_of(db: Engine, content_hash: str, verifier: str) -> list[tuple[int, list[int]]]:
    """(prompt index, tokens) of every stored continuation by ``verifier`` of the workload ``content_hash``."""
    query = (
        select(Continuation.prompt_index, Continuation.tokens)
        .join(ModelRow, Continuation.verifier_id == ModelRow.id)
        .join(Workload, Continuation.workload_id == Workload.id)
        .where(ModelRow.spec == verifier, Workload.content_hash == content_hash)
    )
    with Session(db) as s:
        return [(k, list(tokens)) for k, tokens in s.execute(query).tuples()]


def run_records(db: Engine, keys: RunKeys) -> tuple[HardwareRecord, WorkloadRecord, SettingRecord]:
    """The machine, workload and setting of a profiling run."""
    with Session(db) as s:
        hw, wl, st = s.get_one(Hardware, keys.hardware_id), s.get_one(Workload, keys.workload_id), s.get_one(Setting, keys.setting_id)
        return hardware_record(hw), WorkloadRecord(wl.name, wl.content_hash, wl.count), setting_record(st)


def pair_acceptance(db: Engine, workload_id: int, setting_id: int) -> list[PairAcceptanceRecord]:
    """The pooled acceptance of every pair measured on a workload in a setting."""
    with Session(db) as s:
        rows = s.scalars(select(Acceptance).filter_by(workload_id=workload_id, setting_id=setting_id).order_by(Acceptance.id))
        return [PairAcceptanceRecord(a.drafter_id, a.verifier_id, a.alpha, a.positions, a.prompts, a.run_lengths, a.siblings) for a in rows]


def hardware_record(row: Hardware) -> HardwareRecord:
    """A hardware row as a record."""
    return HardwareRecord(
        fingerprint=row.fingerprint,
        device=row.device,
        device_name=row.device_name,
        capability=row.capability,
        threads=row.threads,
        torch_version=row.torch_version,
        kernels=row.kernels,
        bandwidth_gbs=row.bandwidth_gbs,
        peak_gflops=row.peak_gflops,
    )


def setting_record(row: Setting) -> SettingRecord:
    """A setting row as a record."""
    return SettingRecord(cast(Mode, row.mode), row.temperature, row.top_p, row.dtype, row.max_new_tokens, row.lenience)


def _point(row: Latency) -> LatencyPoint:
    samples = tuple(row.samples_ms or [row.median_ms] * row.repeats)
    return LatencyPoint(row.n_tokens, row.context_len, row.median_ms, row.floor_ms, samples, row.p10_ms, row.p90_ms)


def key_counts(db: Engine) -> dict[str, int]:
    """Rows per measured table and, under ``<table>_repeated``, rows whose natural key repeats
    (0 in a healthy store; profilers writing at once must keep it so), and ``pooled_prompts``."""
    tables = (Latency, Continuation, AcceptancePrompt, Acceptance, ModelRow, Hardware, Workload)
    out: dict[str, int] = {}
    with Session(db) as s:
        for cls in tables:
            table = cls.__table__
            key = next(c for c in table.constraints if isinstance(c, UniqueConstraint)).columns
            rows = s.scalar(select(func.count()).select_from(table)) or 0
            distinct = s.scalar(select(func.count()).select_from(select(*key).distinct().subquery())) or 0
            out[table.name], out[f"{table.name}_repeated"] = rows, rows - distinct
        out["pooled_prompts"] = s.scalar(select(func.coalesce(func.sum(Acceptance.prompts), 0))) or 0
    return out
