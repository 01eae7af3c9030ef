"""Solving on the stored profile (``hsd-plan solve``): the solve run and its typed report.

Owns what turns a stored profile into stored, ranked plans: reading the newest matching profile,
the contexts its costs are read at, the exact solver (:mod:`hsd_planner.plan`), each plan's
bootstrap interval (:mod:`hsd_planner.stats`) and which plans the profile cannot tell apart from
the pick, then storing them (:mod:`hsd_planner.store.solves`). Imports plan, stats and the store;
the CLI, validation's demo and the benchmarks import it.
"""

from .batch import solve_batch_schedule
from .intervals import (
    MIN_RESIDUALS,
    Bootstrap,
    bootstrap_predictions,
    bootstrap_profiles,
    past_misses,
    past_plans,
    predicted_intervals,
    timed,
    timing_noise,
    widened,
    widest,
)
from .report import THIN_PROMPTS, SolveReport
from .runner import solve_and_store

__all__ = [
    "MIN_RESIDUALS",
    "THIN_PROMPTS",
    "Bootstrap",
    "SolveReport",
    "bootstrap_predictions",
    "bootstrap_profiles",
    "past_misses",
    "past_plans",
    "predicted_intervals",
    "solve_and_store",
    "solve_batch_schedule",
    "timed",
    "timing_noise",
    "widened",
    "widest",
]
