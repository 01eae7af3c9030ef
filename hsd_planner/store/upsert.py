"""Writes that many processes can make at once: ``INSERT ... ON CONFLICT`` on natural keys.

Every measured row has a unique natural key (a model spec, a hardware fingerprint, a pair on a
workload and setting, ...). Two profilers that store the same key at once, on one SQLite file or
on one PostgreSQL server from two machines, must leave one row, never two and never an error:
each write here is a single statement the database resolves against the key, using the
dialect's own insert (SQLite and PostgreSQL spell ``ON CONFLICT`` alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from .schema import Base
from .server import advisory_lock

__all__ = ["REGISTRY", "get_or_create", "insert_missing", "upsert"]

# the lock of the rows measurements refer to (hardware, models, workloads, settings): a process
# creating some takes it first, so two that create several in different orders never deadlock
REGISTRY = "hsd-plan registry"

T = TypeVar("T", bound=Base)


def _insert(bind: Session | Connection, cls: type[Base]) -> Any:
    """The INSERT of ``bind``'s dialect, which knows ON CONFLICT."""
    dialect = bind.dialect if isinstance(bind, Connection) else bind.get_bind().dialect
    module = postgresql if dialect.name == "postgresql" else sqlite
    return module.insert(cls)


def get_or_create(session: Session, cls: type[T], key: dict, **defaults: Any) -> T:
    """The row of ``cls`` matching ``key``, inserted (with ``defaults``) when missing.

    Race-free: when another process inserts the same key between the lookup and the insert, the
    insert does nothing and the lookup after it returns that process's row.
    """
    query = select(cls).filter_by(**key)
    row = session.scalars(query).first()
    if row is None:
        advisory_lock(session, REGISTRY)
        session.execute(_insert(session, cls).values(**key, **defaults).on_conflict_do_nothing(index_elements=list(key)))
        row = session.scalars(query).one()
    return row


def upsert(session: Session, cls: type[Base], key: dict, values: dict, touch: bool = True) -> None:
    """Store ``values`` under ``key``: a new row, or the stored row's values replaced, in one
    statement (the row keeps its id). With ``touch``, a ``created_at`` column is set to now either
    way, so the row dates from its newest measurement as a fresh row would."""
    stmt = _insert(session, cls).values(**key, **values)
    stamped = touch and "created_at" in cls.__table__.c and "created_at" not in values
    columns = list(values) + (["created_at"] if stamped else [])
    session.execute(stmt.on_conflict_do_update(index_elements=list(key), set_={c: stmt.excluded[c] for c in columns}))


def insert_missing(session: Session, cls: type[Base], rows: Sequence[dict], key: Sequence[str]) -> int:
    """Insert the ``rows`` whose ``key`` columns are not stored yet; return how many were inserted
    (a row another process stored meanwhile is skipped like one stored before)."""
    if not rows:
        return 0
    stmt = _insert(session, cls).on_conflict_do_nothing(index_elements=list(key)).returning(cls.__table__.c.id)
    return len(session.execute(stmt, list(rows)).all())
