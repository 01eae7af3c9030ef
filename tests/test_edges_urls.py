"""Database URLs at every edge: what a user may type after ``--db`` (or in ``$HSD_PLAN_DB``).

Every case checks the contract of a refusal: one line ``Error: ...``, a non-zero exit, no
traceback, no hang (a deadline fails the test instead), nothing written to the working folder,
and never a secret in the output: not the password, not a secret option, neither as typed nor
percent-decoded nor percent-encoded. Servers that fail fast stand in for real ones: 127.0.0.1 on
the closed port 1, and a socket of the test's own that accepts and never answers. A seeded fuzz
throws a few hundred URL shapes (reserved characters in the password, encoded or not, secret
options, odd ports, IPv6 literals whole and broken, the three schemes) at commands that open the
store.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import pytest
from click.testing import Result

from hsd_planner.limits import MAX_CONNECT_TIMEOUT_S
from hsd_planner.store.server import CONNECT_TIMEOUT_S
from tests.helpers import one_line_error
from tests.helpers import run as run_cli
from tests.test_edges import deadline

CLOSED = "127.0.0.1:1"  # nothing listens on port 1: a connection is refused at once
COMMANDS = (["profiles", "show"], ["solve"], ["profiles", "export", "out.json"])  # each opens the store first


@pytest.fixture(autouse=True)
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working folder (and default database folder) that must stay empty."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("HSD_PLAN_DB", raising=False)
    yield tmp_path
    assert list(tmp_path.iterdir()) == [], "a refused URL left something on disk"


def spellings(secret: str) -> set[str]:
    """``secret`` as typed, percent-decoded and percent-encoded: none may ever be shown."""
    decoded = {unquote(secret), unquote_plus(secret)}  # in userinfo and in an option
    return {secret, quote(secret, safe=""), *decoded, *(f(d) for d in decoded for f in (quote, quote_plus))} | {
        quote(d, safe="") for d in decoded
    }


def refused(url: str, fragment: str = "", secrets: tuple[str, ...] = (), command: list[str] | None = None, seconds: int = 30) -> str:
    """``hsd-plan COMMAND --db URL`` is refused by the contract; its one line."""
    with deadline(seconds):
        result = run_cli(*(command or COMMANDS[0]), "--db", url)
    return checked(result, fragment, secrets)


def checked(result: Result, fragment: str = "", secrets: tuple[str, ...] = ()) -> str:
    """The contract of a refusal on ``result``; its one line."""
    one_line_error(result, fragment)
    assert "Traceback" not in result.output, result.output
    for secret in secrets:
        for form in spellings(secret):
            assert form not in result.output, (form, result.output)
    return result.output.strip()


# --- a password is never shown ------------------------------------------------------------------


def test_a_password_given_as_an_option_is_masked():
    line = refused(f"postgresql://alice@{CLOSED}/db?password=Qp2Secret", "no database server answers there", ("Qp2Secret",))
    assert f"cannot open postgresql://alice@{CLOSED}/db?password=***:" in line


@pytest.mark.parametrize("option", ["password", "sslpassword", "api_token", "client_secret", "PGPASSWORD"])
def test_every_secret_option_is_masked(option):
    line = refused(f"postgresql://alice:Pw1Secret@{CLOSED}/db?{option}=Opt9Secret&sslmode=disable", "", ("Pw1Secret", "Opt9Secret"))
    assert f"{option}=***" in line and "sslmode=disable" in line  # what is no secret stays readable


def test_a_file_option_names_a_path_and_is_shown():
    line = refused(f"postgresql://alice@{CLOSED}/db?passfile=/home/alice/.pgpass", "no database server answers there")
    assert "passfile=/home/alice/.pgpass" in line


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://alice:Zq9@WvSecret@{CLOSED}/db",  # libpq and SQLAlchemy: the password ends at the first '@'
        f"postgresql://alice:Zq9/WvSecret@{CLOSED}/db",  # RFC 3986 and libpq: the host is 'alice'
        f"postgresql://alice:Zq9?WvSecret@{CLOSED}/db",  # RFC 3986: a query begins at the '?'
        f"postgresql://al@ice:Zq9WvSecret@{CLOSED}/db",
        f"postgresql://alice:Zq9WvSecret@{CLOSED}/db?user=bob@corp",  # an '@' in an option is encoded too
        f"postgresql://alice:Zq9?k=v/WvSecret@{CLOSED}/db",  # libpq: the password is 'Zq9?k=v'; RFC 3986: an option
    ],
)
def test_an_unencoded_at_slash_or_question_mark_in_the_credentials_is_refused_with_nothing_shown(url):
    line = refused(url, "an '@' may appear only once", ("Zq9WvSecret", "WvSecret", "v/WvSecret"))
    assert line.startswith("Error: --db postgresql://…:")


@pytest.mark.parametrize(
    "password, typed",
    [
        ("Zq9@WvSecret", "Zq9%40WvSecret"),
        ("Zq9/Wv?Secret", "Zq9%2FWv%3FSecret"),
        ("Zq9:Wv#Secret", "Zq9:Wv#Secret"),  # ':' and '#' need no encoding in a password
        ("Zq9[Wv]Secret", "Zq9[Wv]Secret"),
        ("Zq9%WvSecret", "Zq9%WvSecret"),  # a '%' that starts no escape is itself
        ("Zq9 Wv%Secret", "Zq9%20Wv%25Secret"),
    ],
)
def test_a_password_with_reserved_characters_reaches_the_server_and_is_masked(password, typed):
    line = refused(f"postgresql://alice:{typed}@{CLOSED}/db", "no database server answers there", (password, typed))
    assert f"postgresql://alice:***@{CLOSED}/db" in line


@pytest.mark.parametrize(
    "typed, fragment",
    [
        ("Zq9WvSecret", "the port is not a whole number"),
        ("123456", "the port is not a whole number"),
        ("Zq9,WvSecret", "several hosts"),
        ("Zq9:WvSecret", "more than one ':'"),
        ("Zq9]WvSecret", "'[' or ']'"),
    ],
)
def test_a_password_without_its_at_is_never_shown_as_a_port(typed, fragment):
    line = refused(f"postgresql://alice:{typed}/db", fragment, (typed,))
    assert "postgresql://alice:***/db" in line and "user:password@host" in line


def test_a_driver_message_that_echoes_a_secret_is_scrubbed():
    from sqlalchemy.engine import make_url

    from hsd_planner.store.failures import describe_failure, describe_lost

    url = make_url("postgresql+psycopg://ann:Zq9%40Wv%2FSecret@db.lan/team?sslpassword=K3yPass")
    for describe in (describe_failure, describe_lost):
        line = describe(url, Exception('invalid dsn: "password=Zq9@Wv/Secret sslpassword=K3yPass" and Zq9%40Wv%2FSecret'))
        assert not any(form in line for secret in ("Zq9@Wv/Secret", "K3yPass") for form in spellings(secret)), line


def test_a_database_failing_mid_command_is_scrubbed_of_the_last_urls_secrets():
    from hsd_planner.store.failures import describe_error

    refused(f"postgresql://ann:Mid7Secret@{CLOSED}/db")
    assert describe_error(Exception("connection lost: password=Mid7Secret")) == "connection lost: password=***"


def test_a_url_from_the_environment_is_masked(monkeypatch):
    monkeypatch.setenv("HSD_PLAN_DB", "postgresql://alice:Env5Secret@127.0.0.1:abc/db")
    with deadline():
        result = run_cli("profiles", "show")
    checked(result, "postgresql://alice:***@127.0.0.1:abc/db: port 'abc'", ("Env5Secret",))


# --- libpq's keyword/value form -------------------------------------------------------------------


@pytest.mark.parametrize(
    "conninfo, shown",
    [
        ("host=127.0.0.1 port=1 user=alice password=Kv1Secret dbname=db", f"postgresql://alice:***@{CLOSED}/db"),
        ("  dbname = db  password = 'Kv1 Secret'  user=alice host=127.0.0.1 port=1", f"postgresql://alice:***@{CLOSED}/db"),
        (r"host=127.0.0.1 port=1 user=alice password='Kv1\'Secret' dbname=db", f"postgresql://alice:***@{CLOSED}/db"),
        (
            "host=127.0.0.1 port=1 user=alice password=Kv1Secret sslpassword=Kv2Secret sslmode=disable dbname=db",
            f"postgresql://alice:***@{CLOSED}/db?sslpassword=***&sslmode=disable",
        ),
    ],
)
def test_a_libpq_keyword_string_is_a_connection_with_its_password_masked(conninfo, shown):
    """libpq's other form of a connection (what psql takes): read as the URL it stands for, never as a file name."""
    line = refused(conninfo, "no database server answers there", ("Kv1Secret", "Kv1 Secret", "Kv1'Secret", "Kv2Secret"))
    assert f"cannot open {shown}:" in line


