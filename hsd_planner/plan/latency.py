"""Expected per-token latency of a hierarchy under exact-size semantics.

Models m_0 < ... < m_K (m_K the target) with widths T_0..T_{K-1}. Let G_k be the accepted run
length between levels k-1 and k: i.i.d. acceptance gives P(G >= g) = alpha^g; the empirical
model uses the measured run-length distribution over the starts a decoder drafting b tokens a
round visits (see :class:`RunLengths`). A verification round of level k over a batch
of b drafted tokens yields X = min(G_k, b) + 1 tokens.

- Level 0: C_0 = T_0 c_0(1) for a model, c_0(T_0) for the n-gram lookup (one call).
- Level 0 < k < K: E[R_k] = m(T_k), m(t) = 1 + sum_x P(X = x) m(t - x), m(t <= 0) = 0, with
  b = T_{k-1}; E[C_k] = E[R_k] (E[C_{k-1}] + c_k(T_{k-1} + 1)).
- Target: L = (E[C_{K-1}] + c_K(T_{K-1} + 1)) / E[X_K], E[X_K] = sum_{g=0..T_{K-1}} P(G_K >= g).

With one drafter this is Leviathan et al.'s L = (T c_0 + c_1)(1 - a) / (1 - a^{T+1}).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "CostCurve",
    "Level",
    "Prediction",
    "RunLengths",
    "draft_cost",
    "expected_rounds",
    "expected_run_tokens",
    "hierarchy_latency",
    "level_cost",
    "rounds_table",
]


class RunLengths:
    """The distribution of an accepted run length G, as P(G >= g) for g = 0, 1, 2, ...

    ``survival`` is P(G >= g) over every start position. ``by_width[b - 1]``, when given, is
    P(G >= g), g = 0..b, over the starts a decoder drafting b tokens a round visits (it skips the
    starts inside long runs, so bursty acceptance yields fewer tokens per round than the plain
    average suggests); every width-b question reads it, wider widths the widest table there is.
    Beyond a stored tail, P(G >= g) continues geometrically with the ratio of its last two values
    (0 when they are 0), so any width can be evaluated.
    """

    def __init__(self, survival: Sequence[float], by_width: Sequence[Sequence[float] | None] | None = None) -> None:
        self._s = _survival(survival)
        self._by_width = [None if t is None else _survival(t) for t in by_width or []]

    @classmethod
    def iid(cls, alpha: float, length: int = 65) -> RunLengths:
        """P(G >= g) = alpha^g."""
        return cls([alpha**g for g in range(length)])

    @staticmethod
    def of(level: Level) -> RunLengths:
        """The acceptance of the level below by ``level``; every level above level 0 has one."""
        if level.runs is None:
            raise ValueError("a level above level 0 needs the acceptance of the level below (runs)")
        return level.runs

    @property
    def alpha(self) -> float:
        """P(G >= 1) over every start: the mean acceptance of a drafted token."""
        return self.at_least(1)

    def at_least(self, g: int, b: int | None = None) -> float:
        """P(G >= g), over the starts a width-``b`` decoder visits when ``b`` is given and known."""
        if g <= 0:
            return 1.0
        table = self._s
        if b is not None and self._by_width:
            table = self._by_width[min(b, len(self._by_width)) - 1] or self._s
        if g < len(table):
            return table[g]
        ratio = table[-1] / table[-2] if len(table) >= 2 and table[-2] > 0 else 0.0
        return table[-1] * ratio ** (g - len(table) + 1)

    def tokens_per_round(self, b: int) -> list[float]:
        """P(X = x) for x = 0..b+1 (index 0 unused) with X = min(G, b) + 1."""
        px = [0.0] * (b + 2)
        for x in range(1, b + 1):
            px[x] = self.at_least(x - 1, b) - self.at_least(x, b)
        px[b + 1] = self.at_least(b, b)
        return px


def _survival(values: Sequence[float]) -> list[float]:
    """Clamp to [0, 1] and make non-increasing; P(G >= 0) must be 1."""
    if not values or abs(values[0] - 1.0) > 1e-9:
        raise ValueError("run lengths must start with P(G >= 0) = 1")
    s = [min(1.0, max(0.0, float(v))) for v in values]
    for g in range(1, len(s)):  # a survival function cannot increase
        s[g] = min(s[g], s[g - 1])
    return s


CostCurve = Callable[[int], float]  # n tokens in one pass -> ms


@dataclass(frozen=True)
class Level:
    """One level of a hierarchy for the latency model.

    ``runs`` is the acceptance of the level below by this level (None for level 0);
    ``lookup`` marks a drafter that proposes all its tokens in one call (the n-gram drafter).
    """

    cost: CostCurve
    runs: RunLengths | None = None
    lookup: bool = False


def expected_run_tokens(runs: RunLengths, b: int) -> float:
    """E[X] = sum_{g=0..b} P(G >= g): tokens per verification round of a batch of ``b``."""
    return sum(runs.at_least(g, b) for g in range(b + 1))


def rounds_table(runs: RunLengths, b: int, t_max: int) -> list[float]:
    """m(t) for t = 0..t_max: expected rounds of batches of ``b`` until ``t`` tokens are held.

    m(t) = 1 + sum_x P(X = x) m(t - x), m(t <= 0) = 0.
    """
    px = runs.tokens_per_round(b)
    m = [0.0] * (t_max + 1)
    for u in range(1, t_max + 1):
        m[u] = 1.0 + sum(px[x] * m[u - x] for x in range(1, min(b + 1, u - 1) + 1))
    return m


def expected_rounds(runs: RunLengths, b: int, t: int) -> float:
    """m(t): expected rounds of batches of ``b`` until at least ``t`` tokens are held."""
    return rounds_table(runs, b, t)[t]


@dataclass(frozen=True)
class Prediction:
    """The latency model's answer for one hierarchy."""

    ms_per_token: float
    mean_accepted_length: float  # E[X_K]: tokens per target round
    speedup: float  # c_K(1) / ms_per_token


def draft_cost(cost: CostCurve, lookup: bool, t: int) -> float:
    """C_0: level 0 drafts ``t`` tokens one pass each, or all in one call for a lookup drafter."""
    return cost(t) if lookup else t * cost(1)


def level_cost(levels: Sequence[Level], widths: Sequence[int]) -> float:
    """E[C_{K-1}]: the expected time for the level below the target to deliver its batch."""
    first = levels[0]
    cost = draft_cost(first.cost, first.lookup, widths[0])
    for k in range(1, len(widths)):
        cost = expected_rounds(RunLengths.of(levels[k]), widths[k - 1], widths[k]) * (cost + levels[k].cost(widths[k - 1] + 1))
    return cost


def hierarchy_latency(levels: Sequence[Level], widths: Sequence[int], horizon: int | None = None) -> Prediction:
    """Expected ms per token of the hierarchy ``levels`` (target last) with ``widths``.

    Without ``horizon``, the steady state: round cost / E[X_K]. With ``horizon`` = N, a
    generation of exactly N new tokens: its expected target rounds m(N) (renewal over X_K, the
    last round cut short; :func:`rounds_table`) at a full round's cost each, so ms per token is
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
        b = widths[-1]
        runs = RunLengths.of(target)
        tokens = expected_run_tokens(runs, b) if horizon is None else horizon / expected_rounds(runs, b, horizon)
        ms = (level_cost(levels[:-1], widths) + target.cost(b + 1)) / tokens
    return Prediction(ms, tokens, target.cost(1) / ms)
