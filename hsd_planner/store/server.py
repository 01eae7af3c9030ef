"""A PostgreSQL server as the profiling database: its URL, its connection, its errors, its locks.

A team keeps one database on a server that many machines profile into. ``--db`` (or
``$HSD_PLAN_DB``) names it as ``postgresql://user:password@host:port/name`` (``postgres://``
and ``postgresql+psycopg://`` too; the driver is psycopg 3), or in libpq's keyword/value form
(``host=db user=ann password=... dbname=team``), which :func:`conninfo_url` turns into that URL
before it is read like one. The database itself must exist
(``createdb``); hsd-plan creates and migrates its tables. Everything that differs from SQLite on
one disk lives here: concurrent writers take advisory locks (:func:`advisory_lock`) where SQLite's
single writer needs none, and a server's refusals become one line a user can act on
(:func:`describe_failure`).

The URL is read here, by :func:`parse_url`, and nowhere else; every message shows it through
:func:`shown`. The rules, chosen so that hsd-plan, ``psql`` (libpq) and SQLAlchemy can never read
one URL three ways:

- An ``@`` may appear once, between the user name and password and the host. An ``@``, ``/`` or
  ``?`` inside the user name, the password, the database name or an option is written
  percent-encoded (``%40``, ``%2F``, ``%3F``); otherwise readers disagree on where the password
  ends (libpq and SQLAlchemy split ``alice:Zq9@Wv@host`` at the first ``@``, RFC 3986 at the
  last), so such a URL is refused, and its message shows nothing after the scheme. ``:``, ``#``,
  ``[`` and ``]`` need no encoding in a password (``#`` is no fragment: libpq has none), nor does
  a ``%`` that starts no ``%XX`` escape.
- A port is a whole number from 1 to 65535; an IPv6 address is written in brackets
  (``[::1]:5432``); several hosts are named as options (``?host=h1:5432&host=h2:5432``, at most
  :data:`MAX_HOSTS`), not as ``h1,h2`` in place of the host; an option is given once (``host``
  aside).
- ``connect_timeout`` is a whole number of seconds from 1 to :data:`MAX_CONNECT_TIMEOUT_S`:
  libpq reads 0 (or less) as "wait forever", which would hang on a host that accepts and never
  answers. Without it every host gets :data:`CONNECT_TIMEOUT_S`.
- Secrets are masked from the parsed URL: the password, and the value of every option whose name
  holds ``password``, ``passwd``, ``pwd``, ``secret`` or ``token`` (``password``,
  ``sslpassword``). File options (``passfile``, ``sslkey``, ``sslcert``, ``sslrootcert``) name
  paths, not secrets, and are shown: a wrong path is then visible. A file option that names a FIFO
  or a device is refused: libpq would block reading it. As a last defence every message
  built here has each secret of length :data:`MIN_SCRUB_LEN` or more removed from it, as given and
  percent-encoded or decoded, wherever a driver's text might have echoed it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from ..errors import StoreError, first_line
from ..limits import MAX_CONNECT_TIMEOUT_S, MAX_HOSTS

__all__ = [
    "BACKENDS",
    "CONNECT_TIMEOUT_S",
    "LIBPQ_KEYWORDS",
    "MAX_CONNECT_TIMEOUT_S",
    "MAX_HOSTS",
    "advisory_lock",
    "connect_args",
    "connect_timeout",
    "conninfo_url",
    "describe_error",
    "describe_failure",
    "describe_lost",
    "is_conninfo",
    "is_secret_option",
    "is_server",
    "normalize_url",
    "parse_url",
    "redact",
    "shown",
]

BACKENDS = ("sqlite", "postgresql")  # the databases hsd-plan stores profiles in
DRIVER = "psycopg"  # psycopg 3; postgresql:// and postgres:// mean it
CONNECT_TIMEOUT_S = 10  # an unreachable host fails after this long instead of the system's minutes
MIN_CONNECT_TIMEOUT_S = 2  # libpq (and psycopg) raise a shorter connect_timeout to this
MIN_SCRUB_LEN = 4  # shorter secrets match ordinary words; removing them would garble every message
_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token")  # option names that hold a secret
_MASK = "***"
# options that name a file libpq reads (or writes: sslkeylogfile): a FIFO or a device there would
# block the open, with no timeout to end it
_FILE_OPTIONS = ("passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslcrldir", "sslkeylogfile")
_SCHEME_ALIASES = {"postgres": "postgresql"}
LOST = (OperationalError, InterfaceError)  # what a database that went away under a running command raises
# what psycopg puts before the server's own words: 'connection failed: connection to server at
# "10.0.0.5", port 5432 failed: FATAL:  ...'
_DRIVER_PREFIX = re.compile(
    r"^(?:(?:connection failed|connection is bad|consuming input failed|sending query(?: and params)? failed):\s*)?"
    r"(?:connection to server .*? failed:\s*)?(?:FATAL:\s*)?"
)


# every secret of a URL parsed in this process: redact removes them where no URL is at hand (a
# database that failed mid-command, reported by the command line's catch-all)
_SEEN_SECRETS: set[str] = set()


@dataclass
class _Parts:
    """A URL cut into its raw (still percent-encoded) pieces, before any of them is trusted."""

    scheme: str
    userinfo: str | None  # "user:password" as written, None without an "@"
    hostport: str  # "host:port" or "[v6]:port" as written
    path: str | None  # the database name as written, None without a "/"
    query: list[tuple[str, str]] = field(default_factory=list)  # decoded pairs, in order

    @property
    def password(self) -> str | None:
        """The password, decoded (None: the URL gives none; "" is an empty one)."""
        if self.userinfo is None or ":" not in self.userinfo:
            return None
        return unquote(self.userinfo.partition(":")[2])

    def shown(self) -> str:
        """The URL as messages show it, built from the pieces: secrets masked, as :func:`shown`."""
        auth = ""
        if self.userinfo is not None:
            user, sep, _ = self.userinfo.partition(":")
            auth = f"{unquote(user)}{':' + _MASK if sep else ''}@"
        path = "" if self.path is None else "/" + unquote(self.path)
        return _printable(f"{self.scheme}://{auth}{unquote(self.hostport)}{path}{_shown_query(self.query)}")


def is_secret_option(name: str) -> bool:
    """Whether the URL option ``name`` holds a secret that no message may show.

    >>> [is_secret_option(n) for n in ("password", "sslpassword", "api_token", "passfile", "sslkey", "host")]
    [True, True, True, False, False, False]
    """
    return any(word in name.lower() for word in _SECRET_WORDS)


def parse_url(text: str, source: str = "--db") -> URL:
    """The database URL ``text`` (``scheme://user:password@host:port/name?option=value``) read by
    the rules of this module, for any backend but SQLite, with psycopg set as the driver.

    Every refusal is one :class:`StoreError` line that starts with ``source`` (the option or
    variable the URL came from) and shows the URL with its secrets masked.

    >>> url = parse_url("postgresql://alice:Zq9%40Wv@[::1]:5433/team?sslpassword=k3y&host=h1:1&host=h2")
    >>> (url.drivername, url.username, url.password, url.host, url.port, url.database, url.query["host"])
    ('postgresql+psycopg', 'alice', 'Zq9@Wv', '::1', 5433, 'team', ('h1:1', 'h2'))
    >>> def refusal(text):
    ...     try:
    ...         parse_url(text)
    ...     except StoreError as exc:
    ...         return str(exc)
    >>> refusal("postgresql://alice:Zq9@Wv@127.0.0.1/team")[:64]
    "--db postgresql://…: an '@' may appear only once, between the us"
    >>> refusal("postgresql://alice:pw@127.0.0.1:abc/team?password=pw2")
    "--db postgresql://alice:***@127.0.0.1:abc/team?password=***: port 'abc' is not a whole number from 1 to 65535"
    >>> refusal("postgresql://alice:pw@127.0.0.1/team?connect_timeout=0")
    "--db postgresql://alice:***@127.0.0.1/team?connect_timeout=0: connect_timeout '0' is not a whole number of seconds from 1 to 600 (0 or less waits forever)"
    """
    scheme, _, rest = text.partition("://")
    parts = _split(scheme, rest, source)
    _SEEN_SECRETS.update(_secret_forms(parts))
    return normalize_url(_build(parts))  # refuses another backend than SQLite or PostgreSQL


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
    pairs, i, n = [], 0, len(text)
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


def _split(scheme: str, rest: str, source: str) -> _Parts:
    """``rest`` (the URL after ``scheme://``) cut into its pieces, each checked."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority = rest[:end]
    ats = authority.count("@")
    if ats > 1 or rest.count("@") != ats:
        # the password's end is unclear, so no piece of the text can be shown safely
        raise StoreError(
            f"{source} {scheme}://…: an '@' may appear only once, between the user name and password and the host; "
            "write an '@', '/' or '?' inside the user name, password, database name or an option as %40, %2F or %3F"
        )
    userinfo, _, hostport = authority.rpartition("@") if ats else (None, "", authority)
    path, query = None, ""
    if rest[end:].startswith("/"):
        path, _, query = rest[end + 1 :].partition("?")
    elif rest[end:].startswith("?"):
        query = rest[end + 1 :]
    parts = _Parts(scheme, userinfo, hostport, path, parse_qsl(query))
    for check in (_check_text, _check_host, _check_query, _check_files):
        if problem := check(parts):
            raise StoreError(f"{source} {parts.shown()}: {problem}")
    return parts


def _check_text(parts: _Parts) -> str | None:
    """A NUL anywhere: libpq takes C strings, which end at the first NUL."""
    pieces = [parts.userinfo or "", parts.hostport, parts.path or "", *(kv for pair in parts.query for kv in pair)]
    if any("\x00" in unquote(piece) for piece in pieces):
        return "the URL holds a NUL character (%00), which no connection option can carry"
    return None


def _check_host(parts: _Parts) -> str | None:
    """The host and port in place of ``host:port``: what is wrong with them, or None."""
    hostport = parts.hostport
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            return f"the IPv6 address {hostport!r} has no closing ']' (write [::1]:5432)"
        host, after = hostport[1:close], hostport[close + 1 :]
        if after and not after.startswith(":"):
            return f"{after!r} follows the IPv6 address [{host}]; only ':port' may (write [::1]:5432)"
        try:
            ipaddress.IPv6Address(unquote(host).partition("%")[0])  # a zone (fe80::1%25eth0) may follow
        except ValueError:
            return f"[{host}] is not an IPv6 address; brackets hold only one ([::1]:5432)"
        return _check_port(after[1:] if after else None)
    host, colon, _ = hostport.partition(":")
    if parts.userinfo is not None or not colon:
        return _check_plain_host(hostport, repr(hostport))
    # without an '@', "user:password/name" reads as "host:port": what follows the ':' may be a
    # password, so neither the message nor the URL it shows may repeat it
    if problem := _check_plain_host(hostport, f"'{host}:{_MASK}'", echo_port=False):
        parts.hostport = f"{host}:{_MASK}"
        return f"{problem} (a password goes before an '@': user:password@host)"
    return None


def _check_plain_host(hostport: str, written: str, echo_port: bool = True) -> str | None:
    """What is wrong with ``host:port`` (no brackets), or None; messages quote it as ``written``."""
    host, colon, port = hostport.partition(":")
    if "," in hostport:
        return f"several hosts ({written}) go into options, not in place of the host: ?host=h1:5432&host=h2:5432"
    if any(c in hostport for c in "[]"):
        return f"the host {written} holds a '[' or ']', which only enclose an IPv6 address ([::1]:5432)"
    if ":" in port:
        return f"the host {written} holds more than one ':'; write an IPv6 address in brackets ([::1]:5432)"
    if any(c.isspace() or not c.isprintable() for c in unquote(host)):
        return f"the host {unquote(host)!r} holds a space or a control character"
    if colon and (problem := _check_port(port)):
        return problem if echo_port else "the port is not a whole number from 1 to 65535"
    return None


def _check_port(port: str | None, what: str = "port") -> str | None:
    """What is wrong with a port as written (None or "": the default, 5432), or None."""
    if not port:
        return None
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        return f"{what} {port!r} is not a whole number from 1 to 65535"
    return None


def _check_query(parts: _Parts) -> str | None:
    """The options: each given once (``host`` aside), ``host``/``port`` lists well formed and not
    too long, ``connect_timeout`` bounded."""
    names = [k for k, _ in parts.query]
    if twice := sorted({k for k in names if names.count(k) > 1 and k != "host"}):
        return f"the option {twice[0]!r} is given more than once; give it once"
    options = dict(parts.query)
    # libpq pairs the n-th hostaddr with the n-th host: the longer list is the number of hosts
    hosts = max(sum(len(v.split(",")) for k, v in parts.query if k == name) for name in ("host", "hostaddr"))
    if hosts > MAX_HOSTS:
        return f"{hosts} hosts: at most {MAX_HOSTS} (each may wait connect_timeout seconds)"
    for value in (v for k, v in parts.query if k == "host"):
        for piece in value.split(","):  # a socket folder (/run/postgresql) holds no port
            if not piece.startswith("/") and ":" in piece and (problem := _check_port(piece.rpartition(":")[2], "the host's port")):
                return problem
    for piece in options.get("port", "").split(","):
        if problem := _check_port(piece, "the port option"):
            return problem
    if "connect_timeout" in options:
        return _check_timeout(options["connect_timeout"])
    return None


def _check_files(parts: _Parts) -> str | None:
    """A file option that names something other than a file (or, for ``sslcrldir``, a folder):
    reading a FIFO would wait for a writer forever. A path that does not exist is libpq's to report."""
    for name, path in parts.query:
        if name not in _FILE_OPTIONS:
            continue
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):  # missing, unreadable, or no path at all (sslrootcert=system)
            continue
        if not (stat.S_ISREG(mode) or (name == "sslcrldir" and stat.S_ISDIR(mode))):
            return f"{name} {path!r} is not a regular file; name the file itself"
    return None


def _check_timeout(value: str) -> str | None:
    """What is wrong with a ``connect_timeout`` as written, or None: 0 and less mean "wait
    forever" to libpq, so only 1 to :data:`MAX_CONNECT_TIMEOUT_S` seconds pass."""
    if value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_CONNECT_TIMEOUT_S:
        return None
    try:
        forever = " (0 or less waits forever)" if float(value) <= 0 else ""
    except ValueError:
        forever = ""
    return f"connect_timeout {value!r} is not a whole number of seconds from 1 to {MAX_CONNECT_TIMEOUT_S}{forever}"


def _build(parts: _Parts) -> URL:
    """The SQLAlchemy URL of checked ``parts`` (no text of it is parsed again)."""
    user = (parts.userinfo or "").partition(":")[0]
    if parts.hostport.startswith("["):
        host, _, port = parts.hostport[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = parts.hostport.partition(":")
    return URL.create(
        parts.scheme,
        username=unquote(user) or None,
        password=parts.password,
        host=unquote(host) or None,
        port=int(port) if port else None,
        database=unquote(parts.path) if parts.path else None,
        query=_query(parts.query),
    )


def _query(pairs: list[tuple[str, str]]) -> dict[str, str | tuple[str, ...]]:
    """The options as SQLAlchemy keeps them: a repeated one (``host``) as a tuple, in order."""
    grouped: dict[str, list[str]] = {}
    for k, v in pairs:
        grouped.setdefault(k, []).append(v)
    return {k: vs[0] if len(vs) == 1 else tuple(vs) for k, vs in grouped.items()}


def _secret_forms(parts: _Parts) -> set[str]:
    """Every spelling of the secrets of ``parts``, the password as written included."""
    written = parts.userinfo.partition(":")[2] if parts.userinfo is not None and ":" in parts.userinfo else None
    values = [v for k, v in parts.query if is_secret_option(k)]
    return _spellings([*([written] if written is not None else []), *values])


def _spellings(secrets: Iterable[str]) -> set[str]:
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
    return _spellings(values)


def redact(message: str, url: URL | None = None) -> str:
    """``message`` with every secret of ``url`` (without one: of every URL parsed in this process)
    replaced by ``***``: the last defence for a driver's words that may have echoed a connection string.

    >>> from sqlalchemy.engine import make_url
    >>> redact('invalid dsn: "password=Zq9@Wv host=db"', make_url("postgresql://ann:Zq9%40Wv@db/team"))
    'invalid dsn: "password=*** host=db"'
    """
    secrets = url_secrets(url) if url is not None else _SEEN_SECRETS
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: a secret may hold another
        message = message.replace(secret, _MASK)
    return message


def _printable(text: str) -> str:
    """``text`` on one line: a control character (a newline in a database name) percent-encoded."""
    return "".join(c if c.isprintable() else quote(c) for c in text)


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
            f"cannot use {shown(url)}: hsd-plan stores profiles in SQLite (a file path) "
            f"or PostgreSQL (postgresql://user:password@host/name), not {backend}"
        )
    if backend == "postgresql":
        return url.set(drivername=f"postgresql+{driver or DRIVER}")
    return url


def is_server(url: URL) -> bool:
    """Whether ``url`` names a database server (PostgreSQL) rather than an SQLite file."""
    return url.get_backend_name() == "postgresql"


def shown(url: URL) -> str:
    """``url`` as messages show it, on one line: the password and every secret option masked, the
    driver left out, a socket folder readable (``?host=/run/postgresql``, not ``%2Frun%2Fpostgresql``).

    >>> from sqlalchemy.engine import make_url
    >>> shown(make_url("postgresql+psycopg://ann:pw@db.lan/team?sslpassword=k&host=%2Frun%2Fpg&passfile=%2Fhome%2Fann%2F.pgpass"))
    'postgresql://ann:***@db.lan/team?sslpassword=***&host=/run/pg&passfile=/home/ann/.pgpass'
    """
    base = url.set(drivername=url.get_backend_name(), query={}).render_as_string(hide_password=True)
    pairs = [(k, v) for k, vs in url.query.items() for v in ((vs,) if isinstance(vs, str) else vs)]
    return _printable(unquote(base) + _shown_query(pairs))


def _shown_query(pairs: Iterable[tuple[str, str]]) -> str:
    """``?k=v&...`` as messages show options: decoded, each secret one masked; "" for none."""
    query = "&".join(f"{k}={_MASK if is_secret_option(k) else v}" for k, v in pairs)
    return "?" + query if query else ""


def connect_timeout(url: URL) -> int:
    """How many seconds one host of ``url`` is given to answer: its ``connect_timeout`` (checked
    by :func:`parse_url`), else :data:`CONNECT_TIMEOUT_S`; at least 2, as libpq and psycopg raise it."""
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
