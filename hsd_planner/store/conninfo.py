"""libpq's keyword/value connection strings (``host=db user=ann dbname=team``) as database URLs.

A ``--db`` in that form (:func:`is_conninfo`) is turned into the URL of the same connection
(:func:`conninfo_url`) and then read by :func:`~.urls.parse_url`, its rules and its masking.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from sqlalchemy.engine import URL

from ..errors import StoreError
from .urls import parse_url

__all__ = ["LIBPQ_KEYWORDS", "conninfo_url", "is_conninfo"]


# libpq's connection keywords (PostgreSQL 18's PQconninfoOptions, internal ones left out): a --db
# that starts with one of them and '=' is a keyword/value connection string, not a file path
LIBPQ_KEYWORDS = frozenset((
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode", "sslnegotiation",
    "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni",
    "sslkeylogfile", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version", "min_protocol_version",
    "max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
    "oauth_issuer", "oauth_client_id", "oauth_client_secret", "oauth_scope",
))  # fmt: skip
_CONNINFO_WORD = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=")


def is_conninfo(text: str) -> bool:
    """Whether ``text`` is libpq's keyword/value form (``host=db user=ann dbname=team``): it starts
    with a word and ``=``, and a keyword libpq knows comes first or after a blank (so that a
    mistyped first keyword, ``passwrod=...``, is refused as one, never shown as a file name).

    >>> [is_conninfo(t) for t in ("host=db dbname=team", " dbname = team", "pw=x host=db", "hosts=1.db", "runs/host=db.sqlite")]
    [True, True, True, False, False]
    """
    words = [m[1] for m in _CONNINFO_WORD.finditer(text)]
    return _CONNINFO_WORD.match(text.lstrip()) is not None and any(w in LIBPQ_KEYWORDS for w in words)


def _conninfo_pairs(text: str) -> list[tuple[str, str]]:
    """``keyword = value`` pairs of a connection string, read as libpq reads them: a value is a run
    of non-blank characters or a single-quoted string, ``\\`` escaping the next character in
    either. A ValueError names what is wrong; no message quotes a value (it may be a password)."""
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return pairs
        start = i
        while i < n and not text[i].isspace() and text[i] != "=":
            i += 1
        keyword = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if i == n or text[i] != "=" or not keyword:
            raise ValueError("every word must be keyword=value (a value with spaces goes in single quotes)")
        if keyword not in LIBPQ_KEYWORDS:
            raise ValueError(
                f"{keyword!r} is not a libpq connection keyword" if keyword.isidentifier() else "a keyword is not one of libpq's"
            )
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        quoted = i < n and text[i] == "'"
        i += quoted
        while i < n and (text[i] != "'" if quoted else not text[i].isspace()):
            if text[i] == "\\" and i + 1 < n:
                i += 1
            value.append(text[i])
            i += 1
        if quoted:
            if i == n:
                raise ValueError(f"the quoted value of {keyword} has no closing quote")
            i += 1
        pairs.append((keyword, "".join(value)))


def conninfo_url(text: str, source: str = "--db") -> URL:
    """libpq's keyword/value connection string ``text`` as the URL of the same connection, read by
    :func:`parse_url` (its rules, its masking): ``host``, ``port``, ``user``, ``password`` and
    ``dbname`` go where a URL names them, every other keyword becomes an option. A keyword given
    twice, or one libpq does not know, is refused; no message repeats the text (it holds a password).

    >>> url = conninfo_url("host=db.lan port=5433 user=ann password='Zq9 @Wv' dbname=team sslmode=require")
    >>> (url.username, url.password, url.host, url.port, url.database, dict(url.query))
    ('ann', 'Zq9 @Wv', 'db.lan', 5433, 'team', {'sslmode': 'require'})
    >>> from hsd_planner.store.redaction import shown
    >>> shown(conninfo_url("host=/run/postgresql user=ann dbname=team password=s3cret"))
    'postgresql://ann:***@/team?host=/run/postgresql'
    """
    try:
        pairs = _conninfo_pairs(text)
    except ValueError as exc:
        raise StoreError(f"{source} reads as a libpq connection string (keyword=value ...), but {exc}") from None
    names = [k for k, _ in pairs]
    if twice := sorted({k for k in names if names.count(k) > 1}):
        raise StoreError(f"{source}: the connection keyword {twice[0]!r} is given more than once; give it once")
    options = dict(pairs)
    if not options.get("dbname"):
        raise StoreError(f"{source} names no database; add dbname=NAME to the connection string")
    host, port = options.pop("host", ""), options.pop("port", "")
    if "," in host or host.startswith("/") or (port and not host):
        options = {**({"host": host} if host else {}), **({"port": port} if port else {}), **options}  # as options, as libpq lists them
        host = port = ""
    elif ":" in host:
        host = f"[{host}]"  # an IPv6 address
    user, password = options.pop("user", None), options.pop("password", None)
    auth = ""
    if user is not None or password is not None:
        auth = quote(user or "", safe="") + ("" if password is None else ":" + quote(password, safe="")) + "@"
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in options.items() if k != "dbname")
    hostport = quote(host, safe="[]:") + (f":{port}" if port else "")
    return parse_url(f"postgresql://{auth}{hostport}/{quote(options['dbname'], safe='')}" + (f"?{query}" if query else ""), source)
