"""A stored plan read back with everything its solve was made on: options, hardware, workload."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ..errors import StoreError
from ..plan import Plan, Prediction, Profile
from ..vocab import AcceptanceModel, Mode
from .reader import load_solve_profile
from .schema import Hardware, PlanRow, Setting, Solve, Workload
from .solves import widths_from_json

__all__ = ["StoredPlan", "load_plan"]


@dataclass(frozen=True)
class StoredPlan:
    """One plan of a stored solve, the profile that solve read, and the solve's options."""

    plan_id: int
    solve_id: int
    plan: Plan  # as stored: chain, widths and the prediction the solve printed
    profile: Profile
    contexts: int | list[int]  # what the solve read the cost curves at
    acceptance: AcceptanceModel
    t_max: int
    max_depth: int | None
    context_len: int
    hardware: dict
    dtype: str
    workload: dict
    mode: Mode
    temperature: float | None  # None for greedy decoding


def load_plan(engine: Engine, plan_id: int | None = None) -> StoredPlan:
    """Plan ``plan_id`` (None: the pick of the newest solve) with its solve's profile and options."""
    with Session(engine) as s:
        if plan_id is None:
            row = s.scalars(select(PlanRow).join(Solve).order_by(Solve.id.desc(), PlanRow.rank)).first()
            if row is None:
                raise StoreError("there is no plan in the database; run hsd-plan solve first")
        else:
            row = s.get(PlanRow, plan_id)
            if row is None:
                raise StoreError(f"no plan with id {plan_id}; see hsd-plan solve for plan ids")
        # foreign keys: a stored plan's solve and the solve's rows exist
        solve = s.get_one(Solve, row.solve_id)
        hw, setting, workload = (
            s.get_one(Hardware, solve.hardware_id),
            s.get_one(Setting, solve.setting_id),
            s.get_one(Workload, solve.workload_id),
        )
        hardware = {
            k: getattr(hw, k) for k in ("fingerprint", "device", "device_name", "capability", "threads", "torch_version", "kernels")
        }
        prediction = Prediction(row.predicted_ms_per_token, row.predicted_mean_accepted_length, row.predicted_speedup)
        plan = Plan(tuple(row.chain), tuple(widths_from_json(row.widths)), prediction)
        ids = (row.id, solve.id)
        options = (cast(AcceptanceModel, solve.acceptance_model), solve.t_max, solve.max_depth, solve.context_len)
        workload_info = {"name": workload.name, "content_hash": workload.content_hash, "prompts": workload.count}
        mode, temperature, dtype = cast(Mode, setting.mode), setting.temperature if setting.mode == "sample" else None, setting.dtype
    profile, source = load_solve_profile(engine, ids[1])
    acceptance, t_max, max_depth, context_len = options
    return StoredPlan(
        ids[0],
        ids[1],
        plan,
        profile,
        _contexts(source.contexts, context_len),
        acceptance,
        t_max,
        max_depth,
        context_len,
        hardware,
        dtype,
        workload_info,
        mode,
        temperature,
    )


def _contexts(recorded: list[int] | None, context_len: int) -> int | list[int]:
    """The contexts the solve read its costs at: a solve over the workload's own contexts stores
    their median (see :func:`~hsd_planner.store.solves.solve_and_store`), one at a named context
    stores that context."""
    if recorded and int(statistics.median(recorded)) == context_len:
        return recorded
    return context_len
