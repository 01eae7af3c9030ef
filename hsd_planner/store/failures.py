"""A database server's refusals and failures as one line a user can act on.

A driver's error (psycopg's, through SQLAlchemy) names the server, the port and a ``FATAL:``
before the server's own words; :func:`describe_error` keeps those words, turns the common ones
(wrong password, no such database or user, nothing listening, a timeout, a server that went
away) into what to fix, and removes every secret a driver's text may have echoed.
"""

from __future__ import annotations

import re

from sqlalchemy.engine import URL
from sqlalchemy.exc import InterfaceError, OperationalError

from ..errors import first_line
from .redaction import redact, shown
from .server import CONNECT_TIMEOUT_S, connect_timeout

__all__ = ["LOST", "describe_error", "describe_failure", "describe_lost"]

LOST = (OperationalError, InterfaceError)  # what a database that went away under a running command raises
# what psycopg puts before the server's own words: 'connection failed: connection to server at
# "10.0.0.5", port 5432 failed: FATAL:  ...'
_DRIVER_PREFIX = re.compile(
    r"^(?:(?:connection failed|connection is bad|consuming input failed|sending query(?: and params)? failed):\s*)?"
    r"(?:connection to server .*? failed:\s*)?(?:FATAL:\s*)?"
)


def describe_failure(url: URL, exc: BaseException) -> str:
    """One line for a server that refused or could not be reached, naming what to fix.

    >>> from sqlalchemy.engine import make_url
    >>> url = make_url("postgresql+psycopg://ann:pw@db.lan/team")
    >>> describe_failure(url, Exception('connection failed: connection to server at "10.0.0.5", port 5432 failed: '
    ...     'FATAL:  password authentication failed for user "ann"'))
    'cannot open postgresql://ann:***@db.lan/team: wrong password for user "ann" (fix the URL, PGPASSWORD or ~/.pgpass)'
    """
    return redact(f"cannot open {shown(url)}: {describe_error(exc, url)}", url)


def describe_lost(url: URL, exc: BaseException) -> str:
    """One line for a database that failed under a running command (a server that died or
    restarted, a network gone): what happened, and that what was committed stays.

    >>> from sqlalchemy.engine import make_url
    >>> describe_lost(make_url("postgresql+psycopg://ann@db.lan/team"),
    ...     Exception("consuming input failed: server closed the connection unexpectedly"))
    'lost the database postgresql://ann@db.lan/team mid-run: the server closed the connection (it stopped or restarted)'
    """
    return redact(f"lost the database {shown(url)} mid-run: {describe_error(exc, url)}", url)


def describe_error(exc: BaseException, url: URL | None = None) -> str:
    """What went wrong, in words a user can act on, from a driver's (first) error line; with every
    secret of ``url`` (and of any URL parsed before) removed, should the driver have echoed one."""
    return redact(_reason(exc, url), url)


def _reason(exc: BaseException, url: URL | None) -> str:
    """The words of :func:`describe_error`, before secrets are removed."""
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
        seconds = connect_timeout(url) if url is not None else CONNECT_TIMEOUT_S
        return f"the server did not answer within {seconds} s; is the host right and reachable?"
    if re.search(r"server closed the connection|terminating connection|connection is closed|the connection is lost", reason):
        return "the server closed the connection (it stopped or restarted)"
    return reason
