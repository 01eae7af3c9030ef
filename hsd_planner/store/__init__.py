"""The profiling database: schema, opening and migrations."""

from .db import StoreError, default_db_path, open_engine, resolve_url, upgrade_to_head
from .schema import Acceptance, AcceptancePrompt, Base, Continuation, Hardware, Latency, ModelRow, PlanRow, Setting, Solve, Validation, ValidationRun, Workload

__all__ = [
    "Acceptance",
    "AcceptancePrompt",
    "Base",
    "Continuation",
    "Hardware",
    "Latency",
    "ModelRow",
    "PlanRow",
    "Setting",
    "Solve",
    "StoreError",
    "Validation",
    "ValidationRun",
    "Workload",
    "default_db_path",
    "open_engine",
    "resolve_url",
    "upgrade_to_head",
]
