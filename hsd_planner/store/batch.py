"""c(n, b) latency rows in the database, read back into a profile.

Latency rows of b > 1 share the ``latency`` table with the plain curves (``batch_size`` 1, what
every other reader keeps to); the batch profile writes them through
:func:`~hsd_planner.store.measurements.save_latency` under a
:class:`~hsd_planner.store.records.LatencyKey` with its batch size (the upsert's key is the table's
unique key, batch size included), and :func:`batch_curves` reads them back into
:attr:`~hsd_planner.plan.ModelProfile.batch_latency`.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..plan import LatencyCurve
from .schema import Latency

__all__ = ["batch_curves"]


def batch_curves(session: Session, model_id: int, hardware_id: int, dtype: str) -> dict[int, LatencyCurve]:
    """c(n, b) of one model on one hardware in ``dtype``, per batch size b > 1 (none: empty)."""
    points: dict[int, dict[int, dict[int, float]]] = {}
    rows = select(Latency).filter_by(model_id=model_id, hardware_id=hardware_id, dtype=dtype).where(Latency.batch_size > 1)
    for r in session.scalars(rows):
        points.setdefault(r.batch_size, {}).setdefault(r.context_len, {})[r.n_tokens] = r.median_ms
    return {b: LatencyCurve(points=p) for b, p in sorted(points.items())}
