"""Small queries on the profiling database shared by the commands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..errors import StoreError
from .schema import Acceptance, AcceptancePrompt, Hardware, ModelRow, Setting, Workload
from .upsert import get_or_create, upsert

__all__ = [
    "aggregate_acceptance",
    "get_or_create",
    "hardware_row",
    "model_row",
    "pool_prompts",
    "pool_siblings",
    "record_probe",
    "setting_row",
    "workload_row",
]


def hardware_row(session: Session, info: Any) -> Hardware:
    """The row of a HardwareInfo's fingerprint (capability and kernels filled in where an older row lacks them)."""
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


def model_row(session: Session, spec: str, loaded: Any = None, source: str | None = None, replace: bool = False) -> ModelRow:
    """The row of ``spec``; ``loaded`` (a LoadedModel, None for ngram) fills in what loading revealed.

    ``source`` is the fingerprint of the model's files: a row measured from other files is refused
    (its measurements describe another model) unless ``replace``, which adopts the new files.
    """
    if loaded is None:
        return get_or_create(session, ModelRow, {"spec": spec}, parameters=0)
    row = get_or_create(
        session,
        ModelRow,
        {"spec": spec},
        parameters=loaded.num_parameters,
        layers=loaded.num_layers,
        vocab_size=loaded.logits_width,
        tokenizer_fingerprint=loaded.fingerprint,
        source_fingerprint=source,
    )
    if row.source_fingerprint not in (None, source):
        if not replace:
            raise StoreError(f"model {spec} changed on disk since it was profiled; rerun with --force to measure it again")
        row.source_fingerprint = source
    return row


def workload_row(session: Session, prompts) -> Workload:
    return get_or_create(session, Workload, {"content_hash": prompts.content_hash}, name=prompts.name, count=len(prompts.prompts))


def setting_row(session: Session, mode: str, temperature: float, top_p: float, dtype: str, max_new_tokens: int) -> Setting:
    if mode == "greedy":  # warping does not change an argmax: one greedy setting per dtype and length
        temperature, top_p = 1.0, 1.0
    return get_or_create(
        session,
        Setting,
        {"mode": mode, "temperature": temperature, "top_p": top_p, "dtype": dtype, "max_new_tokens": max_new_tokens},
    )


def pool_prompts(rows: Sequence[Any]) -> tuple[float, int, list[float], list[list[float] | None] | None]:
    """(alpha, positions, run_lengths, visited) pooled over per-prompt acceptance rows (ratios of
    sums, as tokens per round are). Rows may repeat: a bootstrap resample pools a prompt twice."""
    positions = sum(r.positions for r in rows)
    g_len = max(len(r.run_sum) for r in rows)
    sums = [sum(r.run_sum[g] for r in rows if g < len(r.run_sum)) for g in range(g_len)]
    counts = [sum(r.run_count[g] for r in rows if g < len(r.run_count)) for g in range(g_len)]
    run_lengths = [s / c for s, c in zip(sums, counts) if c > 0]
    alpha = sum(r.alpha_sum for r in rows) / positions if positions else 0.0
    return alpha, positions, run_lengths, _visited(rows)


def _visited(rows: Sequence[Any]) -> list[list[float] | None] | None:
    """P_b(G >= g) pooled over prompts (a ratio of sums, as tokens per round are); None when a
    prompt predates visited sums, so old and new measurements are never mixed."""
    if any(r.visit_sum is None for r in rows):
        return None
    out = []
    for b in range(1, min(len(r.visit_sum) for r in rows) + 1):
        weight = sum(r.visit_count[b - 1] for r in rows)
        sums = [sum(r.visit_sum[b - 1][g] for r in rows) for g in range(b + 1)]
        out.append([x / weight for x in sums] if weight > 0 else None)
    return out


def pool_siblings(rows: Sequence[Any]) -> list[float] | None:
    """A(k), k = 1..K, pooled over per-prompt rows: ``sum siblings_sum[k - 1] / sum siblings_count``.

    None when any prompt has no sums (the n-gram drafter, or a row measured before siblings
    were): a curve over part of the prompts would not match the pair's alpha and run lengths.
    Rows may repeat (a bootstrap resample). K is the shortest stored curve.

    >>> from types import SimpleNamespace as R
    >>> pool_siblings([R(siblings_sum=[1.0, 2.0], siblings_count=2), R(siblings_sum=[0.0, 1.0], siblings_count=2)])
    [0.25, 0.75]
    """
    sums: list[list[float]] = []
    total = 0
    for r in rows:
        k_sums, count = getattr(r, "siblings_sum", None), getattr(r, "siblings_count", None)
        if not k_sums or count is None:
            return None
        sums.append(k_sums)
        total += count
    if total <= 0:
        return None
    k_max = min(len(k_sums) for k_sums in sums)
    return [min(1.0, max(0.0, sum(k_sums[k] for k_sums in sums) / total)) for k in range(k_max)]


def aggregate_acceptance(session: Session, drafter_id: int, verifier_id: int, workload_id: int, setting_id: int) -> Acceptance | None:
    """(Re)compute the workload-level acceptance row of a pair from its per-prompt rows.

    Concurrent writers of one pair must take turns (see :func:`.writes.record_acceptance_prompt`):
    each pools the prompts it sees, and the last to write must have seen every other's.
    """
    key = dict(drafter_id=drafter_id, verifier_id=verifier_id, workload_id=workload_id, setting_id=setting_id)
    rows = session.scalars(select(AcceptancePrompt).filter_by(**key)).all()
    if not rows:
        return None
    alpha, positions, run_lengths, visited = pool_prompts(rows)
    values = dict(
        alpha=alpha, positions=positions, prompts=len(rows), run_lengths=run_lengths, visited=visited, siblings=pool_siblings(rows)
    )
    upsert(session, Acceptance, key, values, touch=False)  # the pair dates from its first measurement, as before
    return session.scalars(select(Acceptance).filter_by(**key).execution_options(populate_existing=True)).one()
