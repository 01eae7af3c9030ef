"""c(n, b) latency rows in the database: what the batch profile writes and a profile reads back.

Latency rows of b > 1 share the ``latency`` table with the plain curves (``batch_size`` 1, what
every other reader keeps to); :func:`batch_curves` reads the others back into
:attr:`~hsd_planner.plan.ModelProfile.batch_latency`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from ..plan import LatencyCurve
from .schema import Latency

__all__ = ["batch_curves", "record_batch_sample", "stored_batch_samples"]


def batch_curves(session: Session, model_id: int, hardware_id: int, dtype: str) -> dict[int, LatencyCurve]:
    """c(n, b) of one model on one hardware in ``dtype``, per batch size b > 1 (none: empty)."""
    points: dict[int, dict[int, dict[int, float]]] = {}
    rows = select(Latency).filter_by(model_id=model_id, hardware_id=hardware_id, dtype=dtype).where(Latency.batch_size > 1)
    for r in session.scalars(rows):
        points.setdefault(r.batch_size, {}).setdefault(r.context_len, {})[r.n_tokens] = r.median_ms
    return {b: LatencyCurve(points=p) for b, p in sorted(points.items())}


def stored_batch_samples(engine: Engine, key: dict) -> list[float]:
    """The samples stored for one latency point (``key``: its unique columns), in the order taken."""
    with Session(engine) as s:
        row = s.scalars(select(Latency).filter_by(**key)).first()
        if row is None:
            return []
        return list(row.samples_ms or [row.median_ms] * row.repeats)


def record_batch_sample(engine: Engine, key: dict, samples: Sequence[float], summary: tuple[float, float, float]) -> None:
    """Replace one latency point's row by its samples so far and their (median, p10, p90)."""
    med, p10, p90 = summary
    with Session(engine) as s, s.begin():
        s.execute(delete(Latency).filter_by(**key))
        s.add(Latency(**key, median_ms=med, p10_ms=p10, p90_ms=p90, repeats=len(samples), samples_ms=list(samples)))
