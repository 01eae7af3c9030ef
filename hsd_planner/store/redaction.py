"""Secrets kept out of every message about a database URL: masked where a URL is shown,
removed where a driver's words might have echoed them.

A URL is shown (:func:`shown`) with its password and the value of every option whose name holds
``password``, ``passwd``, ``pwd``, ``secret`` or ``token`` masked (:func:`is_secret_option`);
file options (``passfile``, ``sslkey``, ...) name paths, not secrets, and are shown. As a last
defence every message built from a driver's text has each secret of length
:data:`MIN_SCRUB_LEN` or more removed from it (:func:`redact`), as given and percent-encoded or
decoded.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote

from sqlalchemy.engine import URL

__all__ = [
    "MASK",
    "MIN_SCRUB_LEN",
    "is_secret_option",
    "printable",
    "redact",
    "remember",
    "secret_spellings",
    "shown",
    "shown_query",
    "url_secrets",
]

MIN_SCRUB_LEN = 4  # shorter secrets match ordinary words; removing them would garble every message
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token")  # option names that hold a secret
MASK = "***"

# every secret of a URL parsed in this process: redact removes them where no URL is at hand (a
# database that failed mid-command, reported by the command line's catch-all)
_SEEN_SECRETS: set[str] = set()


def is_secret_option(name: str) -> bool:
    """Whether the URL option ``name`` holds a secret that no message may show.

    >>> [is_secret_option(n) for n in ("password", "sslpassword", "api_token", "passfile", "sslkey", "host")]
    [True, True, True, False, False, False]
    """
    return any(word in name.lower() for word in _SECRET_WORDS)


def secret_spellings(secrets: Iterable[str]) -> set[str]:
    """``secrets`` and their encoded forms, the ones long enough to scrub: as given, decoded,
    percent-encoded (quote, quote_plus), escaped as Python's repr and libpq's conninfo write it."""
    forms: set[str] = set()
    for s in secrets:
        conninfo = s.replace("\\", "\\\\").replace("'", "\\'")
        forms.update((s, unquote(s), quote(s, safe=""), quote(s), quote_plus(s), s.encode("unicode_escape").decode("ascii"), conninfo))
    return {f for f in forms if len(f) >= MIN_SCRUB_LEN}


def url_secrets(url: URL) -> set[str]:
    """The secrets of ``url`` (its password, its secret options) in every spelling :func:`redact` removes."""
    values = [url.password] if isinstance(url.password, str) else []
    for k, v in url.query.items():
        if is_secret_option(k):
            values.extend([v] if isinstance(v, str) else v)
    return secret_spellings(values)


def redact(message: str, url: URL | None = None) -> str:
    """``message`` with every secret of ``url`` (without one: of every URL parsed in this process)
    replaced by ``***``: the last defence for a driver's words that may have echoed a connection string.

    >>> from sqlalchemy.engine import make_url
    >>> redact('invalid dsn: "password=Zq9@Wv host=db"', make_url("postgresql://ann:Zq9%40Wv@db/team"))
    'invalid dsn: "password=*** host=db"'
    """
    secrets = url_secrets(url) if url is not None else _SEEN_SECRETS
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: a secret may hold another
        message = message.replace(secret, MASK)
    return message


def printable(text: str) -> str:
    """``text`` on one line: a control character (a newline in a database name) percent-encoded."""
    return "".join(c if c.isprintable() else quote(c) for c in text)


def shown(url: URL) -> str:
    """``url`` as messages show it, on one line: the password and every secret option masked, the
    driver left out, a socket folder readable (``?host=/run/postgresql``, not ``%2Frun%2Fpostgresql``).

    >>> from sqlalchemy.engine import make_url
    >>> shown(make_url("postgresql+psycopg://ann:pw@db.lan/team?sslpassword=k&host=%2Frun%2Fpg&passfile=%2Fhome%2Fann%2F.pgpass"))
    'postgresql://ann:***@db.lan/team?sslpassword=***&host=/run/pg&passfile=/home/ann/.pgpass'
    """
    base = url.set(drivername=url.get_backend_name(), query={}).render_as_string(hide_password=True)
    pairs = [(k, v) for k, vs in url.query.items() for v in ((vs,) if isinstance(vs, str) else vs)]
    return printable(unquote(base) + shown_query(pairs))


def shown_query(pairs: Iterable[tuple[str, str]]) -> str:
    """``?k=v&...`` as messages show options: decoded, each secret one masked; "" for none."""
    query = "&".join(f"{k}={MASK if is_secret_option(k) else v}" for k, v in pairs)
    return "?" + query if query else ""


def remember(secrets: Iterable[str]) -> None:
    """Keep ``secrets`` (every spelling, :func:`secret_spellings`) for :func:`redact` without a URL."""
    _SEEN_SECRETS.update(secrets)
