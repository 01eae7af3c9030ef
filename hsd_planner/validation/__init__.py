"""Validation: running hierarchies and solved plans, comparing measured with predicted latency.

Owns ``generate`` (one hierarchy on one prompt, checked against the target's greedy decoding),
the validation run over held-out prompts with its typed report and figure, and the demo
workflow (:func:`run_demo`). Imports the runtime, :mod:`hsd_planner.plan`, the store, prompts
and profiling; only the CLI imports it.
"""

from .demo import FAMILIES, DemoFamily, DemoReport, run_demo
from .generate import CheckResult, GenerateReport, compare_tokens, generate_text
from .report import LevelResult, PlanResult, ValidationReport
from .runner import CANDIDATE_SETS, run_validation, select_plans

__all__ = [
    "CANDIDATE_SETS",
    "FAMILIES",
    "CheckResult",
    "DemoFamily",
    "DemoReport",
    "GenerateReport",
    "LevelResult",
    "PlanResult",
    "ValidationReport",
    "compare_tokens",
    "generate_text",
    "run_demo",
    "run_validation",
    "select_plans",
]
