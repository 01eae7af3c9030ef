"""What one verification round yields, whatever drafted the batch it verifies.

A round of level k over the batch of level k-1 commits X = A + 1 tokens, A the drafted tokens it
accepts along one path. :class:`RoundLaw` holds P(A >= g) and answers every question the latency
model and the solver ask of a round (E[X], P(X = x), the renewal m(t)); it is built from

- :class:`RunLengths`, the accepted run length G of a chain (A = min(G, b) for a batch of b);
- :class:`SiblingCurve`, A(k) for a draft tree (A = D, the accepted depth, P(D >= l) =
  prod_{j<=l} A(b_j): each depth accepted independently, as in RSD).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hsd_runtime.terms.shape import TreeShape

__all__ = ["RoundLaw", "RunLengths", "SiblingCurve", "monotone_probabilities"]


class RunLengths:
    """The distribution of an accepted run length G, as P(G >= g) for g = 0, 1, 2, ...

    ``survival`` is P(G >= g) over every start position. ``by_width[b - 1]``, when given, is
    P(G >= g), g = 0..b, over the starts a decoder drafting b tokens a round visits (it skips the
    starts inside long runs, so bursty acceptance yields fewer tokens per round than the plain
    average suggests); every width-b question reads it, wider widths the widest table there is.
    Beyond a stored tail, P(G >= g) continues geometrically with the ratio of its last two values
    (0 when they are 0), so any width can be evaluated.

    ``drafted[b - 1]``, when given, is P(L >= l), l = 0..b, for the proposal length L of a lookup
    drafter asked for b tokens (it proposes fewer, or none, when its match runs short) or of a model
    that stops on its confidence (``pmin=``): the pass that verifies the proposal holds L + 1
    tokens, not b + 1 (:meth:`verify_cost`), and such a model drafts in min(L + 1, b) passes
    (:meth:`draft_passes`).
    """

    def __init__(
        self,
        survival: Sequence[float],
        by_width: Sequence[Sequence[float] | None] | None = None,
        drafted: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        self._s = _survival(survival)
        self._by_width = _Tables(by_width)
        self._drafted = _Tables(drafted)

    @classmethod
    def iid(cls, alpha: float, length: int = 65, drafted: Sequence[Sequence[float] | None] | None = None) -> RunLengths:
        """P(G >= g) = alpha^g."""
        return cls([alpha**g for g in range(length)], drafted=drafted)

    def verify_cost(self, cost: Callable[[int], float], b: int, least: int = 0) -> float:
        """E[c(L + 1)]: the expected pass that verifies a proposal asked for ``b`` tokens, L its
        length (b, unless a lookup's proposal lengths were measured, at width b or, for a profile
        of narrower tables, at the widest width measured). A draft shorter than ``least`` tokens
        is dropped (``nmin=``): it is verified as none, P(L' >= l) = P(L >= max(l, least)), l >= 1.

        >>> runs = RunLengths.iid(0.5, drafted=[None, [1.0, 0.5, 0.25]])
        >>> runs.verify_cost(lambda n: 10.0 * n, 2)  # 0.5 c(1) + 0.25 c(2) + 0.25 c(3)
        17.5
        >>> runs.verify_cost(lambda n: 10.0 * n, 4)  # beyond the tables: 0.5 c(1) + 0.25 c(2) + 0.25 c(5)
        22.5
        >>> runs.verify_cost(lambda n: 10.0 * n, 2, least=2)  # one-token drafts dropped: 0.75 c(1) + 0.25 c(3)
        15.0
        """
        if b <= len(self._drafted):
            table = self._drafted[b - 1]
            pad = 0.0
        else:  # wider than measured (a profile of narrower tables): a round that filled the widest
            # table is priced as filling b, an upper bound, not every round as a full pass
            table = self._drafted[-1] if self._drafted else None
            pad = table[-1] if table is not None else 0.0
        if table is None:
            return cost(b + 1)
        held = [*table[: b + 1], *[pad] * (b + 1 - len(table)), 0.0]  # P(L >= l), l = 0..b + 1
        if least > 1:  # the drafts kept: P(L' >= l) = P(L >= least) for 1 <= l <= least
            held = [held[0], *[held[min(max(n, least), b + 1)] for n in range(1, b + 2)]]
        return sum((held[n] - held[n + 1]) * cost(n + 1) for n in range(b + 1))

    def draft_passes(self, b: int) -> float:
        """E[min(L + 1, b)]: the passes of a model drafter asked for ``b`` tokens that ends its
        draft at L on its confidence (the pass that found it unsure ran; a full draft takes b),
        from the measured proposal lengths: sum_{l < b} P(L >= l). Without them, ``b``.

        >>> RunLengths.iid(0.5, drafted=[None, [1.0, 0.5, 0.25]]).draft_passes(2)  # 1 + 0.5
        1.5
        """
        if not self._drafted:
            return float(b)
        table = self._drafted[min(b, len(self._drafted)) - 1]
        if table is None:
            return float(b)
        held = [*table[:b], *[table[-1]] * (b - len(table))]  # P(L >= l), l = 0..b - 1; wider than measured: as the widest
        return float(sum(held))

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


def monotone_probabilities(values: Sequence[float], increasing: bool) -> list[float]:
    """``values`` clamped to [0, 1] and made monotone from the first on: non-decreasing (a sibling
    curve: one more sibling only adds a chance) or non-increasing (a survival function). A step
    the wrong way is estimation noise; it is flattened, never turned into a gain.

    >>> monotone_probabilities([0.4, 0.6, 0.55, 1.2], increasing=True)
    [0.4, 0.6, 0.6, 1.0]
    >>> monotone_probabilities([1.0, 0.5, 0.7, -0.1], increasing=False)
    [1.0, 0.5, 0.5, 0.0]
    """
    out = [min(1.0, max(0.0, float(v))) for v in values]
    for k in range(1, len(out)):
        out[k] = max(out[k], out[k - 1]) if increasing else min(out[k], out[k - 1])
    return out


def _survival(values: Sequence[float]) -> list[float]:
    """Clamp to [0, 1] and make non-increasing; P(G >= 0) must be 1."""
    _check_survival(values)
    return monotone_probabilities(values, increasing=False)


def _check_survival(values: Sequence[float]) -> None:
    """A ValueError unless ``values`` starts with P(G >= 0) = 1."""
    if not values or abs(values[0] - 1.0) > 1e-9:
        raise ValueError("run lengths must start with P(G >= 0) = 1")


class _Tables:
    """Survival tables by width (None where a width has none), each checked at once and made a
    survival function (:func:`_survival`) when first read: a prediction reads a few widths of the
    64 a profile holds.

    >>> tables = _Tables([[1.0, 0.7, 0.8], None])
    >>> len(tables), tables[0], tables[-1]
    (2, [1.0, 0.7, 0.7], None)
    """

    def __init__(self, tables: Sequence[Sequence[float] | None] | None) -> None:
        self._raw = list(tables or [])
        for t in self._raw:
            if t is not None:
                _check_survival(t)
        self._read: dict[int, list[float] | None] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, i: int) -> list[float] | None:
        i = range(len(self._raw))[i]  # a negative index counts from the end; past it, an IndexError
        if i not in self._read:
            t = self._raw[i]
            self._read[i] = None if t is None else monotone_probabilities(t, increasing=False)
        return self._read[i]


class SiblingCurve:
    """A(k), k = 1, 2, ...: P(one of k siblings drawn without replacement from the drafter is
    accepted by the verifier's recursive rejection sampling); A(1) is alpha.

    Values are clamped to [0, 1] and made non-decreasing: one more sibling can only add a chance,
    so a dip is estimation noise and must not make the solver prefer fewer siblings. Beyond the
    last stored k the curve stays at its last value (no gain claimed that was not measured).

    >>> curve = SiblingCurve([0.4, 0.6, 0.55])
    >>> curve.at(1), curve.at(3), curve.at(8)
    (0.4, 0.6, 0.6)
    """

    def __init__(self, values: Sequence[float]) -> None:
        if not values:
            raise ValueError("a sibling-acceptance curve needs at least A(1)")
        self._a = tuple(monotone_probabilities(values, increasing=True))

    @property
    def values(self) -> tuple[float, ...]:
        """A(1), A(2), ... as stored (after clamping)."""
        return self._a

    def at(self, k: int) -> float:
        """A(k) for k >= 1 siblings."""
        if k < 1:
            raise ValueError(f"a node has at least one child, got {k}")
        return self._a[min(k, len(self._a)) - 1]

    def __repr__(self) -> str:
        return f"SiblingCurve({list(self._a)})"


@dataclass(frozen=True)
class RoundLaw:
    """What one verification round yields: X = A + 1 tokens, A the drafted tokens accepted.

    ``accepted[g]`` = P(A >= g) for g = 0..depth, depth the drafted tokens on the longest path
    (b for a chain batch, L for a tree); every question about a round (E[X], P(X = x), the
    renewal m(t)) is answered from it alone, whatever drafted the batch.
    """

    accepted: tuple[float, ...]

    @classmethod
    def chain(cls, runs: RunLengths, b: int) -> RoundLaw:
        """A chain batch of ``b``: A = min(G, b)."""
        return cls(tuple(runs.at_least(g, b) for g in range(b + 1)))

    @classmethod
    def tree(cls, shape: TreeShape, siblings: SiblingCurve) -> RoundLaw:
        """A tree: A = D, P(D >= l) = prod_{j<=l} A(b_j) (each depth accepted independently).

        >>> RoundLaw.tree(TreeShape((2, 1)), SiblingCurve([0.5, 0.75])).accepted
        (1.0, 0.75, 0.375)
        """
        s = [1.0]
        for b in shape.branching:
            s.append(s[-1] * siblings.at(b))
        return cls(tuple(s))

    @property
    def mean(self) -> float:
        """E[X] = sum_{g>=0} P(X > g) = sum_{g=0..depth} P(A >= g): tokens per round."""
        return sum(self.accepted)

    def tokens(self) -> list[float]:
        """P(X = x) for x = 0..depth+1 (index 0 unused)."""
        s, depth = self.accepted, len(self.accepted) - 1
        px = [0.0] * (depth + 2)
        for x in range(1, depth + 1):
            px[x] = s[x - 1] - s[x]
        px[depth + 1] = s[depth]
        return px

    def rounds(self, t_max: int) -> list[float]:
        """m(t) for t = 0..t_max: expected rounds until ``t`` tokens are held.

        m(t) = 1 + sum_x P(X = x) m(t - x), m(t <= 0) = 0.
        """
        px = self.tokens()
        top = len(px) - 1  # the most tokens one round yields
        m = [0.0] * (t_max + 1)
        for u in range(1, t_max + 1):
            m[u] = 1.0 + sum(px[x] * m[u - x] for x in range(1, min(top, u - 1) + 1))
        return m
