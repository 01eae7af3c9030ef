"""Several writes that land together or not at all (``hsd-plan solve`` with its batch schedule
and export: a refusal of the export must not leave the solve stored)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from sqlalchemy import Engine

__all__ = ["all_or_nothing"]


@contextmanager
def all_or_nothing(db: Engine) -> Iterator[Engine]:
    """Yield a stand-in for ``db`` whose writes are committed when the block ends normally and
    rolled back when it raises.

    The stand-in is one connection inside one transaction: every store function opens its
    ``Session`` on what it is given, and a session bound to a connection already in a transaction
    joins it (SQLAlchemy's ``conservative_savepoint``: its own commit does not end the outer
    transaction). On SQLite that transaction holds the write lock from the start (BEGIN
    IMMEDIATE), so other writers wait for the block (up to the busy timeout), readers do not.
    """
    with db.connect() as conn, conn.begin():
        # a Connection is not an Engine, but Session(bind) takes either: that is all the store asks
        yield cast(Engine, conn)
