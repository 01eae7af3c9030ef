"""A Monte Carlo simulation of the hierarchy algorithm, to cross-check the latency model.

It shares nothing with :mod:`hsd_planner.plan.latency` but the inputs (and level 0's cost rule):
it draws accepted run lengths round by round - or, over a draft tree, accepts depth after depth
with probability A(b_l) until one fails - and plays exact-size semantics out (a middle level
repeats rounds until it holds T_k tokens, then hands up exactly T_k), adding up the cost of every
pass and of every proposal beside its passes, and level 0's two-token pass after each round that
level 1 accepted whole.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from hsd_runtime.terms.shape import TreeShape, Width

from .latency import Level, draft_cost
from .rounds import RunLengths, SiblingCurve

__all__ = ["simulate"]


def _draw_tokens(runs: RunLengths, b: int, rng: random.Random) -> int:
    """X = min(G, b) + 1 for one round: G >= g with probability P(G >= g)."""
    u = rng.random()
    g = 0
    while g < b and runs.at_least(g + 1, b) > u:
        g += 1
    return g + 1


def _draw_tree_tokens(siblings: SiblingCurve, shape: TreeShape, rng: random.Random) -> int:
    """X = D + 1 for one round over a tree: depth l is reached when some sibling of its b_l is
    accepted, independently of the depths above."""
    depth = 0
    for b in shape.branching:
        if rng.random() >= siblings.at(b):
            break
        depth += 1
    return depth + 1


def simulate(
    levels: Sequence[Level], widths: Sequence[Width], rounds: int, seed: int = 0, horizon: int | None = None
) -> tuple[float, float]:
    """Simulate ``rounds`` target rounds; return (ms per token, mean accepted length).

    ``widths[0]`` may be a tree shape (``levels[1].siblings`` then gives its acceptance). With
    ``horizon`` = N, ``rounds`` is the number of generations instead, each of exactly N new
    tokens: rounds until N are held, the surplus of the last round dropped.
    """
    if any(isinstance(w, TreeShape) for w in widths[1:]):
        raise ValueError("only level 0 drafts a tree")
    wanted = [0] + [w for w in widths[1:] if isinstance(w, int)]  # T_k a level k > 0 hands up
    rng = random.Random(seed)
    k_top = len(levels) - 1

    whole = [False]  # level 1 accepted level 0's last proposal whole: its next pass feeds two tokens

    def verify(k: int) -> tuple[float, int]:
        """Cost of level k's pass over the batch of level k-1, and the tokens that round yields."""
        below = widths[k - 1]
        if isinstance(below, TreeShape):
            ms, tokens = levels[k].cost(below.nodes + 1), _draw_tree_tokens(levels[k].sibling_curve(), below, rng)
            depth = below.depth
        else:
            ms, tokens = levels[k].cost(below + 1), _draw_tokens(levels[k].run_lengths(), below, rng)
            depth = below
        if k == 1:
            whole[0] = tokens == depth + 1
        return ms, tokens

    def deliver(k: int) -> float:
        """Time for level k < K to hand up its T_k tokens (its proposal's own cost included)."""
        if k == 0:
            first = levels[0]
            extra = first.cost(2) - first.cost(1) if whole[0] and not first.lookup else 0.0
            return first.proposal + draft_cost(first.cost, first.lookup, widths[0]) + extra
        held, time = 0, levels[k].proposal
        while held < wanted[k]:
            below = deliver(k - 1)  # the batch is drafted before it is verified
            ms, tokens = verify(k)
            time, held = time + (below + ms), held + tokens
        return time

    def target_round() -> tuple[float, int]:
        """Time and committed tokens of one target round (one pass per token for K = 0)."""
        if k_top == 0:
            return levels[0].cost(1), 1
        below = deliver(k_top - 1)
        ms, tokens = verify(k_top)
        return below + ms, tokens

    if horizon is not None:
        total_ms, total_rounds = 0.0, 0
        for _ in range(rounds):
            held = 0
            while held < horizon:
                ms, tokens = target_round()
                total_ms, held, total_rounds = total_ms + ms, held + tokens, total_rounds + 1
        return total_ms / (rounds * horizon), rounds * horizon / total_rounds
    total_ms, total_tokens = 0.0, 0
    for _ in range(rounds):
        ms, tokens = target_round()
        total_ms, total_tokens = total_ms + ms, total_tokens + tokens
    return total_ms / total_tokens, total_tokens / rounds
