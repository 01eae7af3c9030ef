"""The planner API for serving stacks: a :class:`Profile` in, ranked hierarchies out.

``solve`` ranks hierarchies with the exact DAG solver; ``predict`` gives the latency model's
prediction for one hierarchy, ``predict_over`` its median over several context lengths.
Defaults come from :class:`SolveConfig`. Pure: no torch, no database.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..errors import SolverError
from ..vocab import AcceptanceModel
from .config import DEFAULT_CONTEXT
from .config import SOLVE_DEFAULTS as _D
from .latency import Level, Prediction, hierarchy_latency
from .profile import Profile
from .solver import Candidate, Solution, solve_graph

__all__ = ["predict", "predict_over", "solve"]


def solve(
    profile: Profile,
    t_max: int = _D.t_max,
    top_k: int = _D.top_k,
    max_depth: int | None = _D.max_depth,
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    exclude: Sequence[str] = _D.exclude,
    require: Sequence[str] = _D.require,
) -> Solution:
    """Rank hierarchies for ``profile.target``: best, top-k, best single drafters, autoregressive.

    ``exclude`` drops candidates; every hierarchy returned contains all of ``require``.
    """
    if profile.target in exclude:
        raise SolverError(f"{profile.target} is the target; it cannot be excluded (choose another --target)")
    require = [r for r in require if r != profile.target]  # the target is in every hierarchy
    target = Candidate(profile.target, profile.cost(profile.target, context_len))
    names = [m.name for m in profile.models if m.name != profile.target and m.name not in exclude]
    pairs = profile.pairs(acceptance)
    usable = [n for n in names if any(d == n for d, _ in pairs)]
    candidates = [Candidate(n, profile.cost(n, context_len), profile.model(n).lookup) for n in usable]
    return solve_graph(candidates, target, pairs, t_max=t_max, top_k=top_k, max_depth=max_depth, require=require)


def predict(
    profile: Profile,
    chain: Sequence[str],
    widths: Sequence[int],
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    max_new_tokens: int | None = None,
) -> Prediction:
    """The latency model's prediction for one given hierarchy (``chain`` smallest first).

    ``max_new_tokens``: predict a generation of that many tokens (its last round cut short)
    instead of the steady state; see :func:`hierarchy_latency`.
    """
    pairs = profile.pairs(acceptance)
    levels = []
    for k, name in enumerate(chain):
        cost, lookup = profile.cost(name, context_len), profile.model(name).lookup
        runs = None
        if k > 0:
            runs = pairs.get((chain[k - 1], name))
            if runs is None:
                raise SolverError(f"no acceptance data for {chain[k - 1]} verified by {name}; profile them together")
        levels.append(Level(cost, runs, lookup))
    return hierarchy_latency(levels, widths, max_new_tokens)


def predict_over(
    profile: Profile,
    chain: Sequence[str],
    widths: Sequence[int],
    acceptance: AcceptanceModel,
    contexts: Sequence[int],
    max_new_tokens: int | None = None,
) -> Prediction:
    """The prediction with the median ms per token (and speed-up) over the given context lengths."""
    preds = [predict(profile, chain, widths, acceptance, c, max_new_tokens) for c in contexts]
    ms = statistics.median(p.ms_per_token for p in preds)
    return Prediction(ms, preds[0].mean_accepted_length, statistics.median(p.speedup for p in preds))
