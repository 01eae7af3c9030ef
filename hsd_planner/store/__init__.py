"""The profiling database: schema, opening and migrating, and every read and write behind named functions.

Owns every SQL statement of hsd-plan (SQLAlchemy 2.0 ORM; Alembic migrations live in the
repository's top-level ``migrations/``, installed as ``hsd_planner.migrations``): nothing outside
this package imports sqlalchemy or sees a session or an ORM row. Functions take the engine and
typed keys and hand back typed records (:mod:`.records`): :mod:`.measurements` for a profiling
run, :mod:`.profiles` reads a ``Profile`` back, :mod:`.solves` and :mod:`.plans` store and read
solves, :mod:`.validations` a validation's plans and rows, :mod:`.exchange` export and import.
The database is an SQLite file for one person, or a team's PostgreSQL server (:mod:`.server`)
that many machines profile into at once, its URL read by :mod:`.urls` (:mod:`.conninfo` for
libpq's keyword/value form), shown with its secrets masked by :mod:`.redaction` and its refusals
put in one line by :mod:`.failures`; every write is keyed by natural keys and safe to race
(:mod:`.upsert`, :mod:`.writes`). Imports :mod:`hsd_planner.plan` (a profile read back is a
``Profile``) and never torch.
"""

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError as DatabaseError

from ..errors import StoreError
from .db import check_db, default_db_path, migrations_dir, open_db, open_memory_db, resolve_url, upgrade_to_head
from .schema import (
    Acceptance,
    AcceptancePrompt,
    Base,
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
    "Continuation",
    "DatabaseError",
    "Engine",
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
    "open_db",
    "open_memory_db",
    "resolve_url",
    "upgrade_to_head",
]
