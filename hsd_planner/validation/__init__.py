"""Validation: running solved plans on held-out prompts, comparing measured with predicted latency.

Owns the validation run (:mod:`.runner`: which plans, at which batch sizes, the measured runs,
the comparison, the stored rows), its typed report (:mod:`.report`), the reference passes that calibrate a profile
to the machine's state (:mod:`.calibration`) and the figure (:mod:`.plot`). Running one
hierarchy on one prompt is :mod:`hsd_planner.generate`; the whole workflow is
:mod:`hsd_planner.demo`. Imports the runtime, :mod:`hsd_planner.plan`, the store, stats, prompts
and profiling; the CLI and the demo import it.
"""

from .report import ERROR_GOAL, LevelResult, PlanResult, ValidationReport, prompts_for_error
from .runner import run_validation
from .selection import CANDIDATE_SETS, select_plans

__all__ = [
    "CANDIDATE_SETS",
    "ERROR_GOAL",
    "LevelResult",
    "PlanResult",
    "ValidationReport",
    "prompts_for_error",
    "run_validation",
    "select_plans",
]