@pytest.mark.parametrize(
    "conninfo, fragment",
    [
        ("host=db user=alice password=Kv1 Secret dbname=db", "every word must be keyword=value"),
        ("host=db user=alice password='Kv1Secret dbname=db", "the quoted value of password has no closing quote"),
        ("passwrod=Kv1Secret host=db dbname=db", "'passwrod' is not a libpq connection keyword"),
        ("host=db password=Kv1Secret", "names no database; add dbname=NAME"),
        ("host=db password=Kv1Secret password=Kv1Secret dbname=db", "'password' is given more than once"),
        ("host=db port=abc password=Kv1Secret dbname=db", "port 'abc' is not a whole number from 1 to 65535"),
    ],
)
def test_a_malformed_libpq_keyword_string_is_one_line_without_its_values(conninfo, fragment):
    refused(conninfo, fragment, ("Kv1Secret",))


def test_a_libpq_keyword_string_from_the_environment_is_masked(monkeypatch):
    monkeypatch.setenv("HSD_PLAN_DB", "host=127.0.0.1 port=1 user=alice password=Env6Secret dbname=db")
    with deadline():
        result = run_cli("solve")
    checked(result, f"cannot open postgresql://alice:***@{CLOSED}/db", ("Env6Secret",))


def test_a_file_whose_name_starts_like_a_keyword_is_named_as_a_path(folder):
    from hsd_planner.store.db import resolve_url

    assert resolve_url("./host=x.db").database == str(folder / "host=x.db")
    assert resolve_url("hosts=x.db").database == str(folder / "hosts=x.db")


