"""A PostgreSQL server as the profiling database: its connection settings and its locks.

A team keeps one database on a server that many machines profile into; the database itself must
exist (``createdb``), hsd-plan creates and migrates its tables. What differs from SQLite on one
disk: every host of a URL gets a bounded time to answer (:func:`connect_timeout`,
:func:`connect_args`), and concurrent writers take advisory locks (:func:`advisory_lock`) where
SQLite's single writer needs none. Its URL is read by :mod:`.urls` (:mod:`.conninfo` for libpq's
keyword/value form), shown by :mod:`.redaction`, and its refusals described by :mod:`.failures`.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from .urls import is_server

__all__ = ["CONNECT_TIMEOUT_S", "advisory_lock", "connect_args", "connect_timeout"]

CONNECT_TIMEOUT_S = 10  # an unreachable host fails after this long instead of the system's minutes
MIN_CONNECT_TIMEOUT_S = 2  # libpq (and psycopg) raise a shorter connect_timeout to this


def connect_timeout(url: URL) -> int:
    """How many seconds one host of ``url`` is given to answer: its ``connect_timeout`` (checked
    by :func:`~.urls.parse_url`), else :data:`CONNECT_TIMEOUT_S`; at least 2, as libpq and psycopg raise it."""
    value = url.query.get("connect_timeout")
    seconds = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else CONNECT_TIMEOUT_S
    return max(seconds, MIN_CONNECT_TIMEOUT_S)


def connect_args(url: URL) -> dict:
    """Connection options hsd-plan adds unless the URL sets them: a connect timeout, and its name
    in the server's list of sessions (``pg_stat_activity``).

    The timeout bounds each host's whole connection, a server that accepts and never answers
    included: psycopg enforces it over the handshake (SSL, authentication), not only the TCP connect.
    """
    if not is_server(url):
        return {}
    args: dict = {}
    if "connect_timeout" not in url.query:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in url.query:
        args["application_name"] = "hsd-plan"
    return args


def advisory_lock(bind: Session | Connection, *key: object) -> None:
    """Hold the server-wide lock named by ``key`` until the current transaction ends (PostgreSQL);
    nothing on SQLite, whose writers queue for the whole file (BEGIN IMMEDIATE) anyway.

    Used where two writers would otherwise read, compute and write the same thing at once: a
    migration, and a pair's pooled acceptance, which each writer recomputes from all prompts.
    """
    dialect = bind.dialect if isinstance(bind, Connection) else bind.get_bind().dialect
    if dialect.name != "postgresql":
        return
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    bind.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": int.from_bytes(digest, "big", signed=True)})
