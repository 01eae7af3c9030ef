"""Planning: the latency model, the exact solver, the Monte Carlo oracle and their input.

Owns everything that turns a :class:`Profile` (cost curves and acceptance, plain data) into
predicted latencies and ranked hierarchies. Pure: imports neither torch nor the database, so a
serving stack can ``from hsd_planner.plan import Profile, solve, predict`` with only pydantic,
networkx and numpy installed. May import :mod:`hsd_planner.errors`, :mod:`hsd_planner.vocab` and
the runtime's torch-free :mod:`hsd_runtime.shape` (draft-tree shapes) and :mod:`hsd_runtime.vocab`.
"""

from .config import SOLVE_DEFAULTS, T_MAX_LIMIT, TREE_BUDGET_LIMIT, SolveConfig
from .latency import Level, Prediction, hierarchy_latency
from .planner import predict, predict_over, solve, tokens_per_round
from .plans import Plan, format_chain, widths_from_json, widths_to_json
from .profile import LatencyCurve, ModelProfile, PairAcceptance, Profile
from .rounds import RoundLaw, RunLengths, SiblingCurve, monotone_probabilities
from .simulate import simulate
from .solver import Candidate, Solution, solve_graph, tree_shapes

__all__ = [
    "SOLVE_DEFAULTS",
    "TREE_BUDGET_LIMIT",
    "T_MAX_LIMIT",
    "Candidate",
    "LatencyCurve",
    "Level",
    "ModelProfile",
    "PairAcceptance",
    "Plan",
    "Prediction",
    "Profile",
    "RoundLaw",
    "RunLengths",
    "SiblingCurve",
    "Solution",
    "SolveConfig",
    "format_chain",
    "hierarchy_latency",
    "monotone_probabilities",
    "predict",
    "predict_over",
    "simulate",
    "solve",
    "solve_graph",
    "tokens_per_round",
    "tree_shapes",
    "widths_from_json",
    "widths_to_json",
]
