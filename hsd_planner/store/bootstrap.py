"""How sure a prediction is: bootstrap profiles that resample the profiled prompts.

Acceptance is measured on a finite set of prompts, and a different set would give other run
lengths. Each bootstrap profile draws as many prompts as were profiled, with replacement, and
pools their per-prompt acceptance sums exactly as the stored acceptance was pooled (latency
curves are kept: their medians are interleaved over rounds and vary far less than acceptance
between prompts). A plan's interval is the 5th to 95th percentile of its predicted speed-up
over the bootstrap profiles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ..plan import PairAcceptance, Profile
from .reader import ProfileSource
from .repo import pool_prompts, pool_siblings
from .schema import AcceptancePrompt, ModelRow

__all__ = ["BOOTSTRAP_PROFILES", "bootstrap_profiles", "resample_profiles"]

BOOTSTRAP_PROFILES = 100  # resamples per solve: percentiles of 100 predictions, well under a second


def bootstrap_profiles(
    engine: Engine, profile: Profile, source: ProfileSource, count: int = BOOTSTRAP_PROFILES, seed: int = 0
) -> list[Profile]:
    """``count`` profiles whose acceptance pools a resample of the profiled prompts (none when
    the per-prompt rows are missing, e.g. an import of aggregated rows only)."""
    by_pair: dict[tuple[str, str], dict[int, AcceptancePrompt]] = defaultdict(dict)
    with Session(engine) as s:
        names = {m.id: m.spec for m in s.scalars(select(ModelRow))}
        rows = s.scalars(select(AcceptancePrompt).filter_by(workload_id=source.workload_id, setting_id=source.setting_id)).all()
    have = {(a.drafter, a.verifier) for a in profile.acceptance}
    for r in rows:
        pair = (names[r.drafter_id], names[r.verifier_id])
        if pair in have:
            by_pair[pair][r.prompt_index] = r
    return resample_profiles(profile, by_pair, count, seed)


def resample_profiles(profile: Profile, by_pair: Mapping[tuple[str, str], Mapping[int, Any]], count: int, seed: int = 0) -> list[Profile]:
    """The bootstrap itself, without a database: ``by_pair[(drafter, verifier)][prompt]`` holds
    per-prompt acceptance rows (positions, alpha_sum, run_sum, run_count, visit_sum, visit_count,
    and optionally siblings_sum, siblings_count: the resampled A(k) of pairs that have one)."""
    have = {(a.drafter, a.verifier) for a in profile.acceptance}
    prompts = sorted({k for pair in by_pair.values() for k in pair})
    if not prompts or any(set(by_pair.get(pair, {})) != set(prompts) for pair in have):
        return []
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        drawn = rng.choice(prompts, size=len(prompts), replace=True).tolist()
        acceptance = []
        for (drafter, verifier), per_prompt in by_pair.items():
            if (drafter, verifier) not in have:
                continue
            rows = [per_prompt[k] for k in drawn]
            alpha, _positions, run_lengths, visited = pool_prompts(rows)
            acceptance.append(
                PairAcceptance(
                    drafter=drafter,
                    verifier=verifier,
                    alpha=min(1.0, alpha),
                    run_lengths=run_lengths,
                    visited=visited,
                    siblings=pool_siblings(rows),
                )
            )
        out.append(profile.model_copy(update={"acceptance": acceptance}))
    return out
