"""Expected per-token latency of a hierarchy under exact-size semantics.

Models m_0 < ... < m_K (m_K the target) with widths T_0..T_{K-1}. Level 0 may draft a tree
instead (RSD-C): T_0 is then a shape b = (b_1..b_L) with F_l = prod_{j<=l} b_j nodes at depth l
and N = sum_l F_l nodes in all (:class:`hsd_runtime.terms.shape.TreeShape`); a tree is only ever level
0's width, and a lookup drafter drafts chains only.

A verification round of level k yields X = A + 1 tokens, A the drafted tokens it accepts along one
path (:class:`RoundLaw`, which holds P(A >= g)):

- a chain batch of b: A = min(G_k, b), G_k the accepted run length between levels k-1 and k.
  i.i.d. acceptance gives P(G >= g) = alpha^g; the empirical model uses the measured run-length
  distribution over the starts a decoder drafting b tokens a round visits (:class:`RunLengths`);
- a tree: A = D, the accepted depth, P(D >= l) = prod_{j<=l} A(b_j) with A(k) the probability
  that one of k siblings drawn without replacement is accepted (:class:`SiblingCurve`; depths
  taken as independent, as in RSD). A chain of width T is the tree 1x...x1 with A(1) = alpha.

Let n_k be the pass that verifies level k's batch: T_k + 1 tokens, or N + 1 for a tree (its
nodes and the root, the last committed token). A lookup drafter proposes fewer than T_k tokens
when its match runs short (none when there is no match): c(n_k) is then the expectation
E[c(L + 1)] over its measured proposal length L (:func:`pass_cost`). On an engine whose pass cost
is flat in its tokens the two agree; on one whose pass grows with them (llama.cpp on a CPU), an
empty proposal costs a one-token pass, not a full one.

- Level 0: C_0 = T_0 c_0(1) for a model, c_0(T_0) for the n-gram lookup (one call), and
  sum_{l=1..L} c_0(F_{l-1}) for a tree (one pass per depth over the frontier). A model drafter
  has not fed the last token it drafted, so the first pass of a round after one in which level 1
  accepted its whole proposal feeds that token and level 1's bonus token: c_0(2), not c_0(1), with
  probability q = P(A_1 = depth) (:func:`catch_up`; at batch size b, 1 - (1 - q)^b, a padded pass
  feeding two tokens to every row when one row needs them). On llama.cpp c(2) is 1.2-1.45x c(1)
  (one more row through every matrix product), so a drafter whose proposals are mostly accepted
  pays it nearly every round; on an engine whose pass is flat in its tokens it is 0. A middle
  level's verification pass likewise feeds one more token after its whole batch was accepted above;
  that is not priced (the solver would need a middle level's node keyed by its verifier; counted in
  runs of three-level plans on both CPU engines it cost 0.03-0.95 % of the decode time). A model that
  ends its draft on its confidence (``pmin=``) drafts L <= T_0 tokens in min(L + 1, T_0) passes:
  C_0 = E[min(L + 1, T_0)] c_0(1), L's law measured against level 1 (:meth:`RunLengths.draft_passes`),
  and level 1's pass verifies L + 1 tokens, as after a lookup, or 1 where a draft shorter than its
  ``nmin=`` is dropped.
- Level 0 < k < K: E[R_k] = m(T_k), m(t) = 1 + sum_x P(X = x) m(t - x), m(t <= 0) = 0, X the
  tokens of one round over level k-1's batch; E[C_k] = E[R_k] (E[C_{k-1}] + p_{k-1} + c_k(n_{k-1})).
- Target: L = (E[C_{K-1}] + p_{K-1} + c_K(n_{K-1})) / E[X_K], E[X_K] = sum_{g>=0} P(A_K >= g).

p_k is what a proposal of level k costs beside its passes, once per round of the level above it:
a steered drafter's projection of its verifier's taps (0 for every other model).

With one drafter this is Leviathan et al.'s L = (T c_0 + c_1)(1 - a) / (1 - a^{T+1}).

At batch b (b sequences decoded in lockstep, :func:`batch_latency`) every cost is c(n, b), the
median ms of one cached pass over b sequences of n new tokens each (:meth:`Profile.cost`), and
every level runs one batched pass per step for all b sequences, each accepting its own number of
tokens (acceptance does not depend on b). A middle level goes on until its slowest sequence holds
T_k tokens: E[max_{i<=b} R_k^(i)(T_k)] rounds (:mod:`.lockstep`) instead of m(T_k). Each sequence
sees L_b = (E[C_{K-1}] + c_K(T_{K-1} + 1, b)) / E[X_K] ms per token; throughput is 1000 b / L_b.
A round of level k runs the level below only for the sequences that still need tokens: a round
with m of them costs the level below at m, weighted by the expected number of such rounds
(:func:`~.lockstep.active_rounds`). The solver's DAG keeps one number per node and uses the
product, exact for chains of up to one middle level and an upper bound beyond. Batch plans are
chains: a tree decodes one prompt at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hsd_runtime.terms.shape import TreeShape, Width

from .lockstep import active_rounds
from .rounds import RoundLaw, RunLengths, SiblingCurve

__all__ = [
    "CostCurve",
    "Level",
    "Prediction",
    "RoundLaw",
    "RunLengths",
    "SiblingCurve",
    "batch_latency",
    "catch_up",
    "draft_cost",
    "hierarchy_latency",
    "level_cost",
    "pass_cost",
    "round_law",
    "verify_size",
]


CostCurve = Callable[[int], float]  # n tokens in one pass -> ms


@dataclass(frozen=True)
class Level:
    """One level of a hierarchy for the latency model.

    ``runs`` is the acceptance of the level below by this level (None for level 0);
    ``siblings`` the same for a draft tree below (needed only when the level below drafts one);
    ``lookup`` marks a drafter that proposes all its tokens in one call (the n-gram drafter);
    ``proposal`` is p, the ms each of its proposals costs beside its passes (a steered drafter's
    projection, once per round of the level above it); ``stops`` marks a level-0 model that ends
    its drafts on its confidence, whose passes follow the draft lengths level 1 measured, and
    ``n_min`` the fewest tokens such a draft keeps (a shorter one is dropped: verified as none).
    """

    cost: CostCurve
    runs: RunLengths | None = None
    lookup: bool = False
    siblings: SiblingCurve | None = None
    proposal: float = 0.0
    stops: bool = False
    n_min: int = 0

    def run_lengths(self) -> RunLengths:
        """The acceptance of the level below by this level; every level above level 0 has one."""
        if self.runs is None:
            raise ValueError("a level above level 0 needs the acceptance of the level below (runs)")
        return self.runs

    def sibling_curve(self) -> SiblingCurve:
        """How this level accepts the siblings of the tree below it; a tree needs one."""
        if self.siblings is None:
            raise ValueError("a level above a draft tree needs the sibling-acceptance curve of the level below (siblings)")
        return self.siblings


def verify_size(width: Width) -> int:
    """Tokens in the pass that verifies a batch of ``width``: its tokens plus the last committed
    one (T + 1), or a tree's N nodes plus its root."""
    return width.nodes + 1 if isinstance(width, TreeShape) else width + 1


