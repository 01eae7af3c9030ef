"""Rows found by their natural key, inserted when missing, and a pair's pooled acceptance kept current."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..stats import pool_rows
from .records import HardwareRecord, ModelFacts, WorkloadRecord
from .schema import Acceptance, AcceptancePrompt, Hardware, ModelRow, Setting, Workload
from .upsert import get_or_create, upsert

__all__ = [
    "aggregate_acceptance",
    "get_or_create",
    "hardware_row",
    "model_row",
    "record_probe",
    "setting_row",
    "workload_row",
]


def hardware_row(session: Session, info: HardwareRecord) -> Hardware:
    """The row of a machine's fingerprint (capability and kernels filled in where an older row lacks them)."""
    row = get_or_create(
        session,
        Hardware,
        {"fingerprint": info.fingerprint},
        device=info.device,
        device_name=info.device_name,
        threads=info.threads,
        torch_version=info.torch_version,
        capability=info.capability or None,
        kernels=info.kernels,
    )
    if row.capability is None and info.capability:
        row.capability = info.capability
    if row.kernels is None:
        row.kernels = info.kernels
    return row


def record_probe(row: Hardware, probe: Any) -> None:
    """Keep ``probe`` (a profiling.floor.FloorProbe) as the hardware row's newest floor measurement."""
    row.bandwidth_gbs = probe.bandwidth_gbs
    row.bandwidth_spread = probe.bandwidth_spread
    row.peak_gflops = {**(row.peak_gflops or {}), **probe.peak_gflops}
    row.peak_spread = {**(row.peak_spread or {}), **probe.peak_spread}


def model_row(session: Session, spec: str, loaded: ModelFacts | None = None, source: str | None = None, replace: bool = False) -> ModelRow:
    """The row of ``spec``; ``loaded`` (None for ngram) fills in what loading revealed.

    ``source`` is the fingerprint of the model's files: a row measured from other files is refused
    (its measurements describe another model) unless ``replace``, which adopts the new files.
    """
    if loaded is None:
        return get_or_create(session, ModelRow, {"spec": spec}, parameters=0)
    row = get_or_create(
        session,
        ModelRow,
        {"spec": spec},
        parameters=loaded.parameters,
        layers=loaded.layers,
        vocab_size=loaded.vocab_size,
        tokenizer_fingerprint=loaded.tokenizer_fingerprint,
        source_fingerprint=source,
    )
    if row.source_fingerprint not in (None, source):
        if not replace:
            raise StoreError(f"model {spec} changed on disk since it was profiled; rerun with --force to measure it again")
        row.source_fingerprint = source
    return row


def workload_row(session: Session, workload: WorkloadRecord) -> Workload:
    return get_or_create(session, Workload, {"content_hash": workload.content_hash}, name=workload.name, count=workload.count)


def setting_row(
    session: Session, mode: str, temperature: float, top_p: float, dtype: str, max_new_tokens: int, lenience: float = 1.0
) -> Setting:
    if mode == "greedy":  # warping does not change an argmax: one greedy setting per dtype and length
        temperature, top_p = 1.0, 1.0
    return get_or_create(
        session,
        Setting,
        {"mode": mode, "temperature": temperature, "top_p": top_p, "dtype": dtype, "max_new_tokens": max_new_tokens, "lenience": lenience},
    )


def aggregate_acceptance(session: Session, drafter_id: int, verifier_id: int, workload_id: int, setting_id: int) -> Acceptance | None:
    """(Re)compute the workload-level acceptance row of a pair from its per-prompt rows.

    Concurrent writers of one pair must take turns (see :func:`.writes.record_acceptance_prompt`):
    each pools the prompts it sees, and the last to write must have seen every other's.
    """
    key = dict(drafter_id=drafter_id, verifier_id=verifier_id, workload_id=workload_id, setting_id=setting_id)
    rows = session.scalars(select(AcceptancePrompt).filter_by(**key)).all()
    if not rows:
        return None
    pooled = pool_rows(rows)  # every part at once: one table of the rows
    values = dict(
        alpha=pooled.alpha,
        positions=pooled.positions,
        prompts=len(rows),
        run_lengths=pooled.run_lengths,
        visited=pooled.visited,
        drafted=pooled.drafted,
        siblings=pooled.siblings,
    )
    upsert(session, Acceptance, key, values, touch=False)  # the pair dates from its first measurement, as before
    return session.scalars(select(Acceptance).filter_by(**key).execution_options(populate_existing=True)).one()
