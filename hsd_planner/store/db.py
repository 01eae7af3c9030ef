"""Opening the profiling database: URL resolution, SQLite settings, migrations to head.

``--db`` takes a path or an SQLAlchemy URL; without it, ``$HSD_PLAN_DB``; without that,
``$XDG_DATA_HOME/hsd-plan/hsd-plan.db`` (``~/.local/share/hsd-plan/hsd-plan.db``). A URL names an
SQLite file or a PostgreSQL database (``postgresql://user:password@host/name``, read by
:func:`.urls.parse_url` by rules set out in :mod:`.urls`). Every open upgrades the schema to
head. A file that is not SQLite, or a database written by a newer hsd-plan, is refused and left
untouched. No message of this module shows a secret: a URL is shown masked (:func:`.redaction.shown`)
and each refusal of a server passes through :func:`.redaction.redact` on its way out.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.pool import NullPool

from hsd_runtime.models.files import describe_mode, stat_path

from ..errors import StoreError, first_line
from ..paths import SQLITE_HEADER
from .conninfo import conninfo_url, is_conninfo
from .failures import describe_failure
from .redaction import redact, shown
from .server import advisory_lock, connect_args
from .urls import is_server, parse_url

__all__ = [
    "StoreError",
    "alembic_config",
    "check_db",
    "default_db_path",
    "migrations_dir",
    "open_db",
    "open_memory_db",
    "resolve_url",
    "upgrade_to_head",
]

BUSY_TIMEOUT_S = 60  # how long a writer waits for another process's transaction before giving up
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # only this makes --db a URL; anything else is a path


def migrations_dir() -> Path:
    """The Alembic environment: the repository's top-level ``migrations/``, installed as the
    package ``hsd_planner.migrations`` (a wheel and an editable install alike)."""
    return Path(str(files("hsd_planner.migrations")))


def default_db_path() -> Path:
    """``$XDG_DATA_HOME/hsd-plan/hsd-plan.db``, XDG_DATA_HOME defaulting to ``~/.local/share``."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "hsd-plan" / "hsd-plan.db"


def resolve_url(db: str | None = None) -> URL:
    """The database named by ``--db``, else ``$HSD_PLAN_DB``, else the default path, as a URL.

    A string that starts with ``scheme://`` is a URL, and one that starts with ``word=`` and names
    a libpq keyword (``host=db user=ann dbname=team``) is libpq's keyword/value form of a PostgreSQL
    connection, read as the URL it stands for (:func:`.conninfo.conninfo_url`); anything else is a
    file path, taken literally (``new?x=1.db`` is a file of that name, never a URL with a query,
    and ``./host=x.db`` a file whose name starts like a keyword). A server's URL is
    read by :func:`.urls.parse_url`, which refuses any it could misread. An in-memory SQLite URL
    is refused (nothing would be kept), and so are SQLite URI filenames and query options
    (``sqlite:///file:x.db?uri=true``), which would bypass the file checks below, and a user, a
    password, a host or a port, which an SQLite file has not.
    """
    if db is not None and not db.strip():
        raise StoreError("--db is empty; pass a database path or URL, or leave --db out for the default")
    option = "--db" if db is not None else "HSD_PLAN_DB" if os.environ.get("HSD_PLAN_DB") else "the default database"
    text = db or os.environ.get("HSD_PLAN_DB") or str(default_db_path())
    if is_conninfo(text):
        return conninfo_url(text, option)
    if not _URL_SCHEME.match(text):
        return URL.create("sqlite", database=os.path.abspath(os.path.expanduser(text)))
    if text.partition("://")[0].partition("+")[0] != "sqlite":
        url = parse_url(text, option)
        if not url.database:
            raise StoreError(f"{option} {shown(url)!r} names no database; add its name (postgresql://user@host/name)")
        return url
    return _sqlite_url(text, option)


def _sqlite_url(text: str, option: str) -> URL:
    """The SQLite file named by the URL ``text``, as an absolute path (see :func:`resolve_url`)."""
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):  # a name make_url cannot read, a port that is no number
        raise StoreError(f"{option} {text.partition('://')[0]}://…: not an SQLite URL; pass the file path itself") from None
    if url.username is not None or url.password is not None or url.host or url.port:
        raise StoreError(f"{option} {shown(url)!r}: an SQLite URL names a file (sqlite:///path), not a user or a host")
    if url.database in (None, "", ":memory:"):
        raise StoreError(f"{option} {shown(url)!r} is an in-memory database: nothing would be kept; pass a file path")
    if url.database.startswith("file:") or url.query:
        raise StoreError(f"{option} {shown(url)!r}: SQLite URI filenames and URL options are not supported; pass the file path itself")
    return url.set(database=os.path.abspath(os.path.expanduser(url.database)))