def pass_cost(cost: CostCurve, below: Width, runs: RunLengths | None, least: int = 0) -> float:
    """The pass that verifies a batch of ``below``: c(N + 1) for a tree; for a chain E[c(L + 1)],
    L the proposal's length, which ``runs`` knows for a lookup drafter that proposes fewer tokens
    than asked when its match runs short, or a ``pmin=`` model (else L = ``below``); ``least``: the
    fewest tokens a draft keeps (``nmin=``; a shorter one is verified as none).

    >>> pass_cost(lambda n: float(n), 4, RunLengths.iid(0.5, drafted=[None] * 3 + [[1.0, 0.5, 0.5, 0.5, 0.5]]))
    3.0
    """
    if isinstance(below, TreeShape) or runs is None:
        return cost(verify_size(below))
    return runs.verify_cost(cost, below, least)


def round_law(level: Level, below: Width) -> RoundLaw:
    """The law of one round in which ``level`` verifies a batch of ``below`` from the level under it."""
    if isinstance(below, TreeShape):
        return RoundLaw.tree(below, level.sibling_curve())
    return RoundLaw.chain(level.run_lengths(), below)


@dataclass(frozen=True)
class Prediction:
    """The latency model's answer for one hierarchy."""

    ms_per_token: float
    mean_accepted_length: float  # E[X_K]: tokens per target round
    speedup: float  # c_K(1) / ms_per_token


def draft_cost(cost: CostCurve, lookup: bool, width: Width, stops: RunLengths | None = None) -> float:
    """C_0: level 0 drafts ``width`` tokens one pass each, or all in one call for a lookup
    drafter; a tree takes one pass per depth over its frontier, sum_l c(F_{l-1}). ``stops``: the
    draft lengths, measured against the level above, of a model that ends its draft on its
    confidence (``pmin=``), which drafts in E[min(L + 1, width)] passes (:meth:`RunLengths.draft_passes`).

    >>> draft_cost(lambda n: 1.0 + n, False, TreeShape((3, 2)))  # c(1) + c(3)
    6.0
    >>> draft_cost(lambda n: 1.0 + n, False, 2, RunLengths.iid(0.5, drafted=[None, [1.0, 0.5, 0.25]]))  # 1.5 passes of c(1)
    3.0
    """
    if isinstance(width, TreeShape):
        if lookup:
            raise ValueError("a lookup drafter drafts chains only, not a tree")
        return sum(cost(f) for f in width.frontiers[:-1])
    if lookup:
        return cost(width)
    return (width if stops is None else stops.draft_passes(width)) * cost(1)


