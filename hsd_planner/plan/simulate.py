"""A Monte Carlo simulation of the hierarchy algorithm, to cross-check the latency model.

It shares nothing with :mod:`hsd_planner.plan.latency` but the inputs (and level 0's cost rule): it draws accepted run lengths
round by round and plays exact-size semantics out (a middle level repeats rounds until it holds
T_k tokens, then hands up exactly T_k), adding up the cost of every pass.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .latency import Level, RunLengths, draft_cost

__all__ = ["simulate"]


def _draw_tokens(runs: RunLengths, b: int, rng: random.Random) -> int:
    """X = min(G, b) + 1 for one round: G >= g with probability P(G >= g)."""
    u = rng.random()
    g = 0
    while g < b and runs.at_least(g + 1, b) > u:
        g += 1
    return g + 1


def simulate(levels: Sequence[Level], widths: Sequence[int], rounds: int, seed: int = 0, horizon: int | None = None) -> tuple[float, float]:
    """Simulate ``rounds`` target rounds; return (ms per token, mean accepted length).

    With ``horizon`` = N, ``rounds`` is the number of generations instead, each of exactly N new
    tokens: rounds until N are held, the surplus of the last round dropped.
    """
    rng = random.Random(seed)
    k_top = len(levels) - 1

    def deliver(k: int) -> float:
        """Time for level k < K to hand up its T_k tokens."""
        if k == 0:
            return draft_cost(levels[0].cost, levels[0].lookup, widths[0])
        held, time = 0, 0.0
        while held < widths[k]:
            time += deliver(k - 1) + levels[k].cost(widths[k - 1] + 1)
            held += _draw_tokens(RunLengths.of(levels[k]), widths[k - 1], rng)
        return time

    def target_round() -> tuple[float, int]:
        """Time and committed tokens of one target round (one pass per token for K = 0)."""
        if k_top == 0:
            return levels[0].cost(1), 1
        return deliver(k_top - 1) + levels[k_top].cost(widths[-1] + 1), _draw_tokens(RunLengths.of(levels[k_top]), widths[-1], rng)

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
