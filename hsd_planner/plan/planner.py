"""The planner API for serving stacks: a :class:`Profile` in, ranked hierarchies out.

``solve`` ranks hierarchies with the exact DAG solver; ``predict`` gives the latency model's
prediction for one hierarchy, ``predict_over`` its median over several context lengths, and
``tokens_per_round`` the tokens each level's verification rounds yield and ``rounds_per_round``
the rounds a middle level runs for each round of the level above. A hierarchy's first width
may be a draft tree (:class:`hsd_runtime.terms.shape.TreeShape`). Defaults come from
:class:`SolveConfig`. Pure: no torch, no database.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from hsd_runtime.terms.shape import TreeShape, Width

from ..choices import AcceptanceModel
from ..errors import SolverError
from .config import DEFAULT_CONTEXT, SolveConfig
from .config import SOLVE_DEFAULTS as _D
from .latency import Level, Prediction, batch_latency, hierarchy_latency
from .profile import Profile
from .rounds import RoundLaw
from .solver import Candidate, Solution, solve_graph

__all__ = ["predict", "predict_over", "rounds_per_round", "solve", "tokens_per_round"]


def solve(profile: Profile, config: SolveConfig = _D, contexts: int | Sequence[int] | None = None) -> Solution:
    """Rank hierarchies for ``profile.target``: best, top-k, best single drafters, autoregressive.

    ``config`` holds every option (:class:`SolveConfig`): candidates in ``exclude`` are dropped,
    every hierarchy returned contains all of ``require``, and with ``trees`` the first drafter may
    draft a tree of at most ``tree_budget`` nodes for a verifier it has a sibling-acceptance curve
    with (:meth:`Profile.siblings_curves`). Cost curves are read at ``contexts`` (several: their
    mean cost), else at ``config.context_len``, else at DEFAULT_CONTEXT, and at
    ``config.batch_size`` sequences in lockstep (above 1: chains only, each middle level waiting
    for its slowest sequence; see :func:`~.latency.batch_latency`).
    """
    if profile.target in config.exclude:
        raise SolverError(f"{profile.target} is the target; it cannot be excluded (choose another --target)")
    at, b = contexts if contexts is not None else config.context_len or DEFAULT_CONTEXT, config.batch_size
    target = Candidate(profile.target, profile.cost(profile.target, at, b))
    names = [m.name for m in profile.models if m.name != profile.target and m.name not in config.exclude]
    pairs = profile.pairs(config.acceptance)
    usable = [n for n in names if any(d == n for d, _ in pairs)]
    candidates = [
        Candidate(
            n, profile.cost(n, at, b), profile.model(n).lookup, profile.proposal(n, at), profile.model(n).stops, profile.model(n).n_min
        )
        for n in usable
    ]
    require = tuple(r for r in config.require if r != profile.target)  # the target is in every hierarchy
    update = {"require": require, "trees": config.trees and b == 1}  # a tree decodes one prompt at a time
    return solve_graph(candidates, target, pairs, config.model_copy(update=update), siblings=profile.siblings_curves())


def _check_widths(profile: Profile, chain: Sequence[str], widths: Sequence[Width], batch_size: int = 1) -> None:
    """One width per drafter, and a tree only where the runtime can draft one."""
    if len(widths) != len(chain) - 1:
        raise SolverError(f"a chain of {len(chain)} models needs {len(chain) - 1} widths, got {len(widths)}")
    for k, w in enumerate(widths):
        if not isinstance(w, TreeShape):
            continue
        if batch_size > 1:
            raise SolverError(f"a batch plan is a chain; a tree like {w} decodes one prompt at a time")
        if k > 0:
            raise SolverError(f"only the first drafter drafts a tree; {chain[k]} hands up a number of tokens, got {w}")
        if profile.model(chain[0]).lookup:
            raise SolverError(f"{chain[0]} is a lookup drafter and drafts chains only, not the tree {w}")
        if profile.model(chain[0]).stops:
            raise SolverError(f"{chain[0]} stops its drafts on its confidence (pmin=) and drafts chains only, not the tree {w}")


def predict(
    profile: Profile,
    chain: Sequence[str],
    widths: Sequence[Width],
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    max_new_tokens: int | None = None,
    batch_size: int = 1,
) -> Prediction:
    """The latency model's prediction for one given hierarchy (``chain`` smallest first).

    ``widths[0]`` may be a tree shape, which needs the sibling-acceptance curve of the first pair.
    ``max_new_tokens``: predict a generation of that many tokens (its last round cut short; at
    ``batch_size`` > 1, of that many per sequence, ending with the slowest) instead of the steady
    state; see :func:`hierarchy_latency`. ``batch_size``: sequences decoded in lockstep, a chain
    (:func:`~.latency.batch_latency`, costs at c(n, b)).
    """
    _check_widths(profile, chain, widths, batch_size)
    levels = []
    for k, name in enumerate(chain):
        cost, lookup = profile.cost(name, context_len, batch_size), profile.model(name).lookup
        runs = curve = None
        if k > 0 and isinstance(widths[k - 1], TreeShape):
            curve = profile.siblings_curves().get((chain[k - 1], name))
            if curve is None:
                raise SolverError(f"no sibling-acceptance curve for {chain[k - 1]} verified by {name}; profile them again to plan trees")
        elif k > 0:
            runs = profile.pair_runs(chain[k - 1], name, acceptance)
            if runs is None:
                raise SolverError(f"no acceptance data for {chain[k - 1]} verified by {name}; profile them together")
        model = profile.model(name)
        levels.append(Level(cost, runs, lookup, curve, profile.proposal(name, context_len), model.stops, model.n_min))
    if batch_size > 1:
        return batch_latency(levels, widths, batch_size, max_new_tokens)
    return hierarchy_latency(levels, widths, max_new_tokens)


def predict_over(
    profile: Profile,
    chain: Sequence[str],
    widths: Sequence[Width],
    acceptance: AcceptanceModel,
    contexts: Sequence[int],
    max_new_tokens: int | None = None,
    batch_size: int = 1,
) -> Prediction:
    """The prediction with the median ms per token (and speed-up) over the given context lengths,
    at ``batch_size`` sequences in lockstep (see :func:`predict`)."""
    preds = [predict(profile, chain, widths, acceptance, c, max_new_tokens, batch_size) for c in contexts]
    ms = statistics.median(p.ms_per_token for p in preds)
    return Prediction(ms, preds[0].mean_accepted_length, statistics.median(p.speedup for p in preds))


def tokens_per_round(profile: Profile, chain: Sequence[str], widths: Sequence[Width], acceptance: AcceptanceModel) -> list[float | None]:
    """Per level of ``chain``, the expected tokens E[X] one of its verification rounds yields over
    the batch of the level below (a chain of ``widths[k - 1]`` or the tree); None for level 0 and
    for a pair without the acceptance data its batch needs."""
    return [None if law is None else law.mean for law in _round_laws(profile, chain, widths, acceptance)]


def rounds_per_round(profile: Profile, chain: Sequence[str], widths: Sequence[Width], acceptance: AcceptanceModel) -> list[float | None]:
    """Per level of ``chain``, the expected rounds m(T_k) it runs for each round of the level above
    to hand up its ``widths[k]`` tokens (the renewal the latency model prices a middle level by);
    None for level 0, the target and a pair without the acceptance data."""
    laws = _round_laws(profile, chain, widths, acceptance)
    out: list[float | None] = [None] * len(chain)
    for k in range(1, len(chain) - 1):
        law, t = laws[k], widths[k]
        if law is not None and isinstance(t, int):
            out[k] = law.rounds(t)[t]
    return out


def _round_laws(profile: Profile, chain: Sequence[str], widths: Sequence[Width], acceptance: AcceptanceModel) -> list[RoundLaw | None]:
    """Per level, the law of one of its rounds over the batch of the level below (None: level 0, or no data)."""
    _check_widths(profile, chain, widths)
    pairs, curves = profile.pairs(acceptance), profile.siblings_curves()
    out: list[RoundLaw | None] = [None]
    for k in range(1, len(chain)):
        pair, below = (chain[k - 1], chain[k]), widths[k - 1]
        if isinstance(below, TreeShape):
            curve = curves.get(pair)
            out.append(RoundLaw.tree(below, curve) if curve is not None else None)
        else:
            runs = pairs.get(pair)
            out.append(RoundLaw.chain(runs, below) if runs is not None else None)
    return out
