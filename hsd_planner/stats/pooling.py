"""Pooling per-prompt acceptance sums into a pair's acceptance: ratios of sums, as tokens per round are.

A profile stores, per prompt, sums that combine exactly across prompts (see
:class:`hsd_planner.store.schema.AcceptancePrompt`); pooling any multiset of prompts - the whole
workload, or a bootstrap resample that draws a prompt twice - gives that multiset's acceptance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..plan.rounds import monotone_probabilities

__all__ = ["PromptSums", "pool_drafted", "pool_prompts", "pool_siblings"]


class PromptSums(Protocol):
    """One prompt's acceptance sums (a stored row, or :class:`hsd_planner.store.records.PromptAcceptance`)."""

    @property
    def positions(self) -> int: ...
    @property
    def alpha_sum(self) -> float: ...
    @property
    def run_sum(self) -> list[float]: ...
    @property
    def run_count(self) -> list[int]: ...
    @property
    def visit_sum(self) -> list[list[float]] | None: ...
    @property
    def visit_count(self) -> list[float] | None: ...


def pool_prompts(rows: Sequence[PromptSums]) -> tuple[float, int, list[float], list[list[float] | None] | None]:
    """(alpha, positions, run_lengths, visited) pooled over per-prompt rows. Rows may repeat.

    >>> from types import SimpleNamespace as R
    >>> row = R(positions=2, alpha_sum=1.0, run_sum=[2.0, 1.0], run_count=[2, 2], visit_sum=None, visit_count=None)
    >>> pool_prompts([row, row])
    (0.5, 4, [1.0, 0.5], None)
    """
    positions = sum(r.positions for r in rows)
    g_len = max(len(r.run_sum) for r in rows)
    sums = [sum(r.run_sum[g] for r in rows if g < len(r.run_sum)) for g in range(g_len)]
    counts = [sum(r.run_count[g] for r in rows if g < len(r.run_count)) for g in range(g_len)]
    run_lengths = [s / c for s, c in zip(sums, counts) if c > 0]
    alpha = sum(r.alpha_sum for r in rows) / positions if positions else 0.0
    return alpha, positions, run_lengths, _visited(rows)


def _visited(rows: Sequence[PromptSums]) -> list[list[float] | None] | None:
    """P_b(G >= g) pooled over prompts, as the product-limit estimate of
    :func:`hsd_planner.profiling.acceptance.visited_run_sums`; None when a prompt predates visited
    sums, so old and new measurements are never mixed.

    A row measured before censored starts counted has no ``visit_base``: every one of its starts
    saw all b positions, so its base at g is its sum at g - 1 (its count at g = 0) and the product
    gives back its old estimate, sum[g] / count. Past the longest run any start saw (a continuation
    shorter than b), the table goes on geometrically, as :class:`hsd_planner.plan.rounds.RunLengths`
    extends a table.

    >>> from types import SimpleNamespace as R
    >>> old = R(visit_sum=[[2.0, 1.0]], visit_count=[2.0], visit_base=None)
    >>> new = R(visit_sum=[[3.0, 1.0]], visit_count=[3.0], visit_base=[[3.0, 3.0]])
    >>> _visited([old]), _visited([new]), _visited([old, new])
    ([[1.0, 0.5]], [[1.0, 0.3333333333333333]], [[1.0, 0.4]])
    """
    measured = [(r.visit_sum, r.visit_count, getattr(r, "visit_base", None)) for r in rows]
    if any(v is None or c is None for v, c, _ in measured):
        return None
    out: list[list[float] | None] = []
    for b in range(1, min(len(v or []) for v, _, _ in measured) + 1):
        per_row = [(v[b - 1], base[b - 1] if base is not None else [c[b - 1], *v[b - 1][:b]]) for v, c, base in measured if v and c]
        sums = [sum(v[g] for v, _ in per_row) for g in range(b + 1)]
        bases = [sum(base[g] for _, base in per_row) for g in range(b + 1)]
        if bases[0] <= 0:
            out.append(None)
            continue
        table = [1.0]
        for g in range(1, b + 1):
            if bases[g] > 0:
                table.append(table[-1] * min(1.0, sums[g] / bases[g]))
            else:  # no start saw g positions with a run that long: geometric, as RunLengths extends a table
                ratio = table[-1] / table[-2] if len(table) >= 2 and table[-2] > 0 else 0.0
                table.append(table[-1] * ratio)
        out.append(table)
    return out


def pool_drafted(rows: Sequence[object]) -> list[list[float] | None] | None:
    """P_b(L >= l), l = 0..b, of a lookup drafter's proposal length L over the rounds a width-b
    decoder visits, pooled over prompts (``visit_drafted`` over ``visit_count``). None when any
    prompt has none (a model drafter, which always proposes b, or a row measured before).

    >>> from types import SimpleNamespace as R
    >>> pool_drafted([R(visit_drafted=[[2.0, 1.0]], visit_count=[2.0]), R(visit_drafted=[[2.0, 2.0]], visit_count=[2.0])])
    [[1.0, 0.75]]
    """
    drafted = [(getattr(r, "visit_drafted", None), getattr(r, "visit_count", None)) for r in rows]
    if not drafted or any(d is None or c is None for d, c in drafted):
        return None
    out: list[list[float] | None] = []
    for b in range(1, min(len(d or []) for d, _ in drafted) + 1):
        weight = sum(c[b - 1] for _, c in drafted if c)
        held = [sum(d[b - 1][n] for d, _ in drafted if d) for n in range(b + 1)]
        out.append(monotone_probabilities([h / weight for h in held], increasing=False) if weight > 0 else None)
    return out


def pool_siblings(rows: Sequence[object]) -> list[float] | None:
    """A(k), k = 1..K, pooled over per-prompt rows: ``sum siblings_sum[k - 1] / sum siblings_count``,
    clamped to [0, 1] and non-decreasing as every sibling curve is.

    None when any prompt has no sums (the n-gram drafter, or a row measured before siblings
    were): a curve over part of the prompts would not match the pair's alpha and run lengths.
    Rows may repeat (a bootstrap resample). K is the shortest stored curve.

    >>> from types import SimpleNamespace as R
    >>> pool_siblings([R(siblings_sum=[1.0, 2.0], siblings_count=2), R(siblings_sum=[0.0, 1.0], siblings_count=2)])
    [0.25, 0.75]
    """
    sums: list[list[float]] = []
    total = 0
    for r in rows:
        k_sums, count = getattr(r, "siblings_sum", None), getattr(r, "siblings_count", None)
        if not k_sums or count is None:
            return None
        sums.append(k_sums)
        total += count
    if total <= 0:
        return None
    k_max = min(len(k_sums) for k_sums in sums)
    return monotone_probabilities([sum(k_sums[k] for k_sums in sums) / total for k in range(k_max)], increasing=True)
