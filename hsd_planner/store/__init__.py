"""The profiling database: schema, opening and migrating, reading profiles back, solves, exchange.

Owns every SQL statement of hsd-plan (SQLAlchemy 2.0 ORM; Alembic migrations live in the
repository's top-level ``migrations/``, installed as ``hsd_planner.migrations``). Imports
:mod:`hsd_planner.plan` (a profile read back is a ``Profile``) and never torch: storing needs none.
"""

from ..errors import StoreError
from .db import check_db, default_db_path, migrations_dir, open_engine, open_memory_engine, resolve_url, upgrade_to_head
from .schema import (
    Acceptance,
    AcceptancePrompt,
    Base,
    BatchPlanRow,
    Continuation,
    Hardware,
    Latency,
    ModelRow,
    PlanRow,
    Setting,
    Solve,
    Validation,
    ValidationRun,
    Workload,
)

__all__ = [
    "Acceptance",
    "AcceptancePrompt",
    "Base",
    "BatchPlanRow",
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
    "check_db",
    "default_db_path",
    "migrations_dir",
    "open_engine",
    "open_memory_engine",
    "resolve_url",
    "upgrade_to_head",
]
