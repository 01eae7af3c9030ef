"""The exported plan as a versioned document: the contract for anyone importing the planner.

A :class:`PlanDocument` says which hierarchy to run (``chain`` smallest first, target last, one
width per drafter; a draft tree as ``"3x2x1"``), what it is predicted to do, on which profile
(hardware, dtype, workload, decoding) that prediction rests, and, per serving stack, the best plan
that stack can express. ``schedule`` maps ranges of batch sizes to the plan to run there (a solve
with batch sizes: its best chain per batch size, no speculation where it stops paying; otherwise the
plan alone at 1..1); a stack that takes a batch-size table carries its own, k per range.
Version 2 added the chain and prediction of each schedule entry and the stacks' schedules.

The JSON Schema of the document ships with the package (``plan.schema.json`` beside this module,
written by ``python -m hsd_planner.export``); a test checks it equals :func:`json_schema`.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PLAN_SCHEMA_FILE",
    "PLAN_SCHEMA_VERSION",
    "HardwareInfo",
    "PlanDocument",
    "ProfileInfo",
    "ScheduleEntry",
    "StackPlan",
    "StackScheduleEntry",
    "WorkloadInfo",
    "json_schema",
    "shipped_schema",
]

PLAN_SCHEMA_VERSION = 2
PLAN_SCHEMA_FILE = "plan.schema.json"

Widths = list[int | str]  # a number of tokens per drafter; the first may be a tree shape such as "3x2x1"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScheduleEntry(_Frozen):
    """The plan to run while the batch holds ``min_batch``..``max_batch`` requests."""

    min_batch: int = Field(ge=1)
    max_batch: int = Field(ge=1)
    chain: list[str] = Field(min_length=1, description="model specs, smallest first, the target last; the target alone: no speculation")
    widths: Widths = Field(description="one width per drafter; empty: no speculation at these batch sizes")
    predicted_ms_per_token: float = Field(description="per request, at min_batch requests in the batch")
    predicted_speedup: float = Field(description="over autoregressive decoding of a batch of min_batch")


class StackScheduleEntry(_Frozen):
    """A serving stack's draft length while the batch holds ``min_batch``..``max_batch`` requests."""

    min_batch: int = Field(ge=1)
    max_batch: int = Field(ge=1)
    k: int = Field(ge=0, description="tokens drafted per round; 0: no speculation")


class HardwareInfo(_Frozen):
    """Where the latency behind the prediction was measured."""

    fingerprint: str
    device: str
    device_name: str
    capability: str | None = None
    threads: int
    torch_version: str
    kernels: str | None = None


class WorkloadInfo(_Frozen):
    """The prompt set acceptance was measured on."""

    name: str
    content_hash: str
    prompts: int


class ProfileInfo(_Frozen):
    """The profile the plan was solved on."""

    hardware: HardwareInfo
    dtype: str
    workload: WorkloadInfo
    mode: Literal["greedy", "sample"]
    temperature: float | None = Field(None, description="None for greedy decoding")
    acceptance_model: str
    context_len: int


class StackPlan(_Frozen):
    """The best plan one serving stack can express, solved under its restrictions."""

    stack: str
    version: str
    restriction: list[str] = Field(description="why the plan had to change for this stack; empty when it is exported as solved")
    chain: list[str]
    widths: Widths
    predicted_ms_per_token: float
    predicted_speedup: float
    schedule: list[StackScheduleEntry] = Field(
        default_factory=list, description="k per range of batch sizes where the stack takes a table of them and the plan has batch sizes"
    )


class PlanDocument(_Frozen):
    """One solved hierarchy with its prediction and the profile it rests on."""

    schema_version: Literal[2] = 2  # PLAN_SCHEMA_VERSION
    chain: list[str] = Field(min_length=1, description="model specs, smallest first, the target last")
    widths: Widths = Field(description="one width per drafter; the first may be a draft tree like 3x2x1")
    predicted_ms_per_token: float
    predicted_mean_accepted_length: float
    predicted_speedup: float
    schedule: list[ScheduleEntry] = Field(min_length=1, description="the plan per range of batch sizes")
    profile: ProfileInfo
    stacks: list[StackPlan] = Field(description="per serving stack, the best plan it can express")
    plan_id: int | None = Field(None, description="the plan's id in the database it was exported from")
    solve_id: int | None = None


def json_schema() -> dict:
    """The JSON Schema of :class:`PlanDocument`, as shipped."""
    return PlanDocument.model_json_schema()


def shipped_schema() -> dict:
    """The JSON Schema file shipped with the package."""
    return json.loads(resources.files(__package__).joinpath(PLAN_SCHEMA_FILE).read_text())
