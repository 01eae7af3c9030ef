"""One PostgreSQL store for many machines and many profilers, against a real server (tests/pg.py).

Writers at once leave the rows one writer would, none lost, none twice; a profiler killed, or
whose server dies, resumes; export and import move profiles between SQLite and the server
unchanged; a store of two machines solves for either; every bad URL or server is one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from hsd_planner.cli import cli
from hsd_planner.stats import pool_rows
from hsd_planner.store import Acceptance, AcceptancePrompt, Hardware, Latency, ModelRow, Setting, Workload, open_db, resolve_url
from hsd_planner.store.db import alembic_config
from hsd_planner.store.exchange import export_document
from hsd_planner.store.repo import get_or_create
from hsd_planner.store.writes import record_acceptance_prompt, record_latency
from tests import pg

pytestmark = pytest.mark.postgres

FAST = ["--latency-grid", "1,4", "--context-lens", "8", "--repeats", "2", "--max-new-tokens", "6", "--device", "cpu"]


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(result, fragment: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], result.output
    return lines[0]


def models(tiny_dirs) -> str:
    return f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"


def prompts_file(path, start: int, count: int = 6):
    path.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i} w{i + 1}" for i in range(start, start + count)))
    return path


def keys(url: str) -> dict[str, list]:
    """The natural key of every stored row, per table (sorted, repeats kept: a repeat is a duplicate)."""
    db = open_db(url, create=False)
    doc = export_document(db)
    db.dispose()

    def setting(s) -> tuple:
        return tuple(s.model_dump().values())

    return {
        "hardware": sorted(h.fingerprint for h in doc.hardware),
        "models": sorted(m.spec for m in doc.models),
        "workloads": sorted(w.content_hash for w in doc.workloads),
        "latency": sorted((r.model, r.hardware, r.dtype, r.n_tokens, r.context_len) for r in doc.latency),
        "continuations": sorted((r.verifier, r.workload, setting(r.setting), r.prompt_index) for r in doc.continuations),
        "acceptance_prompts": sorted(
            (r.drafter, r.verifier, r.workload, setting(r.setting), r.prompt_index) for r in doc.acceptance_prompts
        ),
        "acceptance": sorted((r.drafter, r.verifier, r.workload, setting(r.setting)) for r in doc.acceptance),
    }


def check_consistent(url: str, repeats: int) -> None:
    """Every pooled pair is the pool of its stored prompts, and every latency point is complete."""
    db = open_db(url, create=False)
    with Session(db) as s:
        for agg in s.scalars(select(Acceptance)):
            key = dict(drafter_id=agg.drafter_id, verifier_id=agg.verifier_id, workload_id=agg.workload_id, setting_id=agg.setting_id)
            rows = s.scalars(select(AcceptancePrompt).filter_by(**key)).all()
            alpha, positions, run_lengths = pool_rows(rows)[:3]
            assert (agg.prompts, agg.positions) == (len(rows), positions)
            assert agg.alpha == pytest.approx(alpha) and agg.run_lengths == pytest.approx(run_lengths)
        assert all(r.repeats >= repeats and len(r.samples_ms) == r.repeats for r in s.scalars(select(Latency)))
    db.dispose()


def profile_process(tiny_dirs, prompts, db: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "hsd_planner", "profile", "--models", models(tiny_dirs), "--prompts", str(prompts), "--db", db, *FAST]
    return subprocess.Popen(
        [*cmd, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def count(url: str, table: str) -> int:
    db = create_engine(resolve_url(url))
    try:
        with db.connect() as conn:
            return conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
    except Exception:  # not created yet: the profiler has not migrated the database
        return 0
    finally:
        db.dispose()


def wait_for_rows(url: str, table: str, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if count(url, table) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("profiling made no progress")


# --- the URL and the server's refusals: one line each ------------------------------------------


def test_postgresql_urls_mean_psycopg_and_other_databases_are_refused():
    assert resolve_url("postgresql://ann@db.lan/team").drivername == "postgresql+psycopg"
    assert resolve_url("postgres://ann@db.lan/team").drivername == "postgresql+psycopg"
    assert resolve_url("postgresql+psycopg://ann@db.lan/team").drivername == "postgresql+psycopg"
    for url, fragment in [
        ("mysql://ann:secret@db.lan/team", "SQLite (a file path) or PostgreSQL"),
        ("postgresql://ann:secret@db.lan", "names no database"),
    ]:
        line = one_line_error(run("profiles", "show", "--db", url), fragment)
        assert "secret" not in line


def test_bad_servers_are_one_line_each(pg_cluster, pg_url, tiny_dirs, tmp_path):
    name = make_url(pg_url).database
    prompts = prompts_file(tmp_path / "p.txt", 0)
    cases = [
        ("postgresql://hsd@127.0.0.1:1/team", "no database server answers there"),
        (pg_cluster.url(name, pg.PASSWORD_USER, "s3cret-guess"), f'wrong password for user "{pg.PASSWORD_USER}"'),
        (pg_cluster.url("no_such_db"), "the server has no database no_such_db"),
        (pg_cluster.url(name, "nobody_here"), 'the server has no user "nobody_here"'),
    ]
    for url, fragment in cases:
        line = one_line_error(run("profiles", "show", "--db", url), fragment)
        assert "s3cret-guess" not in line  # a password never shows
        # a profile refuses it before any model loads, and writes nothing
        one_line_error(run("profile", "--models", models(tiny_dirs), "--prompts", prompts, "--db", url, *FAST), fragment)
    # an empty database: nothing to show yet, and nothing created by looking
    one_line_error(run("profiles", "show", "--db", pg_url), "holds no hsd-plan profiles yet")
    assert pg_cluster.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'", database=name) == [(0,)]
    # the right password works: the account migrates a fresh database and reads it
    fresh = pg_cluster.create_database()
    right = pg_cluster.url(fresh, pg.PASSWORD_USER, pg.PASSWORD)
    db = open_db(right)
    db.dispose()
    assert run("profiles", "show", "--db", right).exit_code == 0


def test_a_libpq_keyword_string_opens_the_database_its_url_names(pg_cluster):
    """psql's keyword/value spelling of a connection reaches the same database as the URL; a wrong
    password in it is one line that never shows it."""
    fresh = pg_cluster.create_database()
    conninfo = f"host='{pg_cluster.root}' user={pg.PASSWORD_USER} password='{pg.PASSWORD}' dbname={fresh}"
    open_db(conninfo).dispose()  # migrated through the keyword form
    assert run("profiles", "show", "--db", pg_cluster.url(fresh, pg.PASSWORD_USER, pg.PASSWORD)).exit_code == 0
    assert run("profiles", "show", "--db", conninfo).exit_code == 0
    wrong = run("profiles", "show", "--db", conninfo.replace(pg.PASSWORD, "s3cret-guess"))
    one_line_error(wrong, f'wrong password for user "{pg.PASSWORD_USER}"')
    assert "s3cret-guess" not in wrong.output


def test_a_database_of_a_newer_hsd_plan_is_refused_before_a_profile_loads(pg_cluster, pg_url, tiny_dirs, tmp_path):
    open_db(pg_url).dispose()
    name = make_url(pg_url).database
    pg_cluster.execute("UPDATE alembic_version SET version_num = '9999_future'", database=name)
    prompts = prompts_file(tmp_path / "p.txt", 0)
    one_line_error(run("profile", "--models", models(tiny_dirs), "--prompts", prompts, "--db", pg_url, *FAST), "newer than this hsd-plan")
    one_line_error(run("profiles", "show", "--db", pg_url), "newer than this hsd-plan")


# --- many writers at once ------------------------------------------------------------------------


def _threads(n: int, work) -> list[BaseException]:
    """Run ``work(i)`` in ``n`` threads released together; the exceptions they raised."""
    barrier, errors = threading.Barrier(n), []

    def go(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_processes_opening_a_new_database_at_once_migrate_it_once(db_url):
    dbs: list = []
    assert _threads(6, lambda i: dbs.append(open_db(db_url))) == []
    with dbs[0].connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [
            ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
        ]
    for db in dbs:
        db.dispose()


def test_rows_created_at_once_are_created_once(db_url):
    db = open_db(db_url)
    specs = [f"ngram:n={k}" for k in range(2, 8)]

    def create(i: int) -> None:  # each writer creates the same rows, in its own order
        with Session(db) as s, s.begin():
            get_or_create(s, Hardware, {"fingerprint": "f" * 16}, device="cpu", device_name="CPU", threads=2, torch_version="2")
            for spec in specs[i % 3 :] + specs[: i % 3] if i % 2 else reversed(specs):
                get_or_create(s, ModelRow, {"spec": spec}, parameters=0)
            get_or_create(s, Setting, dict(mode="greedy", temperature=1.0, top_p=1.0, dtype="fp32", max_new_tokens=8, lenience=1.0))

    assert _threads(6, create) == []
    # two writers creating two rows in opposite orders, each holding its first while the other
    # creates its own: without taking turns, each waits for the other's row (a deadlock)
    halfway = threading.Barrier(2)

    def crosswise(i: int) -> None:
        first, second = ("x", "y") if i == 0 else ("y", "x")
        with Session(db) as s, s.begin():
            get_or_create(s, ModelRow, {"spec": f"ngram:n={first}"}, parameters=0)
            with contextlib.suppress(threading.BrokenBarrierError):  # the other may be waiting for this one instead
                halfway.wait(timeout=2)
            get_or_create(s, ModelRow, {"spec": f"ngram:n={second}"}, parameters=0)

    assert _threads(2, crosswise) == []
    specs += ["ngram:n=x", "ngram:n=y"]
    with Session(db) as s:
        assert s.scalar(select(func.count()).select_from(ModelRow)) == len(specs)
        assert s.scalar(select(func.count()).select_from(Hardware)) == 1
        assert s.scalar(select(func.count()).select_from(Setting)) == 1
    db.dispose()


def test_a_pairs_pooled_acceptance_counts_every_prompt_written_at_once(db_url):
    db = open_db(db_url)
    with Session(db) as s, s.begin():
        ids = [get_or_create(s, ModelRow, {"spec": spec}, parameters=p).id for spec, p in (("ngram", 0), ("big", 10))]
        wl = get_or_create(s, Workload, {"content_hash": "c" * 64}, name="w", count=24).id
        st = get_or_create(s, Setting, dict(mode="greedy", temperature=1.0, top_p=1.0, dtype="fp32", max_new_tokens=8, lenience=1.0)).id
    pair = dict(drafter_id=ids[0], verifier_id=ids[1], workload_id=wl, setting_id=st)

    def write(i: int) -> None:  # 6 writers, 4 prompts each, every prompt its own transaction
        for k in range(i * 4, i * 4 + 4):
            with Session(db) as s, s.begin():
                a = (k % 5) / 5
                values = dict(positions=4, alpha_sum=4 * a, run_sum=[4.0, 4 * a], run_count=[4, 4], visit_sum=None, visit_count=None)
                record_acceptance_prompt(s, {**pair, "prompt_index": k}, **values)

    assert _threads(6, write) == []
    with Session(db) as s:
        agg = s.scalars(select(Acceptance).filter_by(**pair)).one()
        assert agg.prompts == 24 and agg.positions == 96
        assert agg.alpha == pytest.approx(sum((k % 5) / 5 for k in range(24)) / 24)
    # the same point measured by several writers at once: one row, the last one written whole
    key = dict(model_id=ids[1], hardware_id=None, dtype="fp32", n_tokens=1, context_len=8, batch_size=1)
    with Session(db) as s, s.begin():
        key["hardware_id"] = get_or_create(
            s, Hardware, {"fingerprint": "h"}, device="cpu", device_name="CPU", threads=2, torch_version="2"
        ).id

    def measure(i: int) -> None:
        for r in range(5):
            with Session(db) as s, s.begin():
                samples = [float(i + 1)] * (r + 1)
                record_latency(s, key, median_ms=i + 1.0, p10_ms=i + 1.0, p90_ms=i + 1.0, repeats=r + 1, samples_ms=samples, floor_ms=None)

    assert _threads(4, measure) == []
    with Session(db) as s:
        (row,) = s.scalars(select(Latency)).all()
        assert row.repeats == 5 and row.samples_ms == [row.median_ms] * 5
    db.dispose()


@pytest.mark.parametrize("writers", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_profilers_at_once_store_what_one_after_another_store(pg_cluster, tiny_dirs, tmp_path, writers):
    """Writers on two workloads (each profiled by writers/2 processes at once) leave the rows of a
    serial run of the two, none lost or twice; the pooled pairs agree with their prompts."""
    files = [prompts_file(tmp_path / f"p{w}.txt", 10 * w) for w in range(2)]
    shared, serial = (pg_cluster.url(pg_cluster.create_database()) for _ in range(2))
    procs = [profile_process(tiny_dirs, files[i % 2], shared, "--json") for i in range(writers)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0 and "Error" not in err, err
    for f in files:
        assert run("profile", "--models", models(tiny_dirs), "--prompts", f, "--db", serial, *FAST).exit_code == 0
    assert keys(shared) == keys(serial)
    stored = keys(shared)
    assert len(stored["models"]) == 3 and len(stored["hardware"]) == 1 and len(stored["acceptance"]) == 2 * 3
    check_consistent(shared, repeats=2)


def test_a_killed_profiler_resumes_against_the_server(pg_url, tiny_dirs, tmp_path):
    prompts = prompts_file(tmp_path / "many.txt", 0, count=12)
    proc = profile_process(tiny_dirs, prompts, pg_url, "--max-new-tokens", "20")
    wait_for_rows(pg_url, "acceptance_prompts", 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    db = open_db(pg_url, create=False)
    with Session(db) as s:
        kept = s.execute(select(AcceptancePrompt.id, AcceptancePrompt.alpha_sum).order_by(AcceptancePrompt.id)).all()
    db.dispose()
    assert kept
    rerun = profile_process(tiny_dirs, prompts, pg_url, "--max-new-tokens", "20", "--json")
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    summary = json.loads(out)
    assert summary["skipped"] >= len(kept)
    db = open_db(pg_url, create=False)
    with Session(db) as s:
        after = s.execute(select(AcceptancePrompt.id, AcceptancePrompt.alpha_sum).order_by(AcceptancePrompt.id)).all()
    db.dispose()
    assert after[: len(kept)] == kept and len(after) == 3 * summary["workload"]["count"]
    check_consistent(pg_url, repeats=2)


def test_a_server_that_dies_mid_profile_loses_nothing_and_the_rerun_resumes(pg_programs, tiny_dirs, tmp_path):
    with pg.Cluster(durable=True) as own:  # its own server, which is killed; it keeps every commit, as a real one does
        url = own.url(own.create_database())
        prompts = prompts_file(tmp_path / "many.txt", 0, count=12)
        proc = profile_process(tiny_dirs, prompts, url, "--max-new-tokens", "20")
        wait_for_rows(url, "acceptance_prompts", 3, proc)
        seen = count(url, "acceptance_prompts")
        own.kill()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: lost the database postgresql://hsd@/"), err
        assert "rerun the same command to resume" in lines[0]
        own.start()
        kept = count(url, "acceptance_prompts")
        assert kept >= seen  # nothing committed was lost
        rerun = profile_process(tiny_dirs, prompts, url, "--max-new-tokens", "20", "--json")
        out, err = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, err
        summary = json.loads(out)
        assert summary["skipped"] >= kept and count(url, "acceptance_prompts") == 3 * summary["workload"]["count"]
        check_consistent(url, repeats=2)


# --- moving profiles, and a store of two machines -------------------------------------------------


@pytest.fixture(scope="module")
def exported(tiny_dirs, tmp_path_factory):
    """One profile of this machine, taken into SQLite and exported: (database, export file)."""
    root = tmp_path_factory.mktemp("exported")
    db, out = root / "laptop.db", root / "laptop.json"
    prompts = prompts_file(root / "p.txt", 0, count=8)
    assert run("profile", "--models", models(tiny_dirs), "--prompts", prompts, "--db", db, *FAST).exit_code == 0
    assert run("profiles", "export", out, "--db", db).exit_code == 0
    return db, out


def test_export_and_import_between_sqlite_and_the_server_lose_nothing(exported, pg_url, tmp_path):
    _, laptop = exported
    first = run("profiles", "import", laptop, "--db", pg_url, "--json")
    assert first.exit_code == 0, first.output
    doc = json.loads(laptop.read_text())
    assert json.loads(first.stdout) == {table: len(doc[table]) for table in json.loads(first.stdout)}
    assert sum(json.loads(run("profiles", "import", laptop, "--db", pg_url, "--json").stdout).values()) == 0  # merging twice adds nothing
    from_server, back = tmp_path / "server.json", tmp_path / "back.db"
    assert run("profiles", "export", from_server, "--db", pg_url).exit_code == 0
    assert json.loads(from_server.read_text()) == doc  # every value, float and list, as SQLite had it
    assert run("profiles", "import", from_server, "--db", back).exit_code == 0
    again = tmp_path / "again.json"
    assert run("profiles", "export", again, "--db", back).exit_code == 0
    assert json.loads(again.read_text()) == doc


def _other_machine(doc: dict, slower: float) -> dict:
    """``doc`` as if profiled on another machine: another fingerprint and name, every pass (and the
    host work beside it) ``slower``."""
    other = json.loads(json.dumps(doc))
    (hw,) = other["hardware"]
    hw["fingerprint"], hw["device_name"] = "a" * 16, "Team GPU box"
    for r in other["latency"]:
        r["hardware"] = hw["fingerprint"]
        for field in ("median_ms", "p10_ms", "p90_ms", "floor_ms", "host_ms"):
            if r.get(field) is not None:
                r[field] *= slower
        r["samples_ms"] = [x * slower for x in r["samples_ms"]]
    return other


def test_a_store_of_two_machines_shows_both_and_solves_for_either(exported, pg_url, tmp_path):
    _, laptop = exported
    doc = json.loads(laptop.read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_other_machine(doc, slower=3.0)))
    for f in (laptop, other):
        assert run("profiles", "import", f, "--db", pg_url).exit_code == 0
    shown = run("profiles", "show", "--db", pg_url).output
    here = doc["hardware"][0]["fingerprint"]
    ids = {line.split()[2]: line.split()[1] for line in shown.splitlines() if line.startswith("hardware #")}
    assert set(ids) == {f"{here}:", f"{'a' * 16}:"} and "Team GPU box" in shown
    assert shown.count("  latency of ") == 2 * 3  # each machine's three curves, under it

    def solve(*args: str) -> dict:
        result = run("solve", "--db", pg_url, "--json", *args)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    mine = solve()  # this machine's, by default
    assert mine["hardware"] == here
    for name in (ids[f"{'a' * 16}:"], "a" * 16, "aaaa", "team gpu box"):
        theirs = solve("--hardware", name)
        assert theirs["hardware"] == "a" * 16
        assert theirs["predicted_ms_per_token"] == pytest.approx(3 * mine["predicted_ms_per_token"])
    assert solve("--hardware", ids[f"{here}:"])["hardware"] == here
    one_line_error(run("solve", "--db", pg_url, "--hardware", "Other box"), "no hardware 'Other box' in the database")
