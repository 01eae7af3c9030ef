"""Planning: the planner's input, the latency model, the exact solver and the Monte Carlo oracle.

Owns everything that turns a :class:`Profile` (cost curves and acceptance, plain data;
:mod:`.profile`) into predicted latencies (:mod:`.latency`, :mod:`.rounds`) and ranked
hierarchies (:mod:`.solver`, :mod:`.planner`; options in :class:`SolveConfig`, :mod:`.config`),
and :class:`Plan`, a hierarchy with its prediction, its label and its JSON widths
(:mod:`.plans`); :mod:`.simulate` checks the latency model by simulation. Pure: imports neither
torch nor the database, so a serving stack can ``from hsd_planner.plan import Profile, solve,
predict`` with only pydantic, networkx and numpy installed. May import :mod:`hsd_planner.errors`,
:mod:`hsd_planner.choices` and the runtime's torch-free :mod:`hsd_runtime.terms.shape` (draft-tree
shapes), :mod:`hsd_runtime.terms.choices` and :mod:`hsd_runtime.terms.limits`.
"""

from .config import SOLVE_DEFAULTS, T_MAX_LIMIT, TREE_BUDGET_LIMIT, SolveConfig
from .latency import Level, Prediction, hierarchy_latency
from .planner import predict, predict_over, rounds_per_round, solve, tokens_per_round
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
    "rounds_per_round",
    "simulate",
    "solve",
    "solve_graph",
    "tokens_per_round",
    "tree_shapes",
    "widths_from_json",
    "widths_to_json",
]
