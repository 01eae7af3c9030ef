"""Writes nobody asked for: files SQLite owns, refusals that must come before the first write,
imports that must refuse a value of the wrong type, and id options past what SQLite stores.

Each case runs in the scratch folder of :mod:`tests.test_edges` (a profiled and solved
``base.db``, its export ``base.json``, prompts ``p.txt``) and checks the contract there: one line
``Error: ...``, a non-zero exit, every file byte for byte what it was.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path

import click
import pytest

from hsd_planner.cli import cli
from hsd_planner.limits import SQLITE_INT_MAX
from tests.test_edges import _doc, _write_doc, refused, run

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"

# --- files SQLite owns ---------------------------------------------------------------------------

WRITERS = [
    ["profiles", "export", "{out}", "--db", "base.db", "--force"],
    ["export", "--format", "vllm", "--out", "{out}", "--db", "base.db", "--force"],
]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("writer", WRITERS, ids=["profiles export", "export"])
def test_a_live_databases_sidecar_files_are_never_replaced(scratch, writer, suffix):
    """Another process holds base.db open in WAL mode with a committed row in its -wal file:
    replacing that file would lose the row and corrupt the database for every reader."""
    live = sqlite3.connect(scratch / "base.db")
    try:
        live.execute("PRAGMA journal_mode=WAL")
        live.execute("CREATE TABLE IF NOT EXISTS scratch_note (x)")
        live.execute("INSERT INTO scratch_note VALUES (42)")
        live.commit()
        (scratch / f"base.db{suffix}").touch()  # -journal is not there in WAL mode: a stale one counts too
        args = [a.format(out=f"base.db{suffix}") for a in writer]
        refused(scratch, args, "of the SQLite database base.db; an output never replaces one")
        assert live.execute("SELECT x FROM scratch_note").fetchall() == [(42,)]
        assert sqlite3.connect(scratch / "base.db").execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        live.close()


def test_a_sidecar_name_of_no_database_is_free(scratch):
    """``notes-wal`` beside a file that is not a database is an ordinary name."""
    (scratch / "notes").write_text("plain text")
    result = run("export", "--format", "vllm", "--out", "notes-wal", "--db", "base.db")
    assert result.exit_code == 0, result.output
    assert (scratch / "notes-wal").read_text().startswith("# hsd-plan plan")


def test_an_empty_file_counts_as_a_database_before_its_first_write(scratch):
    (scratch / "new.db").touch()
    refused(
        scratch,
        ["export", "--format", "vllm", "--out", "new.db-journal", "--db", "base.db"],
        "rollback journal of the SQLite database new.db",
    )


def test_vocab_refuses_a_database_before_loading_the_model(scratch, tiny_dirs):
    refused(
        scratch,
        ["vocab", "--model", tiny_dirs["draft"], "--prompts", "p.txt", "--size", "4", "--out", "base.db", "--force"],
        "is an SQLite database",
    )


# --- output names: what an empty name and a trailing '/' mean ---------------------------------------


@pytest.mark.parametrize(
    "out, fragment",
    [("", "is empty"), ("  ", "is empty"), ("folder/", "names a folder"), ("base.json/", "names a folder")],
)
def test_output_names_that_are_not_a_file_name(scratch, tiny_dirs, out, fragment):
    """An empty --out never means standard output, and a trailing '/' names a folder (refused:
    an output is a file), also where a file of that name exists."""
    (scratch / "folder").mkdir()
    refused(scratch, ["export", "--format", "vllm", "--out", out, "--db", "base.db", "--force"], fragment)
    refused(scratch, ["vocab", "--model", tiny_dirs["draft"], "--prompts", "p.txt", "--size", "4", "--out", out, "--force"], fragment)
    refused(scratch, ["profiles", "export", out, "--db", "base.db", "--force"], fragment)


# --- refusals before the first write -------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--export", "vllm", "--model-map", "nothere=x"], "not in the plan"),
        (["--export", "vllm", "--stack-version", "7.7"], "no mapping for vLLM 7.7"),
        (["--export", "json", "--stack-version", "9"], "schema version"),
        (["--batch-sizes", "1,2"], "no latency"),
    ],
)
def test_solve_refusals_store_nothing(scratch, args, fragment):
    """The solve, its batch schedule and its export land together or not at all."""
    refused(scratch, ["solve", "--db", "base.db", *args], fragment)


def test_a_solve_with_its_export_is_stored_once(scratch):
    def solves() -> int:
        with sqlite3.connect(scratch / "base.db") as con:
            return con.execute("SELECT count(*) FROM solves").fetchone()[0]

    before = solves()
    result = run("solve", "--db", "base.db", "--export", "vllm")
    assert result.exit_code == 0, result.output
    assert solves() == before + 1


def _header_only_gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))  # version 3, no tensors, no metadata
    return path


@pytest.mark.parametrize("engine", ["torch", pytest.param("llamacpp", marks=pytest.mark.skipif(SKIPPED, reason="no llama.cpp engine"))])
def test_a_gguf_of_only_a_header_makes_no_cache_entry(scratch, tmp_path, monkeypatch, engine):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HSD_PLAN_CACHE", str(cache))
    gguf = _header_only_gguf(scratch / "h.gguf")
    refused(scratch, ["generate", "--chain", gguf, "--prompt", "hi", "--engine", engine], "not a language model's GGUF file")
    assert not cache.exists()


def test_a_cut_gguf_is_refused_before_the_cache(scratch, tmp_path, monkeypatch):
    from tests.gguf_tiny import char_gguf

    cache = tmp_path / "cache"
    monkeypatch.setenv("HSD_PLAN_CACHE", str(cache))
    data = char_gguf(tmp_path / "whole.gguf", seed=0).read_bytes()
    cut = scratch / "cut.gguf"
    for size in (64, len(data) // 2):
        cut.write_bytes(data[:size])
        refused(scratch, ["generate", "--chain", cut, "--prompt", "hi"], "is not a whole GGUF file")
    assert not cache.exists()


# --- imports store exactly the types the schema names ----------------------------------------------


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda d: d.update(schema_version=1.0), "schema version 1.0"),
        (lambda d: d.update(schema_version=True), "schema version True"),
        (lambda d: d["latency"][0].update(median_ms="5.0"), "valid number"),
        (lambda d: d["latency"][0].update(median_ms=True), "valid number"),
        (lambda d: d["latency"][0].update(repeats=2.0), "valid integer"),
        (lambda d: d["hardware"][0].update(threads="2"), "valid integer"),
        (lambda d: d["hardware"][0].update(threads=True), "valid integer"),
        (lambda d: d["latency"][0].update(n_tokens=0), "only a steered model's projection row"),
        (lambda d: d["models"][0].update(spec=7), "valid string"),
    ],
)
def test_imports_refuse_values_of_the_wrong_type(scratch, change, fragment):
    doc = _doc(scratch)
    change(doc)
    _write_doc(scratch, doc)
    refused(scratch, ["profiles", "import", "bad.json", "--db", "base.db"], fragment)
    refused(scratch, ["solve", "--profile-file", "bad.json"], fragment)


def test_integers_where_floats_are_due_import(scratch):
    """JSON has one number type: a latency written ``5`` is the float 5.0."""
    doc = _doc(scratch)
    doc["latency"][0]["median_ms"] = int(doc["latency"][0]["p90_ms"]) + 1 if doc["latency"][0]["p90_ms"] >= 1 else 1
    doc["latency"][0]["p90_ms"] = max(doc["latency"][0]["p90_ms"], doc["latency"][0]["median_ms"])
    path = _write_doc(scratch, doc)
    result = run("profiles", "import", path, "--db", "fresh.db", "--json")
    assert result.exit_code == 0, result.output


# --- id options --------------------------------------------------------------------------------


def _int_options(command: click.Command, path: str = "hsd-plan") -> list[tuple[str, click.Parameter]]:
    out = []
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            out += _int_options(sub, f"{path} {name}")
    for param in command.params:
        if isinstance(param.type, click.IntRange) or param.type is click.INT:
            out.append((f"{path} {param.opts[0]}", param))
    return out


def test_every_integer_option_has_bounds_sqlite_can_store():
    """An unbounded integer option lets 2**63 through to SQLite (OverflowError) or to a loop."""
    options = _int_options(cli)
    assert options, "no integer options found"
    for name, param in options:
        assert isinstance(param.type, click.IntRange), f"{name} is an unbounded INT"
        assert param.type.max is not None and param.type.max <= SQLITE_INT_MAX, f"{name} has no upper bound"
        assert param.type.min is not None, f"{name} has no lower bound"


def test_a_plan_id_past_sqlites_integers(scratch):
    refused(scratch, ["export", "--format", "vllm", "--plan", SQLITE_INT_MAX + 1, "--db", "base.db"], "is not in the range", exit_code=2)
    refused(scratch, ["validate", "--plan", SQLITE_INT_MAX + 1, "--db", "base.db"], "is not in the range", exit_code=2)
    refused(scratch, ["export", "--format", "vllm", "--plan", SQLITE_INT_MAX, "--db", "base.db"], "no plan with id")


def test_a_missing_required_option_is_one_line(scratch):
    """click lists a choice option's values one per line; the refusal stays one line."""
    refused(scratch, ["export", "--db", "base.db"], "Missing option '--format'. Choose from: json, hf", exit_code=2)
