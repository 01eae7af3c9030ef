"""What one profile run measured, as a typed report: latency at a few widths, the acceptance matrix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..plan import LatencyCurve
from ..store import Engine
from ..store.measurements import latency_points, pair_acceptance, run_records
from ..store.records import HardwareRecord, SettingRecord, WorkloadRecord
from .config import ProfileOutcome

__all__ = ["SUMMARY_N", "AcceptanceRow", "LatencyRow", "ProfileSummary", "floor_ratio", "profile_summary", "shortest_context"]

SUMMARY_N = (1, 2, 8, 32)  # the widths n whose c(n) a summary shows (1 and 2: an inversion shows)


@dataclass(frozen=True)
class LatencyRow:
    """c(n) in ms at the smallest profiled context, for n in SUMMARY_N (None outside the grid)."""

    model: str
    context_len: int
    ms: tuple[float | None, ...]  # aligned with SUMMARY_N
    floor_ratio: float | None = None  # c(1) / the machine's floor for that pass (None: ngram, or no probe)
    proposal_ms: float | None = None  # a steered model's projection, once per proposal beside its passes (n = 0)

    def to_dict(self) -> dict:
        cells = {f"c{n}_ms": v for n, v in zip(SUMMARY_N, self.ms)}
        return {
            "model": self.model,
            "context_len": self.context_len,
            **cells,
            "c1_over_floor": self.floor_ratio,
            "proposal_ms": self.proposal_ms,
        }


@dataclass(frozen=True)
class AcceptanceRow:
    """The pooled acceptance of one (drafter, verifier) pair."""

    drafter: str
    verifier: str
    alpha: float
    positions: int
    run_lengths: list[float]
    siblings: list[float] | None = None  # A(k), k = 1..8 (None: the n-gram drafter, or measured before siblings)


@dataclass(frozen=True)
class ProfileSummary:
    """The report of ``hsd-plan profile``: what was measured and what the database now holds."""

    measured: int
    skipped: int
    noisy: int  # latency points whose p90/p10 stayed above SPREAD_LIMIT
    inverted: int  # neighbouring pass sizes where fewer tokens cost more, still after measuring again
    hardware: HardwareRecord  # where it was measured, with the floor probe
    workload: WorkloadRecord
    setting: SettingRecord  # the decoding the acceptance is for, the dtype, the continuation length
    models: list[str]  # cheapest first
    latency: list[LatencyRow]
    acceptance: list[AcceptanceRow]
    remeasured: int = 0  # latency samples dropped because other work contended for the cores, and taken again
    kept_busy: int = 0  # such samples kept (--allow-busy)
    busy_checked: bool = True  # False where the machine does not say what else runs

    def to_dict(self) -> dict:
        keys = ("measured", "skipped", "noisy", "inverted", "remeasured", "kept_busy", "busy_checked", "models")
        return {
            **{k: getattr(self, k) for k in keys},
            **{k: asdict(getattr(self, k)) for k in ("hardware", "workload", "setting")},
            "latency": [r.to_dict() for r in self.latency],
            "acceptance": [asdict(a) for a in self.acceptance],
        }


def shortest_context(rows: Sequence[Any]) -> tuple[int, dict[int, Any]]:
    """The shortest context of a model's latency rows and its rows by n (stored rows or exported ones)."""
    ctx = min(r.context_len for r in rows)
    return ctx, {r.n_tokens: r for r in rows if r.context_len == ctx}


def floor_ratio(row: Any) -> float | None:
    """c(n) / floor(n) of one latency row; None where no floor was probed."""
    return row.median_ms / row.floor_ms if row is not None and row.floor_ms else None


def _at(curve: dict[int, float], n: int) -> float | None:
    """The curve's ms at ``n``, interpolated as the planner does; None outside the measured grid."""
    if not curve or not min(curve) <= n <= max(curve):
        return None
    return LatencyCurve(points={0: curve})(n, 0)


def profile_summary(db: Engine, out: ProfileOutcome) -> ProfileSummary:
    """Latency at n in SUMMARY_N (smallest context) and the acceptance matrix of one profile run."""
    ids = out.model_ids
    hw, workload, setting = run_records(db, out.keys)
    latency = []
    for spec, mid in ids.items():
        rows = [point for _spec, point in latency_points(db, model_id=mid, hardware_id=out.hardware_id)]
        if not rows:
            continue
        ctx, at = shortest_context(rows)
        curve = {n: r.median_ms for n, r in at.items()}
        proposal = at[0].median_ms if 0 in at else None
        latency.append(LatencyRow(spec, ctx, tuple(_at(curve, n) for n in SUMMARY_N), floor_ratio(at.get(1)), proposal))
    names = {mid: spec for spec, mid in ids.items()}
    acceptance = [
        AcceptanceRow(names[a.drafter_id], names[a.verifier_id], a.alpha, a.positions, a.run_lengths, a.siblings)
        for a in pair_acceptance(db, out.workload_id, out.setting_id)
        if a.drafter_id in names and a.verifier_id in names
    ]
    return ProfileSummary(
        measured=out.measured,
        skipped=out.skipped,
        noisy=out.noisy,
        inverted=out.inverted,
        hardware=hw,
        workload=workload,
        setting=setting,
        models=list(ids),
        latency=latency,
        acceptance=acceptance,
        remeasured=out.remeasured,
        kept_busy=out.kept_busy,
        busy_checked=out.busy_checked,
    )
