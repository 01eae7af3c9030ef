"""A throwaway PostgreSQL server for the tests and benchmarks: ``initdb`` and ``pg_ctl`` on a
temporary folder, reached through a Unix socket in that folder (no TCP port, nothing shared).

PostgreSQL refuses to run as root. As root, the cluster belongs to an unprivileged account (the
``postgres`` user where the server package made one, else ``nobody``): its folder is handed to
that account and the server programs run as it; any other user runs them as itself.

``HSD_PLAN_SKIP_PG=1`` skips the tests that need a server where none can be installed; without
it, missing server programs fail those tests (CI installs them: ``scripts/install.sh``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

SKIP_ENV = "HSD_PLAN_SKIP_PG"
SUPERUSER = "hsd"  # trusted on the socket: the tests' own account
PASSWORD_USER, PASSWORD = "hsd_pw", "right-password"  # the one account that must give a password
SETTINGS = {  # a test server: fast and forgetful (no fsync, commits acknowledged before they are logged), room for every pool a test leaves open
    "listen_addresses": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
}


def server_bindir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else ``pg_config --bindir``, else the
    newest Debian/Ubuntu ``/usr/lib/postgresql/N/bin``; None when there is none."""
    found = [shutil.which("initdb"), shutil.which("pg_ctl")]
    if all(found):
        return Path(str(found[0])).parent
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").is_file():
            return Path(out.stdout.strip())
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0
    )
    return Path(debian[-1]).parent if debian else None


def missing_reason() -> str | None:
    """Why no test server can start here (None: one can)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]', or scripts/install.sh)"
    if server_bindir() is None:
        return "the PostgreSQL server programs (initdb, pg_ctl) are not installed (apt-get install postgresql, or scripts/install.sh)"
    return None


def _owner() -> pwd.struct_passwd | None:
    """The account the server runs as when we are root; None: run it as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged account (postgres, nobody) to run the PostgreSQL server as")


class Cluster:
    """One PostgreSQL server on a temporary folder: :meth:`start`, :meth:`stop`, :meth:`kill`."""

    def __init__(self, bindir: Path | None = None, durable: bool = False) -> None:
        """``durable``: a commit is in the server's log before it returns, so a server killed
        keeps every committed row (the default trades that for speed: it loses the last ~0.5 s)."""
        self.settings = {**SETTINGS, "synchronous_commit": "on"} if durable else SETTINGS
        self.bindir = bindir or server_bindir()
        if self.bindir is None:
            raise RuntimeError(missing_reason() or "no PostgreSQL server programs")
        self.owner = _owner()
        # /tmp, not pytest's folders: those are private to the user running the tests, and the
        # server's account must reach its folder; a short path also keeps the socket name legal
        self.root = Path(tempfile.mkdtemp(prefix="hsd-plan-pg-", dir="/tmp" if self.owner else None))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        if self.owner is not None:
            os.chown(self.root, self.owner.pw_uid, self.owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
        hba = [
            f"local all {PASSWORD_USER} scram-sha-256",
            "local all all trust",
        ]
        self._write(self.data / "pg_hba.conf", "\n".join(hba) + "\n")
        self._databases = 0

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        user = {} if self.owner is None else {"user": self.owner.pw_uid, "group": self.owner.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bindir / program), *args],
            capture_output=True,
            text=True,
            check=check,
            cwd=self.root,
            env={**os.environ, "LC_ALL": "C"},
            **user,  # type: ignore[arg-type]
        )

    def _write(self, path: Path, content: str) -> None:
        path.write_text(content)
        if self.owner is not None:
            os.chown(path, self.owner.pw_uid, self.owner.pw_gid)

    @property
    def socket_dir(self) -> str:
        return str(self.root)

    def start(self) -> None:
        options = " ".join([f"-k {self.root}", *(f"-c {k}={v}" for k, v in self.settings.items())])
        out = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "-o", options, "start", check=False
        )
        if out.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stdout}{out.stderr}{log}")
        self.execute(
            f"DO $$ BEGIN CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )

    def stop(self) -> None:
        """A clean shutdown (sessions are ended)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def kill(self) -> None:
        """The server dies at once, as in a crash or a power cut: every session is cut off."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str, user: str = SUPERUSER, password: str | None = None) -> str:
        """The ``postgresql://`` URL of ``database`` as hsd-plan is given it."""
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql://{auth}@/{database}?host={self.root}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple]:
        """Run ``sql`` as the superuser outside a transaction (CREATE DATABASE needs that)."""
        import psycopg

        with psycopg.connect(host=str(self.root), user=SUPERUSER, dbname=database, autocommit=True) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its name."""
        if name is None:
            self._databases += 1
            name = f"t{os.getpid()}_{self._databases}"
        self.execute(f'CREATE DATABASE "{name}"')
        self.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_USER}", database=name)
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
