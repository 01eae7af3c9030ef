"""A database URL read by one set of rules: :func:`parse_url`, and nowhere else.

``--db`` (or ``$HSD_PLAN_DB``) names a team's PostgreSQL server as
``postgresql://user:password@host:port/name`` (``postgres://`` and ``postgresql+psycopg://`` too;
the driver is psycopg 3), or in libpq's keyword/value form, which :mod:`.conninfo` turns into
that URL before it is read like one. Every message shows the URL through
:func:`~.redaction.shown`. The rules, chosen so that hsd-plan, ``psql`` (libpq) and SQLAlchemy can
never read one URL three ways:

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
  answers. Without it every host gets :data:`~.server.CONNECT_TIMEOUT_S`.
- Secrets are masked from the parsed URL (:mod:`.redaction`): the password, and the value of
  every option whose name holds ``password``, ``passwd``, ``pwd``, ``secret`` or ``token``
  (``password``, ``sslpassword``). File options (``passfile``, ``sslkey``, ``sslcert``,
  ``sslrootcert``) name paths, not secrets, and are shown: a wrong path is then visible. A file
  option that names a FIFO or a device is refused: libpq would block reading it. Every secret
  parsed is remembered, so that a driver's words can be scrubbed of it where no URL is at hand.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from sqlalchemy.engine import URL

from ..errors import StoreError
from ..limits import MAX_CONNECT_TIMEOUT_S, MAX_HOSTS
from .redaction import MASK, is_secret_option, printable, remember, secret_spellings, shown, shown_query

__all__ = ["BACKENDS", "is_server", "normalize_url", "parse_url"]

BACKENDS = ("sqlite", "postgresql")  # the databases hsd-plan stores profiles in
DRIVER = "psycopg"  # psycopg 3; postgresql:// and postgres:// mean it
# options that name a file libpq reads (or writes: sslkeylogfile): a FIFO or a device there would
# block the open, with no timeout to end it
_FILE_OPTIONS = ("passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl", "sslcrldir", "sslkeylogfile")
_SCHEME_ALIASES = {"postgres": "postgresql"}


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
            auth = f"{unquote(user)}{':' + MASK if sep else ''}@"
        path = "" if self.path is None else "/" + unquote(self.path)
        return printable(f"{self.scheme}://{auth}{unquote(self.hostport)}{path}{shown_query(self.query)}")


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
    remember(_secret_forms(parts))
    return normalize_url(_build(parts))  # refuses another backend than SQLite or PostgreSQL


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
    if problem := _check_plain_host(hostport, f"'{host}:{MASK}'", echo_port=False):
        parts.hostport = f"{host}:{MASK}"
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
    return secret_spellings([*([written] if written is not None else []), *values])


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
