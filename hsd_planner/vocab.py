"""The planner's words, defined once: ``Literal`` aliases every module and option uses.

The runtime's own (dtype, decoding mode) come from :mod:`hsd_runtime.vocab`. Torch-free.
"""

from __future__ import annotations

from typing import Literal, get_args

from hsd_runtime.vocab import (
    DEFAULT_NGRAM_ORDER,
    DTYPES,
    MAX_BATCH,
    MAX_SEED,
    MAX_SPEC_CHARS,
    MAX_TEMPERATURE,
    MAX_WIDTH,
    MIN_TEMPERATURE,
    MODES,
    Dtype,
    Mode,
)

__all__ = [
    "ACCEPTANCE_MODELS",
    "DEFAULT_NGRAM_ORDER",
    "DISTILL_DATA",
    "DIVERGENCE_NAMES",
    "DTYPES",
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_LENGTH",
    "MAX_REPEATS",
    "MAX_SEED",
    "MAX_SPEC_CHARS",
    "MAX_TEMPERATURE",
    "MAX_WIDTH",
    "MIN_TEMPERATURE",
    "MODES",
    "PLAN_KINDS",
    "SQLITE_INT_MAX",
    "AcceptanceModel",
    "DistillData",
    "Divergence",
    "Dtype",
    "Mode",
    "PlanKind",
]

# how accepted run lengths are modelled: the measured P(G >= g), or alpha^g
AcceptanceModel = Literal["empirical", "iid"]
ACCEPTANCE_MODELS: tuple[str, ...] = get_args(AcceptanceModel)

# the role of a stored plan within its solve
PlanKind = Literal["best", "top", "single", "autoregressive"]
PLAN_KINDS: tuple[str, ...] = get_args(PlanKind)

# DistillSpec divergences: forward KL, reverse KL, Jensen-Shannon (beta 0.5), total variation
Divergence = Literal["fkl", "rkl", "jsd", "tvd"]
DIVERGENCE_NAMES: tuple[str, ...] = get_args(Divergence)

# where a distillation step's continuations come from
DistillData = Literal["on-policy", "target", "mixed"]
DISTILL_DATA: tuple[str, ...] = get_args(DistillData)

# Bounds of the numbers a user types or an import holds, checked before anything is written.
SQLITE_INT_MAX = 2**63 - 1  # the largest integer SQLite stores (a row id, a count)
MAX_LENGTH = 10**7  # tokens: a prompt, a continuation, a context length, a pass (far beyond any model's context)
MAX_COUNT = 10**6  # how many of something a run does: prompts, steps, plans listed, a batch
MAX_REPEATS = 1000  # timed rounds per latency point, validation runs per prompt
