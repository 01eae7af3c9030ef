"""How far past misses reach, counted in the validations they came from.

A validation runs all its plans on the same held-out prompts, so its plans hit or miss together:
its misses are one group, not independent draws. Split conformal prediction holds the next score
inside the k-th smallest and k-th largest of n exchangeable past scores, k = ceil((n + 1) (1 -
alpha / 2)), with probability at least 1 - alpha; for groups, Dunn, Wasserman and Ramdas
("Distribution-free prediction sets for two-layer hierarchical models", JASA 118, 2023) pool the
groups' empirical distributions, each group weighted alike. :func:`group_bounds` does both: the
quantiles of the pooled distribution at the level split conformal gives V past validations (not
the plans in them), ceil((V + 1) 0.95) / V. That level is 1, the farthest past miss on each
side, below 39 validations; below 19 split conformal gives no finite bound at all (the level
passes 1), and the farthest miss stands in for it, which holds the next of V exchangeable
validations with probability (V - 1) / (V + 1) at least, and more where a validation's plans
spread about its own effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["group_bounds", "group_level"]


def group_level(groups: int, tail: float = 0.05) -> float:
    """The level of the pooled distribution that bounds a side for ``groups`` past groups:
    ceil((V + 1) (1 - ``tail``)) / V, at most 1.

    >>> group_level(10), group_level(19), round(group_level(39), 4), round(group_level(199), 4)
    (1.0, 1.0, 0.9744, 0.9548)
    """
    return min(1.0, math.ceil((groups + 1) * (1.0 - tail)) / groups)


def group_bounds(groups: Sequence[Sequence[float]], tail: float = 0.05) -> tuple[float, float]:
    """The lower and upper bound of the next group's score: the quantiles at :func:`group_level`
    from below and from above of the mean of ``groups``' empirical distributions (the empty ones
    left out). A ValueError when no group holds a score.

    >>> group_bounds([[-3.0, 0.5], [0.2, 0.1, 0.0]])  # two groups: each side's farthest
    (-3.0, 0.5)
    >>> groups = [[float(i)] for i in range(40)]  # 40 groups of one: the 2nd from each end
    >>> group_bounds(groups)
    (1.0, 38.0)
    """
    kept = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not kept:
        raise ValueError("no past score to bound the next one by")
    level = group_level(len(kept), tail)
    scores = np.concatenate(kept)
    weights = np.concatenate([np.full(len(g), 1.0 / (len(kept) * len(g))) for g in kept])  # each group sums to 1 / V
    order = np.argsort(scores, kind="stable")
    scores, weights = scores[order], weights[order]
    reach = level - 1e-9  # cumulative sums round: a level of 1 must reach the last score
    high = scores[min(len(scores) - 1, int(np.searchsorted(np.cumsum(weights), reach)))]
    low = scores[::-1][min(len(scores) - 1, int(np.searchsorted(np.cumsum(weights[::-1]), reach)))]
    return float(low), float(high)