def catch_up(drafter: Level, law: RoundLaw, batch: int = 1) -> float:
    """What level 0's first pass of a round costs beyond c(1). A model drafter has not fed the last
    token it drafted, so after a round in which the level above accepted its whole proposal
    (probability q = ``law.accepted[-1]``) it feeds that token and the level above's bonus token in
    one pass, c(2), else the correction alone, c(1): q (c(2) - c(1)). At ``batch`` rows decoded in
    lockstep a pass feeds every row as many tokens as its longest row needs: 1 - (1 - q)^b. A
    lookup drafter runs no pass (0). The profile's c(2) returns both rows' logits where this pass
    keeps the last: on llama.cpp that over-states it by about 6 % (0.5B Q4_K_M, 45.5 against 48.2 ms).
    A drafter that ends its draft on its confidence (``pmin=``) has fed its last token when it
    stopped short (the pass that found it unsure ran), so for it q is an upper bound.

    >>> catch_up(Level(lambda n: 10.0 * n), RoundLaw((1.0, 0.5, 0.25)))  # 0.25 (c(2) - c(1))
    2.5
    >>> catch_up(Level(lambda n: 10.0 * n), RoundLaw((1.0, 0.5)), batch=2)  # (1 - 0.5^2) (c(2) - c(1))
    7.5
    """
    if drafter.lookup:
        return 0.0
    return (1.0 - (1.0 - law.accepted[-1]) ** batch) * (drafter.cost(2) - drafter.cost(1))


def _tokens(width: Width, k: int) -> int:
    """The T_k of a level above level 0, which hands up tokens, never a tree."""
    if isinstance(width, TreeShape):
        raise ValueError(f"only level 0 drafts a tree; level {k} hands up a number of tokens, got {width}")
    return width


def level_cost(levels: Sequence[Level], widths: Sequence[Width]) -> float:
    """E[C_{K-1}]: the expected time for the level below the target to deliver its batch;
    ``levels`` from level 0 up to the target (level 1 holds level 0's measured draft lengths)."""
    first = levels[0]
    cost = draft_cost(first.cost, first.lookup, widths[0], levels[1].runs if first.stops else None)
    cost += catch_up(first, round_law(levels[1], widths[0]))
    for k in range(1, len(widths)):
        t = _tokens(widths[k], k)
        rounds = round_law(levels[k], widths[k - 1]).rounds(t)[t]
        cost = rounds * (cost + levels[k - 1].proposal + pass_cost(levels[k].cost, widths[k - 1], levels[k].runs, levels[k - 1].n_min))
    return cost


def hierarchy_latency(levels: Sequence[Level], widths: Sequence[Width], horizon: int | None = None) -> Prediction:
    """Expected ms per token of the hierarchy ``levels`` (target last) with ``widths``.

    ``widths[0]`` may be a :class:`TreeShape` (level 0 then drafts a tree, and ``levels[1]``
    needs ``siblings``); every other width is a number of tokens. A ValueError names a hierarchy
    the model cannot describe.

    Without ``horizon``, the steady state: round cost / E[X_K]. With ``horizon`` = N, a
    generation of exactly N new tokens: its expected target rounds m(N) (renewal over X_K, the
    last round cut short; :meth:`RoundLaw.rounds`) at a full round's cost each, so ms per token is
    round cost x m(N) / N and tokens per round N / m(N). A short generation of a plan that
    commits many tokens a round spends a larger share of its time in its last, partly used round:
    at E[X_K] = 8 and N = 48 the steady state over-states tokens per round by about 7%.

    >>> curve = lambda n: 10.0
    >>> p = hierarchy_latency([Level(lambda n: 1.0), Level(curve, RunLengths.iid(0.5))], [1])
    >>> round(p.ms_per_token, 6)  # (1 * 1 + 10) (1 - 0.5) / (1 - 0.5^2)
    7.333333
    """
    if len(widths) != len(levels) - 1:
        raise ValueError("one width per level below the target")
    target = levels[-1]
    if not widths:
        ms, tokens = target.cost(1), 1.0
    else:
        law = round_law(target, widths[-1])
        tokens = law.mean if horizon is None else horizon / law.rounds(horizon)[horizon]
        ms = (level_cost(levels, widths) + levels[-2].proposal + pass_cost(target.cost, widths[-1], target.runs, levels[-2].n_min)) / tokens
    return Prediction(ms, tokens, target.cost(1) / ms)


def batch_latency(levels: Sequence[Level], widths: Sequence[Width], batch: int, horizon: int | None = None) -> Prediction:
    """Expected ms per token of each of ``batch`` sequences decoded in lockstep by ``levels``
    (target last, costs at this batch size) with chain ``widths``; at batch 1 it is
    :func:`hierarchy_latency` of a chain whose passes cost c(T + 1).

    Without ``horizon``, the steady state; with ``horizon`` = N, a generation of exactly N tokens
    per sequence, which ends with the slowest sequence.

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
    first = draft_cost(levels[0].cost, levels[0].lookup, widths[0]) + catch_up(levels[0], round_law(levels[1], widths[0]), batch)
    cost = [first] * (batch + 1)
    for k in range(1, len(widths)):
        t = _tokens(widths[k], k)
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