# --- each malformed part is one line that names it ------------------------------------------------


@pytest.mark.parametrize(
    "hostport, fragment",
    [
        ("127.0.0.1:abc", "port 'abc' is not a whole number from 1 to 65535"),
        ("127.0.0.1:0", "port '0' is not a whole number"),
        ("127.0.0.1:65536", "port '65536' is not a whole number"),
        ("127.0.0.1:-1", "port '-1' is not a whole number"),
        ("127.0.0.1:99999999999999999999", "is not a whole number"),
        ("127.0.0.1:٣", "port '٣' is not a whole number"),
        ("127.0.0.1:1:2", "holds more than one ':'"),
        ("::1", "holds more than one ':'"),
        ("[::1", "has no closing ']'"),
        ("[::1]x:1", "follows the IPv6 address"),
        ("[]:1", "is not an IPv6 address"),
        ("[db.lan]:1", "is not an IPv6 address"),
        ("::1]:1", "only enclose an IPv6 address"),
        ("h1:5432,h2:5433", "several hosts"),
        ("db%20lan:1", "holds a space or a control character"),
    ],
)
def test_a_bad_host_or_port_is_named(hostport, fragment):
    line = refused(f"postgresql://alice:Hp4Secret@{hostport}/db", fragment, ("Hp4Secret",))
    assert "alice:***@" in line


