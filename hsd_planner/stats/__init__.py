"""Statistics over measurements: pooling per-prompt acceptance, bootstrap resampling, intervals.

Owns how per-prompt acceptance sums pool into a pair's alpha, run lengths and sibling curve
(:mod:`.pooling`; the store keeps its pooled rows with it, and a bootstrap pools resamples the
same way), and the one bootstrap of hsd-plan (:mod:`.bootstrap`): resampled prompts and the 90%
percentile interval, for predicted speed-ups (profiles over resampled profiled prompts) and
measured ones (held-out prompts), and how far past validations' misses reach, counted in
validations (:mod:`.conformal`). Pure: numpy and :mod:`hsd_planner.plan`, no torch, no database.
"""

from .bootstrap import (
    BOOTSTRAP_PROFILES,
    INTERVAL,
    bootstrap_interval,
    expanded,
    interval,
    miss_score,
    pooled_profile,
    pooled_profiles,
    resample_profiles,
    resamples,
)
from .conformal import group_bounds, group_level
from .pooling import PromptSums, pool_rows

__all__ = [
    "BOOTSTRAP_PROFILES",
    "INTERVAL",
    "PromptSums",
    "bootstrap_interval",
    "expanded",
    "group_bounds",
    "group_level",
    "interval",
    "miss_score",
    "pool_rows",
    "pooled_profile",
    "pooled_profiles",
    "resample_profiles",
    "resamples",
]
