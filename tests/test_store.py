"""The database, on SQLite and on a PostgreSQL server: migrations, refusal of foreign files and
newer schemas, concurrent writers."""

import sqlite3

import pytest
from alembic.autogenerate import compare_metadata
from alembic.command import downgrade, upgrade
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from hsd_planner.store import Base, StoreError, open_db, resolve_url
from hsd_planner.store.db import _enable_wal, alembic_config


def _execute(db_url: str, sql: str) -> None:
    """Run ``sql`` on the database behind hsd-plan's back (as another program or version would)."""
    db = create_engine(resolve_url(db_url))
    with db.begin() as conn:
        conn.execute(text(sql))
    db.dispose()


def test_migrations_have_a_single_head():
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def test_upgrade_from_empty_matches_the_orm(db_url):
    db = open_db(db_url)
    assert set(inspect(db).get_table_names()) >= set(Base.metadata.tables)
    with db.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    db.dispose()


def test_downgrade_and_upgrade_round_trip(db_url):
    db = open_db(db_url)
    cfg = alembic_config(resolve_url(db_url))
    downgrade(cfg, "base")
    assert set(inspect(db).get_table_names()) <= {"alembic_version"}
    upgrade(cfg, "head")
    assert set(inspect(db).get_table_names()) >= set(Base.metadata.tables)
    with db.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    db.dispose()


def test_a_file_that_is_not_sqlite_is_left_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"my precious notes\n" * 10)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="is not an SQLite database"):
        open_db(str(path))
    assert path.read_bytes() == before


def test_a_database_from_a_newer_schema_is_refused(db_url):
    open_db(db_url).dispose()
    _execute(db_url, "UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(StoreError, match="newer than this hsd-plan"):
        open_db(db_url)


def test_a_foreign_database_is_refused(db_url):
    _execute(db_url, "CREATE TABLE customers (id INTEGER)")
    with pytest.raises(StoreError, match="not an hsd-plan database"):
        open_db(db_url)


def test_switching_to_wal_retries_while_another_process_holds_the_file():
    # SQLite changes the journal mode without its busy handler: two processes opening a new
    # database at once made one fail with "database is locked" (seen in CI); it must wait instead
    class Contended:
        def __init__(self, busy: int) -> None:
            self.busy, self.mode = busy, "delete"

        def execute(self, sql: str):
            if sql.endswith("= WAL"):
                if self.busy:
                    self.busy -= 1
                    raise sqlite3.OperationalError("database is locked")
                self.mode = "wal"
            return self

        def fetchone(self):
            return (self.mode,)

    cur = Contended(busy=3)
    _enable_wal(cur)
    assert cur.mode == "wal" and cur.busy == 0
    broken = Contended(busy=0)
    broken.execute = lambda sql: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _enable_wal(broken)