@pytest.mark.parametrize(
    "query, fragment",
    [
        ("password=a1&password=b2", "the option 'password' is given more than once"),
        ("port=abc", "the port option 'abc'"),
        ("port=1,70000", "the port option '70000'"),
        ("host=h1:x", "the host's port 'x'"),
        ("host=" + ",".join(f"h{i}" for i in range(9)), "9 hosts: at most 8"),
        ("connect_timeout=0", "(0 or less waits forever)"),
        ("connect_timeout=-5", "(0 or less waits forever)"),
        ("connect_timeout=1.5", "connect_timeout '1.5' is not a whole number of seconds"),
        ("connect_timeout=abc", "connect_timeout 'abc'"),
        (f"connect_timeout={MAX_CONNECT_TIMEOUT_S + 1}", f"from 1 to {MAX_CONNECT_TIMEOUT_S}"),
        ("application_name=a%00b", "NUL character"),
    ],
)
def test_a_bad_option_is_named(query, fragment):
    refused(f"postgresql://alice:Qo3Secret@{CLOSED}/db?{query}", fragment, ("Qo3Secret",))


@pytest.mark.parametrize(
    "url, fragment",
    [
        (f"postgresql://alice:Zq9Secret@{CLOSED}/db?foo=bar", 'invalid connection option "foo"'),
        (f"postgresql://alice:Zq9Secret@{CLOSED}/db?sslmode=bogus", 'invalid sslmode value: "bogus"'),
        (f"postgresql://alice:Zq9Secret@{CLOSED}/db?host=h1,h2&port=1", "number of hosts and ports"),
        (f"postgresql://alice:Zq9Secret@{CLOSED}/d%0Ab", "/d%0Ab: no database server"),  # a newline stays on the line
        (f"postgresql://alice:Zq9Secret@{CLOSED}", "names no database"),
        ("postgresql://alice:Zq9Secret@127.0.0.1:/db?port=1", "no database server answers there"),  # an empty port is the default
        (f"mysql://alice:Zq9Secret@{CLOSED}/db", "not mysql"),
        ("sqlite://alice:Zq9Secret@host/x.db", "an SQLite URL names a file"),
        ("sqlite:///x.db?password=Zq9Secret", "URL options are not supported"),
        ("sqlite://h:abc/x.db", "not an SQLite URL"),
    ],
)
def test_refusals_of_libpq_sqlalchemy_and_other_backends_are_one_line(url, fragment):
    refused(url, fragment, ("Zq9Secret",))


# --- no open waits forever -----------------------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port whose server accepts every connection and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def timed(url: str, seconds: int = 30) -> tuple[str, float]:
    start = time.monotonic()
    line = refused(url, "did not answer within", ("Si1Secret",), seconds=seconds)
    return line, time.monotonic() - start


def test_a_server_that_accepts_and_never_answers_times_out(silent_port):
    line, took = timed(f"postgresql://alice:Si1Secret@127.0.0.1:{silent_port}/db")
    assert f"within {CONNECT_TIMEOUT_S} s" in line and took < 30


@pytest.mark.parametrize(
    "options",
    ["connect_timeout=2", "connect_timeout=1&sslmode=disable", "connect_timeout=2&target_session_attrs=read-write&keepalives=0"],
)
def test_options_keep_a_bound_on_a_silent_server(silent_port, options):
    line, took = timed(f"postgresql://alice:Si1Secret@127.0.0.1:{silent_port}/db?{options}", seconds=15)
    assert "within 2 s" in line and took < 10


@pytest.mark.parametrize("option", ["passfile", "sslrootcert", "sslkey", "sslcrldir"])
def test_a_file_option_that_names_a_fifo_is_refused(tmp_path_factory, option):
    fifo = tmp_path_factory.mktemp("fifo") / "pipe"
    os.mkfifo(fifo)
    refused(
        f"postgresql://alice:Ff2Secret@{CLOSED}/db?{option}={fifo}", f"{option} '{fifo}' is not a regular file", ("Ff2Secret",), seconds=5
    )