def alembic_config(url: str | URL) -> Config:
    """An Alembic configuration for ``url`` that needs no alembic.ini (works from a wheel)."""
    if isinstance(url, URL):
        url = url.render_as_string(hide_password=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _sqlite_settings(db: Engine) -> None:
    """WAL, a busy timeout, foreign keys, and BEGIN IMMEDIATE so concurrent writers queue up."""

    @event.listens_for(db, "connect")
    def _connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # let the "begin" hook below issue BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        _enable_wal(cur)
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(db, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _enable_wal(cur: sqlite3.Cursor) -> None:
    """Switch the file to WAL once, retrying while another process holds it.

    Changing the journal mode takes an exclusive lock without SQLite's busy handler, so two
    processes opening a new database at the same instant can see "database is locked" here even
    with a busy timeout; reading the mode first makes the common case (already WAL) lock-free.
    An in-memory database (``solve --profile-file`` works on one) has no WAL: SQLite answers
    "memory", and that is final.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.01
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            if cur.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
                return  # this database cannot use WAL (in memory); its mode stays what it is
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.5)


def open_db(db: str | None = None, upgrade: bool = True, create: bool = True) -> Engine:
    """Open (and by default upgrade) the database named by ``db`` (see :func:`resolve_url`).

    ``create=False`` (read-only commands) refuses a database file that does not exist instead of
    creating an empty one. An existing SQLite file is inspected read-only first: a file that is not
    SQLite, is damaged, belongs to another program or to a newer hsd-plan is refused with nothing
    changed on disk (not even its journal mode); so is a path that is not a regular file.
    """
    url = check_db(db, create)
    if url.get_backend_name() == "sqlite" and url.database:
        folder = Path(url.database).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the database folder {folder}: {exc.strerror}") from None
    return _db(url, upgrade)


def check_db(db: str | None = None, create: bool = True) -> URL:
    """The URL of :func:`resolve_url`, its SQLite file checked as :func:`open_db` checks it,
    without writing anything: commands call it first, so a bad ``--db`` fails before a long load."""
    url = resolve_url(db)
    if url.get_backend_name() == "sqlite" and url.database:
        _check_sqlite_file(Path(url.database), create)
    elif is_server(url):
        _check_server(url, create)
    return url


def open_memory_db() -> Engine:
    """A migrated in-memory database, for work on an exported profile that stores nothing."""
    return _db(URL.create("sqlite"), upgrade=True)


def _db(url: URL, upgrade: bool, **options) -> Engine:
    with _refusals(url):
        if is_server(url):  # a dropped connection is replaced before use, not reported mid-profile
            options = {"pool_pre_ping": True, "connect_args": connect_args(url), **options}
        db = create_engine(url, **options)
        if url.get_backend_name() == "sqlite":
            _sqlite_settings(db)
        if upgrade:
            upgrade_to_head(db, url)
    return db


@contextlib.contextmanager
def _refusals(url: URL) -> Iterator[None]:
    """What opening ``url`` raises as one :class:`StoreError` line, no secret of ``url`` in it.

    On a server any driver error (a refused login, an option libpq rejects: ``ProgrammingError``
    as much as ``OperationalError``) and SQLAlchemy's refusal of a host list mean the open failed;
    on SQLite only an ``OperationalError`` does (a damaged file is reported where it is read).
    """
    try:
        yield
    except (NoSuchModuleError, ImportError) as exc:
        hint = "install the driver: pip install 'psycopg[binary]'" if is_server(url) else "is its driver installed?"
        raise StoreError(redact(f"cannot use {shown(url)}: {first_line(exc)} ({hint})", url)) from None
    except DBAPIError as exc:
        if not (is_server(url) or isinstance(exc, OperationalError)):
            raise
        raise StoreError(describe_failure(url, exc.orig or exc)) from None
    except ArgumentError as exc:
        if not is_server(url):
            raise
        raise StoreError(describe_failure(url, exc)) from None
    except StoreError as exc:  # messages of our own may quote a driver too
        raise StoreError(redact(str(exc), url)) from None


def _check_server(url: URL, create: bool) -> None:
    """Connect once to the server ``url`` names and read its schema version: an unreachable
    server, a refused login or a database of a newer hsd-plan fails here, before a long load.
    ``create=False`` (read-only commands) also refuses a database hsd-plan never wrote to."""
    db = _db(url, upgrade=False, poolclass=NullPool)
    try:
        with _refusals(url), db.connect() as conn:
            current = _schema_revisions(conn, url)
        if not current and not create:
            raise StoreError(f"{shown(url)} holds no hsd-plan profiles yet; run hsd-plan profile --db URL first, or pass the right --db")
    finally:
        db.dispose()


def _schema_revisions(conn: Connection, url: str | URL) -> tuple[str, ...]:
    """The database's schema revisions; a revision this hsd-plan does not know (a newer one), or
    tables without any revision (another program's database), are refused."""
    script = ScriptDirectory.from_config(alembic_config(url))
    known = {rev.revision for rev in script.walk_revisions()}
    # tables first: a server commits another process's migration between two statements, and its
    # tables and version appear together, so tables seen here have their version seen next
    tables = inspect(conn).get_table_names()
    current = tuple(MigrationContext.configure(conn).get_current_heads())
    newer = [rev for rev in current if rev not in known]
    if newer:
        raise StoreError(
            f"the database is at schema revision {newer[0]}, newer than this hsd-plan knows (head {script.get_current_head()}); "
            "upgrade hsd-plan"
        )
    if not current and tables:
        raise StoreError("the database has tables but no hsd-plan schema version; it is not an hsd-plan database")
    return current


def _check_sqlite_file(path: Path, create: bool) -> None:
    """Refuse, before anything writes, a database file hsd-plan must not open; create its folder."""
    st = stat_path(path, "database")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise StoreError(f"database path {path} is a directory; pass a file path with --db")
    if st is not None and not stat.S_ISREG(st.st_mode):  # a FIFO would block, a device take a journal beside it
        raise StoreError(f"database path {path} is {describe_mode(st.st_mode)}, not a database file; pass a file path with --db")
    if st is None or st.st_size == 0:
        if not create:
            raise StoreError(f"there is no database at {path}; run hsd-plan profile first, or pass the right --db")
        folder = next(p for p in path.parents if stat_path(p, "database folder") is not None)  # the nearest that exists
        if not folder.is_dir():
            raise StoreError(f"cannot create a database at {path}: {folder} is not a folder")
        if not os.access(folder, os.W_OK):
            raise StoreError(f"cannot create a database in {folder}: the folder is not writable")
        return
    with open(path, "rb") as fh:
        if fh.read(16) != SQLITE_HEADER:
            raise StoreError(f"{path} is not an SQLite database; it was left untouched (pass another --db)")
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        raise StoreError(f"{path} is read-only (the file or its folder); hsd-plan writes to its database: make it writable or copy it")
    try:  # read-only: a refusal must not even switch the file to WAL
        # immutable: no lock, no -wal/-shm files; the main file alone is consistent (checkpointed pages only)
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
        try:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "alembic_version" not in tables:
                raise StoreError(
                    f"{path} is an SQLite database of another program, not an hsd-plan database; it was left untouched (pass another --db)"
                )
            con.execute("PRAGMA quick_check(1)").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is damaged ({exc}); it was left untouched: restore it from a backup or pass another --db") from None


def upgrade_to_head(db: Engine, url: str | URL | None = None) -> None:
    """Migrate the schema to head inside one transaction; refuse newer or foreign databases.

    On a server, processes that open a new database at once take turns (an advisory lock held to
    the end of the transaction): the first migrates, the others then find it at head.

    On SQLite, foreign keys are off while it migrates (SQLite's own procedure for altering a
    table): batch mode recreates a table, and dropping the old copy of a table that others
    reference would otherwise cascade and delete their rows (a settings table rebuilt would take
    every acceptance row with it). ``PRAGMA foreign_key_check`` then proves the references whole
    before the transaction commits.
    """
    cfg = alembic_config(url or db.url)
    head = ScriptDirectory.from_config(cfg).get_current_head()
    sqlite = db.dialect.name == "sqlite"
    with db.connect() as conn:
        raw = conn.connection.driver_connection
        if sqlite:  # before BEGIN: inside a transaction the pragma is ignored
            raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                advisory_lock(conn, "hsd-plan schema")
                current = _schema_revisions(conn, url or db.url)
                if tuple(current) != (head,):
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
                    if sqlite and conn.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
                        raise StoreError("a migration left rows that reference nothing; the database was left as it was")
        finally:
            if sqlite:
                raw.execute("PRAGMA foreign_keys = ON")
