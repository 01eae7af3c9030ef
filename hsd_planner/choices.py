"""The planner's closed sets of values, defined once and torch-free: ``Literal`` types every module
and option uses, each with the tuple of its values.

The runtime's own (model dtypes, decoding modes) are :mod:`hsd_runtime.terms.choices`; the bounds of
numbers are :mod:`.limits`.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "ACCEPTANCE_MODELS",
    "DISTILL_DATA",
    "DIVERGENCE_NAMES",
    "PLAN_KINDS",
    "AcceptanceModel",
    "DistillData",
    "Divergence",
    "PlanKind",
]

# how accepted run lengths are modelled: the measured P(G >= g), or alpha^g
AcceptanceModel = Literal["empirical", "iid"]
ACCEPTANCE_MODELS: tuple[str, ...] = get_args(AcceptanceModel)

# the role of a stored plan within its solve: ranked at batch size 1, or its schedule's plan at a batch size
PlanKind = Literal["best", "top", "single", "autoregressive", "schedule"]
PLAN_KINDS: tuple[str, ...] = get_args(PlanKind)

# DistillSpec divergences: forward KL, reverse KL, Jensen-Shannon (beta 0.5), total variation
Divergence = Literal["fkl", "rkl", "jsd", "tvd"]
DIVERGENCE_NAMES: tuple[str, ...] = get_args(Divergence)

# where a distillation step's continuations come from
DistillData = Literal["on-policy", "target", "mixed"]
DISTILL_DATA: tuple[str, ...] = get_args(DistillData)