def test_connect_timeout_zero_is_refused_before_any_connection(silent_port):
    start = time.monotonic()
    refused(f"postgresql://alice:Si1Secret@127.0.0.1:{silent_port}/db?connect_timeout=0", "waits forever", ("Si1Secret",), seconds=5)
    assert time.monotonic() - start < 2


# --- the fuzz --------------------------------------------------------------------------------------

SCHEMES = ["postgresql", "postgres", "postgresql+psycopg"]
RESERVED = "@:/?#%[] +"
HOSTS = [
    *[CLOSED] * 8,  # most shapes get as far as a connection
    "[::1]:1",
    "127.0.0.1:abc",
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "127.0.0.1:-1",
    "127.0.0.1:1:2",
    "[::1",
    "[::1]x",
    "[nope]:1",
    "[::1]:99999",
    "h1:1,h2:2",
    "127.0.0.1:١",
]
OPTIONS = [
    "sslmode=disable",
    "application_name=fuzz",
    "connect_timeout=0",
    "connect_timeout=-1",
    "connect_timeout=5",
    "connect_timeout=x",
    "target_session_attrs=any",
    "keepalives=0",
    "options=-c%20statement_timeout%3D0",
    "passfile=/nonexistent/.pgpass",
    "port=abc",
    "bogus=1",
]


def fuzz_secret(rng: random.Random) -> tuple[str, str]:
    """A password (decoded) and how the URL spells it: encoded whole, or with its reserved
    characters as typed."""
    core = "Fz" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789", k=8))
    chars = list(core)
    for _ in range(rng.randint(0, 3)):
        chars.insert(rng.randint(1, len(chars)), rng.choice(RESERVED))
    secret = "".join(chars)
    return secret, quote(secret, safe="") if rng.random() < 0.5 else secret


def fuzz_url(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    """One URL shape and the secrets it holds (as typed and decoded)."""
    secrets: list[str] = []
    userinfo = ""
    user = rng.choice(["alice", "al%40ice", "", "bob.smith"])
    if rng.random() < 0.8:
        password, typed = fuzz_secret(rng)
        secrets += [password, typed]
        userinfo = f"{user}:{typed}@"
    elif user:
        userinfo = f"{user}@"
    if userinfo and rng.random() < 0.05:  # the '@' and host forgotten: the password reads as a port
        return f"{rng.choice(SCHEMES)}://{userinfo[:-1]}/db", tuple(secrets)
    options = rng.sample(OPTIONS, rng.randint(0, 2))
    for name in rng.sample(["password", "sslpassword", "my_token"], rng.randint(0, 2)):
        password, typed = fuzz_secret(rng)
        secrets += [password, typed]
        options.append(f"{name}={quote_plus(password) if typed != password else password}")
    rng.shuffle(options)
    query = "?" + "&".join(options) if options else ""
    return f"{rng.choice(SCHEMES)}://{userinfo}{rng.choice(HOSTS)}/{rng.choice(['db', 'team%2Fx', 'd b'])}{query}", tuple(secrets)


FUZZ = [fuzz_url(random.Random(seed)) for seed in range(400)]


def test_the_fuzz_covers_every_shape():
    urls = " ".join(url for url, _ in FUZZ)
    for piece in [*SCHEMES, *HOSTS, *RESERVED, "%40", "%2F", "password=", "sslpassword=", "connect_timeout=0"]:
        assert piece in urls, piece


@pytest.mark.parametrize("chunk", range(4))
def test_fuzzed_urls_are_one_line_without_secrets(chunk):
    for i, (url, secrets) in enumerate(FUZZ[chunk::4]):
        command = COMMANDS[i % len(COMMANDS)]
        with deadline(20):
            result = run_cli(*command, "--db", url)
        try:
            checked(result, "", tuple(s for s in secrets if len(unquote(s)) >= 4))
        except AssertionError as exc:
            raise AssertionError(f"{command} --db {url}: {exc}") from None
