"""Batch-aware plans: a hierarchy serving b sequences in lockstep, the best plan per batch size,
and the schedule a server switches plans by.

c(n, b) is the median ms of one cached pass over b sequences of n new tokens each
(:attr:`ModelProfile.batch_latency`; b = 1 is the plain curve). Every level runs one batched pass
per step for all b sequences, each sequence accepting its own number of tokens; acceptance does not
depend on b. With every cost read at batch b:

- Level 0: C_0 = T_0 c_0(1, b) (one call per sequence for the n-gram lookup, c_0(T_0, b) =
  b c_0(T_0) unless measured).
- Level 0 < k < K: a batched level goes on until its slowest sequence holds T_k tokens, so it
  runs E[max_{i<=b} R_k^(i)(T_k)] rounds, the expected maximum of b round counts
  (:mod:`.lockstep`), not their mean: E[C_k] = E[max R_k] (E[C_{k-1}] + c_k(T_{k-1} + 1, b)).
- Target: every sequence commits its own X_K tokens a round, so each sequence sees
  L_b = (E[C_{K-1}] + c_K(T_{K-1} + 1, b)) / E[X_K] ms per token; throughput is 1000 b / L_b
  tokens/s and the speed-up c_K(1, b) / L_b, over autoregressive decoding of the same batch.
- A generation of exactly N tokens per sequence ends when the last sequence has them: E[max_i
  R_K^(i)(N)] target rounds instead of the steady state's N / E[X_K].

A round of level k runs the level below only for the sequences that still need tokens, and the
level below's own rounds then end with the slowest of *those*: its cost depends on how many are
left. :func:`batch_latency` is exact about it (a round with m of them costs the level below at m,
weighted by the expected number of such rounds, :func:`~.lockstep.active_rounds`); with level 0
(or nothing) under the only middle level, and in the steady state, that is the product above. The
solver's DAG keeps one number per node, so it uses the product, exact for chains of up to one
middle level and an upper bound beyond (a level below never waits for more than b sequences).

At b = 1 all of this is :func:`~hsd_planner.plan.latency.hierarchy_latency`. Batch plans are chains
(no draft tree): the batched runtime drafts chains only. The solver's DAG is unchanged but for its
costs (read at b) and the middle levels' round counts (the expected maximum), so one solve per
batch size gives that batch size's optimum; where autoregressive decoding wins, speculation has
stopped paying and the schedule says 0.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from hsd_runtime.shape import TreeShape, Width

from ..choices import AcceptanceModel
from ..errors import SolverError
from .config import DEFAULT_CONTEXT, SolveConfig
from .config import SOLVE_DEFAULTS as _D
from .latency import CostCurve, Level, Prediction, draft_cost, round_law, verify_size
from .lockstep import active_rounds
from .plans import Plan
from .profile import LatencyCurve, Profile
from .solver import Candidate, Solution, solve_graph

__all__ = [
    "BatchSolution",
    "ScheduleRange",
    "batch_cost",
    "batch_latency",
    "batch_sizes_of",
    "drafter_schedule",
    "predict_batch",
    "schedule_of",
    "solve_batch",
    "solve_batches",
    "stops_paying",
]


def batch_sizes_of(profile: Profile, name: str) -> list[int]:
    """The batch sizes ``name`` has a cost curve at (1 always)."""
    return sorted({1, *profile.model(name).batch_latency})


def batch_cost(profile: Profile, name: str, context_len: int | Sequence[int], batch: int) -> CostCurve:
    """c(n, b) in ms of model ``name`` at ``batch`` sequences (the mean over several contexts).

    Between two measured batch sizes, linear in b; a lookup drafter without a measured batch
    curve makes one call per sequence, b c(n). A batch size outside the measured ones is refused:
    a pass's cost past the largest batch measured is not a straight line one can trust.

    >>> p = Profile(target="t", models=[{"name": "t", "latency": {64: {1: 10.0}}, "batch_latency": {4: {64: {1: 16.0}}}}])
    >>> batch_cost(p, "t", 64, 2)(1), batch_cost(p, "t", 64, 4)(1)
    (12.0, 16.0)
    """
    if batch < 1:
        raise SolverError(f"a batch holds at least one sequence, got {batch}")
    model = profile.model(name)
    if batch == 1:
        return profile.cost(name, context_len)
    contexts = [context_len] if isinstance(context_len, int) else list(context_len)
    if not contexts:
        raise SolverError("no context length to read the cost curves at")
    curves: dict[int, LatencyCurve] = {1: model.latency, **model.batch_latency}
    if model.lookup and batch not in curves:
        one = model.latency
        return lambda n: batch * sum(one(n, c) for c in contexts) / len(contexts)
    sizes = sorted(curves)
    if batch in curves:
        lo = hi = batch
    elif sizes[0] < batch < sizes[-1]:
        i = bisect.bisect_left(sizes, batch)
        lo, hi = sizes[i - 1], sizes[i]
    else:
        raise SolverError(
            f"no latency of {name} at batch size {batch} (profiled: {', '.join(map(str, sizes))}); "
            f"run hsd-plan profile --batch-sizes {','.join(map(str, sorted({*sizes, batch})))}"
        )

    def at(n: int, c: int) -> float:
        a, b = curves[lo](n, c), curves[hi](n, c)
        return a if hi == lo else a + (b - a) * (batch - lo) / (hi - lo)

    return lambda n: sum(at(n, c) for c in contexts) / len(contexts)


def batch_latency(levels: Sequence[Level], widths: Sequence[Width], batch: int, horizon: int | None = None) -> Prediction:
    """Expected ms per token of each of ``batch`` sequences decoded in lockstep by ``levels``
    (target last, costs at this batch size) with chain ``widths``.

    Without ``horizon``, the steady state; with ``horizon`` = N, a generation of exactly N tokens
    per sequence, which ends with the slowest sequence.

    >>> from hsd_planner.plan.rounds import RunLengths
    >>> levels = [Level(lambda n: 1.0), Level(lambda n: 2.0, RunLengths.iid(0.5)), Level(lambda n: 10.0, RunLengths.iid(0.5))]
    >>> one, two = batch_latency(levels, [1, 2], 1), batch_latency(levels, [1, 2], 2)
    >>> round(one.ms_per_token, 4), round(two.ms_per_token, 4)  # (1.5 or 1.75 rounds * (1 + 2) + 10) / 1.75
    (8.2857, 8.7143)
    """
    if len(widths) != len(levels) - 1:
        raise ValueError("one width per level below the target")
    if any(isinstance(w, TreeShape) for w in widths):
        raise ValueError("a batched hierarchy drafts chains only, not a tree")
    target = levels[-1]
    if not widths:
        return Prediction(target.cost(1), 1.0, 1.0)
    # cost[a]: the expected time for the level below to deliver its batch to a of the b sequences
    # (the passes are over all b rows whatever a is; what a changes is how long the slowest takes)
    cost = [draft_cost(levels[0].cost, levels[0].lookup, widths[0])] * (batch + 1)
    for k in range(1, len(widths)):
        t = widths[k]
        assert isinstance(t, int)
        law_k, verify = round_law(levels[k], widths[k - 1]), levels[k - 1].proposal + levels[k].cost(verify_size(widths[k - 1]))
        weights = [active_rounds(law_k, t, a) for a in range(1, batch + 1)]
        cost = [0.0] + [sum(w[m] * (cost[m] + verify) for m in range(1, a + 1)) for a, w in enumerate(weights, start=1)]
    law, verify = round_law(target, widths[-1]), levels[-2].proposal + target.cost(verify_size(widths[-1]))
    if horizon is None:
        ms = (cost[batch] + verify) / law.mean
    else:  # sequences that hold their N tokens stop drafting: the rounds with m still going cost the levels below at m
        w = active_rounds(law, horizon, batch)
        ms = sum(w[m] * (cost[m] + verify) for m in range(1, batch + 1)) / horizon
    return Prediction(ms, law.mean, target.cost(1) / ms)


def _levels(
    profile: Profile, chain: Sequence[str], widths: Sequence[Width], batch: int, acceptance: AcceptanceModel, contexts: int | Sequence[int]
) -> list[Level]:
    if len(widths) != len(chain) - 1:
        raise SolverError(f"a chain of {len(chain)} models needs {len(chain) - 1} widths, got {len(widths)}")
    trees = [w for w in widths if isinstance(w, TreeShape)]
    if trees:
        raise SolverError(f"a batch plan is a chain; the batched runtime drafts no tree like {trees[0]}")
    pairs = profile.pairs(acceptance)
    levels = []
    for k, name in enumerate(chain):
        runs = None
        if k > 0:
            runs = pairs.get((chain[k - 1], name))
            if runs is None:
                raise SolverError(f"no acceptance data for {chain[k - 1]} verified by {name}; profile them together")
        levels.append(
            Level(batch_cost(profile, name, contexts, batch), runs, profile.model(name).lookup, proposal=profile.proposal(name, contexts))
        )
    return levels


def predict_batch(
    profile: Profile,
    chain: Sequence[str],
    widths: Sequence[Width],
    batch: int,
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    max_new_tokens: int | None = None,
) -> Prediction:
    """The prediction for one chain at ``batch`` sequences in lockstep (``max_new_tokens``: a
    generation of that many tokens per sequence instead of the steady state)."""
    return batch_latency(_levels(profile, chain, widths, batch, acceptance, context_len), widths, batch, max_new_tokens)


def solve_batch(
    profile: Profile,
    batch: int,
    t_max: int = _D.t_max,
    top_k: int = _D.top_k,
    max_depth: int | None = _D.max_depth,
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    exclude: Sequence[str] = _D.exclude,
    require: Sequence[str] = _D.require,
) -> Solution:
    """The latency-optimal chains for ``profile.target`` at ``batch`` sequences in lockstep."""
    if profile.target in exclude:
        raise SolverError(f"{profile.target} is the target; it cannot be excluded (choose another --target)")
    require = [r for r in require if r != profile.target]
    target = Candidate(profile.target, batch_cost(profile, profile.target, context_len, batch))
    pairs = profile.pairs(acceptance)
    names = [m.name for m in profile.models if m.name != profile.target and m.name not in exclude]
    usable = [n for n in names if any(d == n for d, _ in pairs)]
    candidates = [
        Candidate(n, batch_cost(profile, n, context_len, batch), profile.model(n).lookup, profile.proposal(n, context_len)) for n in usable
    ]
    config = SolveConfig(t_max=t_max, top_k=top_k, max_depth=max_depth, require=tuple(require), trees=False)
    return solve_graph(candidates, target, pairs, config, batch_size=batch)


@dataclass(frozen=True)
class ScheduleRange:
    """The plan to run while the batch holds ``min_batch``..``max_batch`` sequences."""

    min_batch: int
    max_batch: int
    plan: Plan


def schedule_of(best: Sequence[tuple[int, Plan]]) -> list[ScheduleRange]:
    """Ranges of batch sizes from the best plan at each of ascending batch sizes: a batch size's
    plan holds up to the next one measured, and neighbours with the same plan merge.

    >>> from hsd_planner.plan.latency import Prediction
    >>> p = lambda *w: Plan(("d", "t")[: len(w) + 1] if w else ("t",), w, Prediction(1.0, 1.0, 1.0))
    >>> [(r.min_batch, r.max_batch, r.plan.widths) for r in schedule_of([(1, p(4)), (2, p(4)), (4, p(2)), (8, p())])]
    [(1, 3, (4,)), (4, 7, (2,)), (8, 8, ())]
    """
    out: list[ScheduleRange] = []
    for i, (b, plan) in enumerate(best):
        end = best[i + 1][0] - 1 if i + 1 < len(best) else b
        if out and (out[-1].plan.chain, out[-1].plan.widths) == (plan.chain, plan.widths):
            out[-1] = ScheduleRange(out[-1].min_batch, end, out[-1].plan)
        else:
            out.append(ScheduleRange(b, end, plan))
    return out


def stops_paying(best: Sequence[tuple[int, Plan]]) -> int | None:
    """The smallest of ascending batch sizes from which on the best plan is autoregressive
    decoding (None: speculation pays at the largest batch size solved)."""
    out = None
    for b, plan in reversed(best):
        if plan.depth:
            break
        out = b
    return out


@dataclass(frozen=True)
class BatchSolution:
    """One solve per batch size, and the schedule they make."""

    solutions: dict[int, Solution]  # batch size -> its solve, ascending

    @property
    def best(self) -> list[tuple[int, Plan]]:
        """(batch size, its best plan), ascending."""
        return [(b, s.best) for b, s in self.solutions.items()]

    @property
    def schedule(self) -> list[ScheduleRange]:
        return schedule_of(self.best)

    @property
    def stops_paying(self) -> int | None:
        return stops_paying(self.best)


def solve_batches(
    profile: Profile,
    batch_sizes: Sequence[int],
    t_max: int = _D.t_max,
    top_k: int = _D.top_k,
    max_depth: int | None = _D.max_depth,
    acceptance: AcceptanceModel = _D.acceptance,
    context_len: int | Sequence[int] = DEFAULT_CONTEXT,
    exclude: Sequence[str] = _D.exclude,
    require: Sequence[str] = _D.require,
) -> BatchSolution:
    """:func:`solve_batch` at each of ``batch_sizes``."""
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise SolverError(f"batch sizes are at least 1, got {', '.join(map(str, batch_sizes)) or 'none'}")
    return BatchSolution({b: solve_batch(profile, b, t_max, top_k, max_depth, acceptance, context_len, exclude, require) for b in sizes})


def drafter_schedule(
    profile: Profile,
    drafter: str,
    batch_sizes: Sequence[int],
    t_max: int,
    acceptance: AcceptanceModel,
    context_len: int | Sequence[int],
) -> list[tuple[int, Plan]]:
    """Per batch size, the best plan with one fixed ``drafter`` over the target: its best width k,
    or autoregressive decoding (k = 0) where no width pays; what a serving stack that runs one
    drafter with a batch-size table of k can express."""
    target = profile.target
    out = []
    for b in sorted(set(batch_sizes)):
        best = Plan((target,), (), predict_batch(profile, [target], [], b, acceptance, context_len))
        for k in range(1, t_max + 1):
            pred = predict_batch(profile, [drafter, target], [k], b, acceptance, context_len)
            if pred.ms_per_token < best.prediction.ms_per_token:
                best = Plan((drafter, target), (k,), pred)
        out.append((b, best))
    return out
