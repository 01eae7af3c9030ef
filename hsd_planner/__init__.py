"""hsd_planner: profile drafters, solve for the latency-optimal hierarchy, validate it.

Depends on :mod:`hsd_runtime`, never the reverse. The planner API works without a database:
build a :class:`Profile` from plain data and call :func:`solve`.
"""

from .planner import LatencyCurve, ModelProfile, PairAcceptance, Profile, predict, solve
from .solver import Plan, Solution, SolverError

__all__ = ["LatencyCurve", "ModelProfile", "PairAcceptance", "Plan", "Profile", "Solution", "SolverError", "predict", "solve"]
