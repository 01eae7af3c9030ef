"""Reading a planner :class:`Profile` back from the profiling database, and the per-prompt sums behind it.

A ``Profile`` is the planner's input (:mod:`hsd_planner.plan.profile`); ``hsd-plan profile``
measures one into the database (:mod:`hsd_planner.profiling`); this module reads it back.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from hsd_runtime import parse_spec
from hsd_runtime.terms.choices import Mode
from hsd_runtime.terms.kinds import kind_of

from ..errors import StoreError
from ..plan import LatencyCurve, ModelProfile, PairAcceptance, Profile
from .records import PromptAcceptance
from .schema import Acceptance, AcceptancePrompt, Hardware, Latency, ModelRow, Setting, Solve, Workload

__all__ = ["ProfileSource", "load_profile", "load_solve_profile", "pass_spread", "prompt_acceptance", "stored_curves"]


@dataclass(frozen=True)
class ProfileSource:
    """Which rows a profile was built from."""

    target: str
    workload_id: int
    workload: str
    setting_id: int
    hardware_id: int
    hardware: str
    contexts: list[int] | None = None  # each profiled prompt's length plus half its continuation, when recorded


def stored_curves(session: Session, model_id: int, hardware_id: int, dtype: str) -> dict[int, LatencyCurve]:
    """The stored cost curves of one model on one hardware in ``dtype`` (the dtype it runs in:
    never another dtype's latency, a profile predicts its own), keyed by batch size: c(n) at 1,
    c(n, b) at every b profiled with ``--batch-sizes``; empty when nothing is stored. Each curve
    carries the median host work stored on its rows."""
    points: dict[int, dict[int, dict[int, float]]] = {}
    host: dict[int, list[float]] = {}
    spreads: dict[int, list[float]] = {}
    for r in session.scalars(select(Latency).filter_by(model_id=model_id, hardware_id=hardware_id, dtype=dtype)):
        points.setdefault(r.batch_size, {}).setdefault(r.context_len, {})[r.n_tokens] = r.median_ms
        host.setdefault(r.batch_size, []).extend([r.host_ms] if r.host_ms is not None else [])
        spreads.setdefault(r.batch_size, []).extend([pass_spread(r.p10_ms, r.p90_ms)] if r.n_tokens >= 1 and r.p10_ms > 0 else [])
    return {
        b: LatencyCurve(
            points=p, host_ms=statistics.median(host[b]) if host[b] else 0.0, spread=statistics.median(spreads[b]) if spreads[b] else 0.0
        )
        for b, p in sorted(points.items())
    }


def pass_spread(p10_ms: float, p90_ms: float) -> float:
    """The sigma of log(ms) that a normal law of it with this p10 and p90 has (they lie 2.563
    sigma apart).

    >>> round(pass_spread(10.0, 12.0), 4)
    0.0711
    """
    return max(0.0, math.log(p90_ms / p10_ms) / 2.563)


def load_profile(
    db: Engine,
    target: str | None = None,
    workload: str | None = None,
    mode: Mode = "greedy",
    temperature: float = 1.0,
    hardware: str | Sequence[str] | None = None,
    lenience: float = 1.0,
    length: int | None = None,
) -> tuple[Profile, ProfileSource]:
    """The newest matching profile: acceptance of ``workload`` under ``mode``/``temperature``
    and ``lenience``, latency on ``hardware`` (a fingerprint, or several to choose the newest of;
    None: any). ``length``: where acceptance was also profiled on continuations of exactly that
    many new tokens, that profile (a lookup drafts otherwise early in a reply than late), else
    the newest of any length.

    The target defaults to the largest model measured as a verifier.
    """
    with Session(db) as s:
        settings = s.scalars(select(Setting).filter_by(mode=mode)).all()
        if mode == "sample":
            settings = [x for x in settings if abs(x.temperature - temperature) < 1e-9]
        settings = [x for x in settings if abs(x.lenience - lenience) < 1e-9]
        if length is not None and any(x.max_new_tokens == length for x in settings):
            settings = [x for x in settings if x.max_new_tokens == length]
        if not settings:
            detail = f" at temperature {temperature}" if mode == "sample" else ""
            detail += f" with lenience {lenience}" if lenience != 1.0 else ""
            raise StoreError(f"no acceptance profile for {mode} decoding{detail}; run hsd-plan profile first")
        q = select(Acceptance).where(Acceptance.setting_id.in_([x.id for x in settings]))
        if workload is not None:
            wl = s.scalars(select(Workload).filter_by(name=workload)).all()
            if not wl:
                names = ", ".join(sorted({w.name for w in s.scalars(select(Workload))})) or "none"
                raise StoreError(f"no workload named {workload!r} (profiled: {names})")
            q = q.where(Acceptance.workload_id.in_([w.id for w in wl]))
        rows = s.scalars(q.order_by(Acceptance.created_at.desc(), Acceptance.id.desc())).all()
        if not rows:
            raise StoreError("no acceptance data matches; run hsd-plan profile with these settings first")
        models = {m.id: m for m in s.scalars(select(ModelRow))}
        newest = rows[0]
        rows = [r for r in rows if r.workload_id == newest.workload_id and r.setting_id == newest.setting_id]
        if target is None:
            # the largest verifier; of equal size, the full-precision model rather than its quantized copy
            target_id = max({r.verifier_id for r in rows}, key=lambda i: (models[i].parameters, parse_spec(models[i].spec).quant is None))
        else:
            ids = [i for i, m in models.items() if m.spec == target]
            if not ids:
                raise StoreError(f"no profile for target {target}; run hsd-plan profile --models ...,{target}")
            target_id = ids[0]
            if not any(r.verifier_id == target_id for r in rows):
                raise StoreError(f"no model has acceptance data against the target {target}; profile them together")
        hw_q = select(Hardware).join(Latency, Latency.hardware_id == Hardware.id).where(Latency.model_id == target_id)
        wanted = [hardware] if isinstance(hardware, str) else hardware
        hw = s.scalars(
            (hw_q.where(Hardware.fingerprint.in_(wanted)) if wanted is not None else hw_q).order_by(Latency.created_at.desc())
        ).first()
        if hw is None:
            others = sorted({f"{h.fingerprint} ({h.device_name})" for h in s.scalars(hw_q)})
            where = "on this machine" if wanted is not None else "on any hardware"
            hint = f"; profiled on: {', '.join(others)} (choose one with --hardware)" if others else "; run hsd-plan profile"
            raise StoreError(f"no latency profile for the target {models[target_id].spec} {where}{hint}")
        return _assemble(s, rows, models, target_id, hw, s.get_one(Setting, newest.setting_id), s.get_one(Workload, newest.workload_id))


def load_solve_profile(db: Engine, solve_id: int) -> tuple[Profile, ProfileSource]:
    """The profile a stored solve was made on: its target, workload, setting and hardware exactly
    (never a newer profile of the same names), as :func:`load_profile` builds it."""
    with Session(db) as s:
        solve = s.get(Solve, solve_id)
        if solve is None:
            raise StoreError(f"no solve with id {solve_id}; see hsd-plan solve")
        rows = s.scalars(select(Acceptance).filter_by(workload_id=solve.workload_id, setting_id=solve.setting_id)).all()
        models = {m.id: m for m in s.scalars(select(ModelRow))}
        setting, wl_row = s.get_one(Setting, solve.setting_id), s.get_one(Workload, solve.workload_id)
        return _assemble(s, rows, models, solve.target_id, s.get_one(Hardware, solve.hardware_id), setting, wl_row)


def _assemble(
    s: Session, rows: Sequence[Acceptance], models: dict[int, ModelRow], target_id: int, hw: Hardware, setting: Setting, wl_row: Workload
) -> tuple[Profile, ProfileSource]:
    """The profile of ``target_id`` from acceptance ``rows`` of one workload and setting, with the
    latency measured on ``hw`` in each model's own dtype."""
    involved = {target_id} | {r.drafter_id for r in rows} | {r.verifier_id for r in rows}
    profiles = []
    for mid in sorted(involved, key=lambda i: models[i].parameters):
        spec = parse_spec(models[mid].spec)
        curves = stored_curves(s, mid, hw.id, spec.run_dtype(setting.dtype))
        loads = next((i for i, m in models.items() if m.spec == str(spec.loads)), None) if spec.p_min is not None else None
        if 1 not in curves and loads is not None:  # pmin=: timed as the model it drafts with, profiled beside it
            curves = stored_curves(s, loads, hw.id, spec.run_dtype(setting.dtype))
        if 1 not in curves:
            continue  # no latency here: not a usable candidate on this hardware
        kind = kind_of(spec)
        profiles.append(
            ModelProfile(name=models[mid].spec, latency=curves, lookup=kind.lookup, stops=kind.stops, n_min=spec.n_min if kind.stops else 0)
        )
    have = {m.name for m in profiles}
    acceptance = [
        PairAcceptance(
            drafter=models[r.drafter_id].spec,
            verifier=models[r.verifier_id].spec,
            alpha=r.alpha,
            run_lengths=r.run_lengths,
            visited=r.visited,
            drafted=r.drafted,
            siblings=r.siblings,  # A(k), k = 1..8; None: chains only for this pair
        )
        for r in rows
        if models[r.drafter_id].spec in have and models[r.verifier_id].spec in have
    ]
    profile = Profile(target=models[target_id].spec, models=profiles, acceptance=acceptance)
    contexts = [n + setting.max_new_tokens // 2 for n in wl_row.prompt_tokens] if wl_row.prompt_tokens else None
    return profile, ProfileSource(models[target_id].spec, wl_row.id, wl_row.name, setting.id, hw.id, hw.fingerprint, contexts)


def prompt_acceptance(
    db: Engine, source: ProfileSource, pairs: Collection[tuple[str, str]]
) -> dict[tuple[str, str], dict[int, PromptAcceptance]]:
    """The per-prompt acceptance sums behind the profile ``source`` for ``pairs`` (drafter,
    verifier): ``[pair][prompt index]``; pairs without per-prompt rows are absent."""
    fields = PromptAcceptance.__dataclass_fields__
    out: dict[tuple[str, str], dict[int, PromptAcceptance]] = defaultdict(dict)
    with Session(db) as s:
        names = {m.id: m.spec for m in s.scalars(select(ModelRow))}
        for r in s.scalars(select(AcceptancePrompt).filter_by(workload_id=source.workload_id, setting_id=source.setting_id)):
            pair = (names[r.drafter_id], names[r.verifier_id])
            if pair in pairs:
                out[pair][r.prompt_index] = PromptAcceptance(**{k: getattr(r, k) for k in fields})
    return dict(out)
