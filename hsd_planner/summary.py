"""Readable summaries of what the profiling database holds."""

from __future__ import annotations

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from .planner import LatencyCurve
from .profiler import ProfileOutcome
from .store import Acceptance, Hardware, Latency, Setting, Workload

__all__ = ["profile_summary", "format_summary", "SUMMARY_N"]

SUMMARY_N = (1, 8, 32)


def _at(curve: dict[int, float], n: int) -> float | None:
    """The curve's ms at ``n``, interpolated as the planner does; None outside the measured grid."""
    if not curve or not min(curve) <= n <= max(curve):
        return None
    return LatencyCurve(points={0: curve})(n, 0)


def profile_summary(engine: Engine, out: ProfileOutcome) -> dict:
    """Latency at n = 1, 8, 32 (smallest context) and the acceptance matrix of one profile run."""
    ids = out.model_ids
    with Session(engine) as s:
        hw = s.get(Hardware, out.hardware_id)
        workload = s.get(Workload, out.workload_id)
        setting = s.get(Setting, out.setting_id)
        latency = []
        for spec, mid in ids.items():
            rows = s.scalars(select(Latency).filter_by(model_id=mid, hardware_id=out.hardware_id)).all()
            if not rows:
                continue
            ctx = min(r.context_len for r in rows)
            curve = {r.n_tokens: r.median_ms for r in rows if r.context_len == ctx}
            latency.append({"model": spec, "context_len": ctx, **{f"c{n}_ms": _at(curve, n) for n in SUMMARY_N}})
        names = {mid: spec for spec, mid in ids.items()}
        acc = s.scalars(select(Acceptance).filter_by(workload_id=out.workload_id, setting_id=out.setting_id)).all()
        acceptance = [
            {"drafter": names[a.drafter_id], "verifier": names[a.verifier_id], "alpha": a.alpha, "positions": a.positions,
             "run_lengths": a.run_lengths}
            for a in acc if a.drafter_id in names and a.verifier_id in names
        ]
        return {
            "measured": out.measured,
            "skipped": out.skipped,
            "hardware": {"fingerprint": hw.fingerprint, "device": hw.device, "device_name": hw.device_name, "threads": hw.threads},
            "workload": {"name": workload.name, "content_hash": workload.content_hash, "count": workload.count},
            "setting": {"mode": setting.mode, "temperature": setting.temperature, "top_p": setting.top_p,
                        "dtype": setting.dtype, "max_new_tokens": setting.max_new_tokens},
            "models": list(ids),
            "latency": latency,
            "acceptance": acceptance,
        }


def format_summary(summary: dict) -> str:
    """The summary as two plain-text tables."""
    hw, st = summary["hardware"], summary["setting"]
    lines = [
        f"{summary['measured']} measurements taken, {summary['skipped']} already stored "
        f"[{hw['device_name']}, {hw['threads']} threads; workload {summary['workload']['name']} "
        f"({summary['workload']['count']} prompts); {st['mode']}, dtype {st['dtype']}]",
        "",
        f"{'model':<36}" + "".join(f"{f'c({n}) ms':>11}" for n in SUMMARY_N) + "   context",
    ]
    for row in summary["latency"]:
        cells = "".join(f"{row[f'c{n}_ms']:>11.2f}" if row[f"c{n}_ms"] is not None else f"{'-':>11}" for n in SUMMARY_N)
        lines.append(f"{row['model']:<36}{cells}   {row['context_len']}")
    if summary["acceptance"]:
        alpha = {(a["drafter"], a["verifier"]): a["alpha"] for a in summary["acceptance"]}
        verifiers = [m for m in summary["models"] if any(v == m for _, v in alpha)]
        lines += ["", "acceptance alpha (rows: drafter, columns: verifier)", f"{'':<36}" + "".join(f"{v[-14:]:>16}" for v in verifiers)]
        for d in summary["models"]:
            if any(dd == d for dd, _ in alpha):
                cells = "".join(f"{alpha[(d, v)]:>16.3f}" if (d, v) in alpha else f"{'':>16}" for v in verifiers)
                lines.append(f"{d:<36}{cells}")
    return "\n".join(lines)
