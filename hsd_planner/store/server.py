"""A PostgreSQL server as the profiling database: its URL, its connection, its errors, its locks.

A team keeps one database on a server that many machines profile into. ``--db`` (or
``$HSD_PLAN_DB``) names it as ``postgresql://user:password@host:port/name`` (``postgres://``
and ``postgresql+psycopg://`` too; the driver is psycopg 3). The database itself must exist
(``createdb``); hsd-plan creates and migrates its tables. Everything that differs from SQLite on
one disk lives here: concurrent writers take advisory locks (:func:`advisory_lock`) where SQLite's
single writer needs none, and a server's refusals become one line a user can act on
(:func:`describe_failure`).
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from ..errors import StoreError, first_line

__all__ = [
    "BACKENDS",
    "CONNECT_TIMEOUT_S",
    "advisory_lock",
    "connect_args",
    "describe_error",
    "describe_failure",
    "describe_lost",
    "is_server",
    "normalize_url",
    "shown",
]

BACKENDS = ("sqlite", "postgresql")  # the databases hsd-plan stores profiles in
DRIVER = "psycopg"  # psycopg 3; postgresql:// and postgres:// mean it
CONNECT_TIMEOUT_S = 10  # an unreachable host fails after this long instead of the system's minutes
_SCHEME_ALIASES = {"postgres": "postgresql"}
LOST = (OperationalError, InterfaceError)  # what a database that went away under a running command raises
# what psycopg puts before the server's own words: 'connection failed: connection to server at
# "10.0.0.5", port 5432 failed: FATAL:  ...'
_DRIVER_PREFIX = re.compile(
    r"^(?:(?:connection failed|connection is bad|consuming input failed|sending query(?: and params)? failed):\s*)?"
    r"(?:connection to server .*? failed:\s*)?(?:FATAL:\s*)?"
)


def normalize_url(url: URL) -> URL:
    """``url`` with a plain ``postgresql://`` (or ``postgres://``) set to psycopg; other backends
    than SQLite and PostgreSQL refused.

    >>> from sqlalchemy.engine import make_url
    >>> normalize_url(make_url("postgres://ann@db.lan/team")).drivername
    'postgresql+psycopg'
    """
    backend, _, driver = url.drivername.partition("+")
    backend = _SCHEME_ALIASES.get(backend, backend)
    if backend not in BACKENDS:
        raise StoreError(
            f"cannot use {url.render_as_string(hide_password=True)}: hsd-plan stores profiles in SQLite (a file path) "
            f"or PostgreSQL (postgresql://user:password@host/name), not {backend}"
        )
    if backend == "postgresql":
        return url.set(drivername=f"postgresql+{driver or DRIVER}")
    return url


def is_server(url: URL) -> bool:
    """Whether ``url`` names a database server (PostgreSQL) rather than an SQLite file."""
    return url.get_backend_name() == "postgresql"


def shown(url: URL) -> str:
    """``url`` as messages show it: the password masked, the driver left out, a socket folder
    readable (``?host=/run/postgresql``, not ``%2Frun%2Fpostgresql``)."""
    return unquote(url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True))


def connect_args(url: URL) -> dict:
    """Connection options hsd-plan adds unless the URL sets them: a connect timeout, and its name
    in the server's list of sessions (``pg_stat_activity``)."""
    if not is_server(url):
        return {}
    args: dict = {}
    if "connect_timeout" not in url.query:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in url.query:
        args["application_name"] = "hsd-plan"
    return args


def describe_failure(url: URL, exc: BaseException) -> str:
    """One line for a server that refused or could not be reached, naming what to fix.

    >>> from sqlalchemy.engine import make_url
    >>> url = make_url("postgresql+psycopg://ann:pw@db.lan/team")
    >>> describe_failure(url, Exception('connection failed: connection to server at "10.0.0.5", port 5432 failed: '
    ...     'FATAL:  password authentication failed for user "ann"'))
    'cannot open postgresql://ann:***@db.lan/team: wrong password for user "ann" (fix the URL, PGPASSWORD or ~/.pgpass)'
    """
    return f"cannot open {shown(url)}: {describe_error(exc)}"


def describe_lost(url: URL, exc: BaseException) -> str:
    """One line for a database that failed under a running command (a server that died or
    restarted, a network gone): what happened, and that what was committed stays.

    >>> from sqlalchemy.engine import make_url
    >>> describe_lost(make_url("postgresql+psycopg://ann@db.lan/team"),
    ...     Exception("consuming input failed: server closed the connection unexpectedly"))
    'lost the database postgresql://ann@db.lan/team mid-run: the server closed the connection (it stopped or restarted)'
    """
    return f"lost the database {shown(url)} mid-run: {describe_error(exc)}"


def describe_error(exc: BaseException) -> str:
    """What went wrong, in words a user can act on, from a driver's (first) error line."""
    reason = _DRIVER_PREFIX.sub("", first_line(exc)).strip()
    if m := re.search(r'password authentication failed for user "([^"]*)"', reason):
        return f'wrong password for user "{m[1]}" (fix the URL, PGPASSWORD or ~/.pgpass)'
    if "no password supplied" in reason:
        return "the server asks for a password; put it in the URL (postgresql://user:password@host/name), PGPASSWORD or ~/.pgpass"
    if m := re.search(r'database "([^"]*)" does not exist', reason):
        return f"the server has no database {m[1]}; create it first (createdb {m[1]}) or fix the URL"
    if m := re.search(r'role "([^"]*)" does not exist', reason):
        return f'the server has no user "{m[1]}"; fix the user in the URL'
    if re.search(r"Connection refused|No such file or directory|could not translate host name|Name or service not known", reason):
        return f"no database server answers there ({reason}); is it running, and are host and port right?"
    if "timeout expired" in reason:
        return f"the server did not answer within {CONNECT_TIMEOUT_S} s; is the host right and reachable?"
    if re.search(r"server closed the connection|terminating connection|connection is closed|the connection is lost", reason):
        return "the server closed the connection (it stopped or restarted)"
    return reason


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
