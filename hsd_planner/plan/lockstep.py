"""Rounds in lockstep: a level serving a batch of b sequences waits for the slowest of them.

One sequence at a level 0 < k < K runs rounds until it holds T_k tokens: R(t) rounds for t = T_k,
each yielding X tokens with the law of :class:`~hsd_planner.plan.rounds.RoundLaw`, so that
R(t) <= r exactly when the first r rounds yield at least t tokens:

    F_t(r) = P(R(t) <= r) = P(X_1 + ... + X_r >= t).

In a batch every sequence runs its own rounds, but a batched pass serves all of them at once: the
level keeps going until the last sequence holds its T_k tokens, max_i R_i(t) rounds. For i.i.d.
sequences P(max_i R_i <= r) = F_t(r)^b, and since R(t) takes values in 1..t (every round yields a
token),

    E[max_{i<=b} R_i(t)] = sum_{r=0}^{t-1} (1 - F_t(r)^b).

At b = 1 this is E[R(t)] = m(t), the renewal of :meth:`RoundLaw.rounds`. Tokens per round per
sequence are unchanged: each sequence still commits X of them a round.

What a round costs below can depend on how many sequences still need tokens (a level under a
middle level runs only for those, and its own rounds end with the slowest of them). Round r + 1
runs for A_r = #{i: R_i(t) > r} ~ Binomial(b, 1 - F_t(r)) sequences, so the expected number of
rounds with exactly m of them is w(m) = sum_r P(A_r = m) (:func:`active_rounds`), and
sum_{m>=1} w(m) is E[max] above.
"""

from __future__ import annotations

import math

import numpy as np

from .rounds import RoundLaw

__all__ = ["active_rounds", "expected_max_rounds", "max_rounds_table", "rounds_cdf"]


def _tails(law: RoundLaw, t_max: int) -> np.ndarray:
    """``tails[r, t]`` = P(X_1 + ... + X_r >= t) for r, t = 0..t_max."""
    px = np.asarray(law.tokens(), dtype=float)  # P(X = x), x = 0..depth + 1
    dist = np.zeros(t_max + 1)  # the law of min(S_r, t_max), S_0 = 0
    dist[0] = 1.0
    tails = np.empty((t_max + 1, t_max + 1))
    for r in range(t_max + 1):
        tails[r] = dist[::-1].cumsum()[::-1]
        full = np.convolve(dist, px)  # S_{r+1} = S_r + X, then capped at t_max again
        dist = np.concatenate([full[:t_max], [full[t_max:].sum()]])
    return tails


def rounds_cdf(law: RoundLaw, t: int) -> list[float]:
    """F_t(r) = P(R(t) <= r) for r = 0..t: rounds until ``t`` tokens are held.

    >>> from hsd_planner.plan.rounds import RunLengths
    >>> rounds_cdf(RoundLaw.chain(RunLengths.iid(0.5), 1), 2)  # X = 1 or 2, each with 1/2
    [0.0, 0.5, 1.0]
    """
    return [float(x) for x in _tails(law, t)[:, t]]


def max_rounds_table(law: RoundLaw, t_max: int, batch: int) -> list[float]:
    """E[max_{i<=batch} R_i(t)] for t = 0..t_max, ``batch`` i.i.d. sequences in lockstep.

    At ``batch`` = 1 it equals :meth:`RoundLaw.rounds`.
    """
    if batch < 1:
        raise ValueError(f"a batch holds at least one sequence, got {batch}")
    waits = 1.0 - _tails(law, t_max) ** batch  # [r, t]: P(max_i R_i(t) > r)
    return [float(waits[:t, t].sum()) for t in range(t_max + 1)]


def expected_max_rounds(law: RoundLaw, t: int, batch: int) -> float:
    """E[max_{i<=batch} R_i(t)] = sum_{r>=0} (1 - F_t(r)^batch).

    Two sequences, each needing 2 tokens from rounds of 1 or 2 tokens (1/2 each): one round
    suffices for both only when both draw 2, P = 1/4, so E[max] = 1/4 * 1 + 3/4 * 2.

    >>> from hsd_planner.plan.rounds import RunLengths
    >>> law = RoundLaw.chain(RunLengths.iid(0.5), 1)
    >>> expected_max_rounds(law, 2, 1), expected_max_rounds(law, 2, 2)
    (1.5, 1.75)
    """
    return max_rounds_table(law, t, batch)[t]


def active_rounds(law: RoundLaw, t: int, batch: int) -> list[float]:
    """w(m), m = 0..batch: the expected number of rounds run for exactly m of ``batch`` sequences
    (those that hold fewer than ``t`` tokens when the round starts); w(0) = 0.

    >>> from hsd_planner.plan.rounds import RunLengths
    >>> law = RoundLaw.chain(RunLengths.iid(0.5), 1)
    >>> active_rounds(law, 2, 2), sum(active_rounds(law, 2, 2)) == expected_max_rounds(law, 2, 2)
    ([0.0, 0.5, 1.25], True)
    """
    waiting = 1.0 - _tails(law, t)[:t, t]  # [r]: P(R(t) > r), the chance a sequence runs round r + 1
    m = np.arange(batch + 1)
    comb = np.array([math.comb(batch, int(k)) for k in m], dtype=float)
    counts = comb[None, :] * waiting[:, None] ** m[None, :] * (1.0 - waiting[:, None]) ** (batch - m[None, :])  # [r, m]
    out = counts.sum(axis=0)
    out[0] = 0.0
    return [float(x) for x in out]
