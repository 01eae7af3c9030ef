"""What a user types at every edge: paths, sizes and numbers.

Each case runs a command in a scratch folder (fixture ``scratch``, in ``conftest.py``) holding
``base.db`` (a profiled and solved database of two tiny models and the n-gram drafter),
``base.json`` (its export) and ``p.txt`` (the prompts), and checks the contract: a refusal is one line ``Error: ...`` with a non-zero exit, and every file
of the folder is byte for byte what it was (nothing created, nothing removed). Cases that need
root (device nodes) are skipped, with the reason, elsewhere. The fuzz tests at the end throw odd
paths (links, FIFOs, devices, folders, URL-looking names) and odd numbers (0, -1, huge, NaN, inf)
at every command's options and at import documents.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tests.conftest import EDGE_PROFILE as PROFILE
from tests.gguf_tiny import write_gguf
from tests.helpers import deadline, one_line_error
from tests.helpers import run as run_cli
from tests.tiny import tiny_llama

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="creating a device node (mknod) needs root")


def run(*args: object, env: dict[str, str] | None = None):
    with deadline():
        return run_cli(*args, env=env)


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's md5, or what it is (never read a FIFO or a device)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            rel = str(path.relative_to(folder))
            if stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.md5(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = "link -> " + os.readlink(path)
            else:
                out[rel] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


EMPTY = hashlib.md5(b"").hexdigest()


def comparable(snap: dict[str, str]) -> dict[str, str]:
    """A snapshot less what every reader of a WAL database leaves until its process ends, and
    which holds no data: the -shm index, and an empty -wal."""
    return {k: v for k, v in snap.items() if not k.endswith("-shm") and not (k.endswith("-wal") and v == EMPTY)}


def refused(folder: Path, args: list[object], fragment: str, exit_code: int | None = None, env: dict[str, str] | None = None) -> None:
    """Run ``args``; it must be refused in one line and leave every file of ``folder`` as it was."""
    before = snapshot(folder)
    one_line_error(run(*args, env=env), fragment, exit_code)
    assert comparable(snapshot(folder)) == comparable(before)


def _doc(folder: Path) -> dict:
    return json.loads((folder / "base.json").read_text())


def _write_doc(folder: Path, doc: dict, name: str = "bad.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


# --- data loss, and writes nobody asked for ------------------------------------------------------


def test_plot_never_writes_through_a_symbolic_link(scratch):
    (scratch / "plotlink.png").symlink_to("base.db")
    args = ["validate", "--db", "base.db", "--max-prompts", 1, "--max-new-tokens", 4, "--prompts", "p.txt", "--device", "cpu"]
    refused(scratch, [*args, "--plot", "plotlink.png"], "is a symbolic link")


def test_plot_replaces_a_figure_but_not_another_file(scratch):
    from hsd_planner.validation.plot import check_plot_path

    (scratch / "notes.png").write_text("my notes")
    refused(scratch, ["validate", "--db", "base.db", "--plot", "notes.png"], "not a figure of that format; pass --force")
    (scratch / "old.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    assert check_plot_path("old.png") == Path("old.png")
    assert check_plot_path("notes.png", force=True) == Path("notes.png")


@needs_root
def test_export_never_replaces_a_device_node(scratch):
    os.mknod(scratch / "mynull", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    refused(scratch, ["profiles", "export", "mynull", "--db", "base.db", "--force"], "is a character device")


@needs_root
def test_a_database_on_a_device_node_is_refused(scratch):
    os.mknod(scratch / "mynull", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    refused(scratch, ["profiles", "import", "base.json", "--db", "mynull"], "is a character device, not a database file")


@pytest.mark.parametrize(
    "db, fragment",
    [
        ("sqlite:///file:other.db?uri=true", "URI filenames"),
        ("sqlite:///other.db?mode=ro", "URI filenames"),
        ("sqlite://", "in-memory database"),
        ("sqlite:///:memory:", "in-memory database"),
    ],
)
def test_database_urls_that_bypass_the_file_checks(scratch, db, fragment):
    with sqlite3.connect(scratch / "other.db") as con:
        con.execute("CREATE TABLE customers (id INTEGER)")
    refused(scratch, ["profiles", "import", "base.json", "--db", db], fragment)


def test_a_plain_path_is_never_read_as_a_url(scratch):
    result = run("profiles", "import", "base.json", "--db", "new?x=1.db")
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.output
    assert (scratch / "new?x=1.db").is_file() and not (scratch / "new").exists()


def test_an_export_name_ending_in_a_slash_names_a_folder(scratch):
    refused(scratch, ["profiles", "export", "out dir/", "--db", "base.db"], "ends with '/'")


@pytest.mark.parametrize("name", ["base.json/.", "p.txt/..", ".", ".."])
def test_an_output_name_ending_in_a_dot_names_a_folder(scratch, name):
    """``FILE/.`` reads as FILE once the path is normalized: even with --force, FILE is never replaced."""
    refused(scratch, ["profiles", "export", name, "--db", "base.db", "--force"], "ends with '/', '.' or '..'")


def test_an_import_with_an_undefined_model_creates_no_database(scratch):
    doc = _doc(scratch)
    doc["latency"][0]["model"] = "ngram:n=5"
    _write_doc(scratch, doc)
    refused(scratch, ["profiles", "import", "bad.json", "--db", "fresh.db"], "which the document does not define")


def test_profile_refusals_create_no_database(scratch, tiny_dirs):
    draft = tiny_dirs["draft"]
    refused(scratch, ["profile", "--models", f"{draft},{draft}", "--db", "fresh.db", *PROFILE], "listed twice")
    refused(scratch, ["profile", "--models", f"ngram,{draft}:layers=0", "--db", "fresh.db", *PROFILE], "from 1 to 1,000,000")


def test_a_prompt_longer_than_the_context_is_refused_before_any_row(scratch, tiny_dirs):
    (scratch / "long.txt").write_text("\n".join(" ".join([f"w{i}"] * 600) for i in range(8)))  # the models attend over 512
    models = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    refused(scratch, ["profile", "--models", models, "--prompts", "long.txt", "--db", "base.db", *PROFILE], "more than the models' context")


def test_demo_refusals_come_before_the_database(scratch, tiny_dirs):
    target = tiny_dirs["target"]
    demo = ["demo", "--family", "smollm2", "--db", "fresh.db", "--device", "cpu", "--dtype", "fp32"]
    refused(scratch, [*demo, "--models", f"ngram,{target}:layers=0"], "from 1 to 1,000,000")
    refused(scratch, [*demo, "--models", f"{target},{target}:layers=2"], "is not the dearest candidate")


def test_a_huge_latency_grid_writes_nothing(scratch, tiny_dirs):
    models = f"ngram,{tiny_dirs['target']}"
    args = ["profile", "--models", models, "--prompts", "p.txt", "--db", "base.db", "--skip-acceptance", "--device", "cpu"]
    refused(scratch, [*args, "--latency-grid", "99999999999999999999999"], "every value is an integer from 1 to")
    refused(scratch, [*args, "--latency-grid", "1", "--context-lens", "9000"], "more than the models' context of 512")


# --- tracebacks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["generate", "--chain", "{target}", "--prompt", "w1", "--mode", "sample", "--seed", 10**26], "--seed"),
        (["validate", "--db", "base.db", "--plan", 10**23], "--plan"),
        (["solve", "--db", "base.db", "--context-len", 10**23], "--context-len"),
        (["generate", "--chain", "{target}", "--prompt", "w1", "--max-new-tokens", 10**30], "--max-new-tokens"),
        (["profile", "--models", "{target}", "--repeats", 1001], "1<=x<=1000"),
        (["generate", "--chain", "{target}", "--prompt", "w1", "--mode", "sample", "--temperature", "nan"], "not a finite number"),
        (["generate", "--chain", "{target}", "--prompt", "w1", "--mode", "sample", "--top-p", "nan"], "not a finite number"),
        (["distill", "--target", "{target}", "--init", "layers=1", "--out", "s", "--lr", "nan"], "not a finite number"),
        (["distill", "--target", "{target}", "--init", "layers=1", "--out", "s", "--lr", "inf"], "not a finite number"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(scratch, tiny_dirs, args, fragment):
    refused(scratch, [str(a).format(**tiny_dirs) for a in args], fragment, exit_code=2)


def test_bounds_are_shown_in_help():
    assert "1<=x<=1000" in run("profile", "--help").output


@pytest.mark.parametrize(
    "config, fragment",
    [
        ("5", "holds a JSON int"),
        ("[]", "holds a JSON list"),
        ("{", "is not JSON"),
        ('{"vocab_size": ' + "9" * 5000 + "}", "config.json holds a number written with 5,000 characters"),
    ],
    ids=["int", "list", "broken", "long number"],
)
def test_model_folders_with_odd_configs(scratch, tiny_dirs, config, fragment):
    model = scratch / "m"
    shutil.copytree(tiny_dirs["target"], model)
    (model / "config.json").write_text(config)
    refused(scratch, ["generate", "--chain", "./m", "--prompt", "w1", "--device", "cpu"], fragment)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_malicious_pickle_is_refused_in_one_line(scratch, tiny_dirs):
    model = scratch / "m"
    shutil.copytree(tiny_dirs["target"], model)
    (model / "model.safetensors").unlink()
    with open(model / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"model.embed_tokens.weight": _Evil()}, fh)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refused(scratch, ["generate", "--chain", "./m", "--prompt", "w1", "--device", "cpu"], "cannot load")
    assert not (scratch / "pwned").exists()
    assert not [w for w in caught if "pickle" in str(w.message)]  # it would be a second line on a user's terminal


def test_overlong_names(scratch):
    refused(scratch, ["generate", "--chain", "x" * 100_000, "--prompt", "w1"], "a spec has at most 4,096")
    refused(scratch, ["generate", "--chain", "x" * 300, "--prompt", "w1"], "too long a path")
    refused(scratch, ["profiles", "show", "--db", "x" * 300], "too long a path")


def test_symbolic_link_loops(scratch):
    (scratch / "loop.db").symlink_to("loop.db")
    refused(scratch, ["profiles", "show", "--db", "loop.db"], "symbolic link loop")
    refused(scratch, ["profiles", "show"], "symbolic link loop", env={"HSD_PLAN_DB": str(scratch / "loop.db")})
    refused(scratch, ["profiles", "import", "loop.db", "--db", "base.db"], "symbolic link loop")
    refused(scratch, ["profiles", "export", "loop.db", "--db", "base.db", "--force"], "symbolic link loop")


@needs_root
def test_reading_a_device_is_refused_up_front(scratch):
    refused(scratch, ["profiles", "import", "/dev/zero", "--db", "base.db"], "is a character device, not a regular file")
    refused(scratch, ["solve", "--profile-file", "/dev/zero"], "is a character device")


def test_a_cache_that_is_a_file_is_refused_before_converting(scratch, monkeypatch):
    (scratch / "cachefile").write_text("not a folder")
    write_gguf(tiny_llama(seed=0, layers=1), scratch / "m.gguf")
    monkeypatch.setenv("HSD_PLAN_CACHE", str(scratch / "cachefile"))
    refused(scratch, ["generate", "--chain", "m.gguf", "--prompt", "w1"], "point HSD_PLAN_CACHE at a writable folder")


_FILL = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import transformers
    from hsd_runtime.models import sources

    source = sys.argv[1]
    real_model, real_tok = transformers.AutoModelForCausalLM.from_pretrained, transformers.AutoTokenizer.from_pretrained

    def slow_model(_folder, gguf_file=None, **kw):  # the real conversion takes a minute: long enough to overlap
        time.sleep(3)
        return real_model(source, **kw)

    transformers.AutoModelForCausalLM.from_pretrained = slow_model
    transformers.AutoTokenizer.from_pretrained = lambda _folder, gguf_file=None, **kw: real_tok(source, **kw)
    print(sources.convert_gguf(Path(sys.argv[2])))
    """
)


def test_two_processes_fill_the_model_cache_at_once(tmp_path, tiny_dirs):
    gguf = tmp_path / "m.gguf"
    write_gguf(tiny_llama(seed=0, layers=1), gguf)  # a whole GGUF: its reading is replaced by the slow one above
    env = {**os.environ, "HSD_PLAN_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FILL, str(tiny_dirs["target"]), str(gguf)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    folders = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(folders) == 1 and (Path(folders.pop()) / "config.json").is_file()
    assert not list((tmp_path / "cache" / "converted").glob(".tmp-*"))  # no half-written folder left


def test_imported_token_ids_beyond_the_vocabulary(scratch, tiny_dirs):
    doc = _doc(scratch)
    doc["continuations"][0]["tokens"][0] = 10**6
    _write_doc(scratch, doc)
    refused(scratch, ["profiles", "import", "bad.json", "--db", "fresh.db"], "beyond the vocabulary")
    # a row that got in anyway (an older import) is refused at the next profile, not an IndexError
    with sqlite3.connect(scratch / "base.db") as con:
        con.execute("UPDATE continuations SET tokens = '[1000000]'")
        con.execute("DELETE FROM acceptance_prompts")  # so that the next profile measures acceptance over them
    models = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    refused(scratch, ["profile", "--models", models, "--prompts", "p.txt", "--db", "base.db", *PROFILE], "outside its vocabulary")


def test_a_model_with_nan_weights_while_sampling(scratch, tiny_dirs):
    from safetensors.torch import load_file, save_file

    model = scratch / "nan"
    shutil.copytree(tiny_dirs["draft"], model)
    weights = load_file(model / "model.safetensors")
    save_file({k: v * float("nan") for k, v in weights.items()}, model / "model.safetensors", metadata={"format": "pt"})
    chain = f"./nan,{tiny_dirs['target']}"
    args = ["generate", "--chain", chain, "--widths", 2, "--prompt", "w1", "--mode", "sample", "--device", "cpu", "--no-warmup"]
    refused(scratch, args, "not finite")


# --- hangs ----------------------------------------------------------------------------------------


def test_fifos_are_refused_without_blocking(scratch):
    os.mkfifo(scratch / "pipe")
    refused(scratch, ["solve", "--profile-file", "pipe"], "is a FIFO")
    refused(scratch, ["profiles", "import", "pipe", "--db", "base.db"], "is a FIFO")
    refused(scratch, ["profiles", "export", "pipe", "--db", "base.db", "--force"], "is a FIFO")
    refused(scratch, ["profiles", "show", "--db", "pipe"], "is a FIFO")
    refused(scratch, ["profile", "--models", "ngram,x", "--prompts", "pipe"], "is a FIFO")


def test_validate_refuses_another_dtype_than_profiled(scratch):
    with sqlite3.connect(scratch / "base.db") as con:
        profiled = con.execute("SELECT dtype FROM settings").fetchone()[0]
    other = "fp16" if profiled != "fp16" else "fp32"
    args = ["validate", "--db", "base.db", "--dtype", other, "--prompts", "p.txt", "--device", "cpu"]
    refused(scratch, args, f"the plans were profiled in {profiled}, and a profile predicts only its own dtype")


def test_imports_run_in_bulk_with_progress(scratch):
    from hsd_planner.store import open_db
    from hsd_planner.store.exchange import ProfileDocument, document_rows, import_document

    doc = _doc(scratch)
    row = doc["latency"][0]
    doc["latency"] = [row | {"n_tokens": n, "context_len": ctx} for n in range(1, 101) for ctx in range(200)]  # 20,000 rows
    parsed = ProfileDocument.model_validate(doc)
    steps: list[int] = []
    with deadline(60):  # one row at a time took 1.7 ms: 34 s
        added = import_document(open_db(str(scratch / "fresh.db")), parsed, progress=steps.append)
    assert added["latency"] == 20_000 and sum(steps) == document_rows(parsed)
    again = import_document(open_db(str(scratch / "fresh.db")), parsed)
    assert sum(again.values()) == 0


# --- bad input silently accepted ------------------------------------------------------------------


def test_training_stops_on_a_non_finite_loss(scratch, tiny_dirs):
    args = ["distill", "--target", tiny_dirs["target"], "--init", "layers=1", "--out", "s", "--prompts", "p.txt", "--reserve", 0]
    result = run(*args, "--device", "cpu", "--lr", "1e30", "--steps", 4, "--train-batch", 1, "--max-new-tokens", 4)
    one_line_error(result, "lower --lr")
    assert not (scratch / "s" / "distill.json").exists() and not (scratch / "s" / "config.json").exists()


@pytest.mark.parametrize(
    "change, fragment",
    [
        (lambda d: d["latency"].append(d["latency"][0] | {"median_ms": 99.0}), "repeats the key of an earlier row"),
        (lambda d: d["acceptance"][0].update(run_lengths=[]), "at least 1 item"),
        (lambda d: d["continuations"][0]["tokens"].append(-1), "greater than or equal to 0"),
    ],
)
def test_import_documents_that_are_refused_whole(scratch, change, fragment):
    doc = _doc(scratch)
    change(doc)
    _write_doc(scratch, doc)
    refused(scratch, ["profiles", "import", "bad.json", "--db", "base.db"], fragment)


def test_identical_repeated_rows_import_once(scratch):
    doc = _doc(scratch)
    doc["latency"].append(dict(doc["latency"][0]))
    _write_doc(scratch, doc)
    result = run("profiles", "import", "bad.json", "--db", "fresh.db", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["latency"] == len(doc["latency"]) - 1


# --- exit codes and messages ----------------------------------------------------------------------


def test_a_bare_command_group(scratch):
    refused(scratch, ["profiles"], "needs a command: export, import, show", exit_code=2)


@pytest.mark.parametrize("command", ["generate", "validate"])
def test_ctrl_c_is_one_line(scratch, tiny_dirs, monkeypatch, command):
    def interrupt(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("hsd_planner.cli.generate"), "generate_text", interrupt)
    monkeypatch.setattr(importlib.import_module("hsd_planner.cli.validate"), "run_validation", interrupt)
    args = {
        "generate": ["generate", "--chain", tiny_dirs["target"], "--prompt", "w1", "--device", "cpu"],
        "validate": ["validate", "--db", "base.db", "--prompts", "p.txt", "--device", "cpu"],
    }[command]
    result = run(*args)
    one_line_error(result, "interrupted", exit_code=130)


def test_messages_name_what_was_typed(scratch, tiny_dirs):
    refused(scratch, ["generate", "--chain", f"{tiny_dirs['target']}:layers=99999999999999999999", "--prompt", "w1"], "from 1 to 1,000,000")
    refused(scratch, ["profiles", "import", "base.db", "--db", "fresh.db"], "is an SQLite database, not an exported profile")
    refused(scratch, ["solve", "--profile-file", "base.db"], "is an SQLite database, not an exported profile")
    refused(scratch, ["profile", "--models", ",,,"], "--models ',,,' names no model")
    refused(scratch, ["profiles", "import", "missing.json", "--db", "fresh.db"], "FILE missing.json does not exist")


# --- fuzz: odd paths and odd numbers at every option -----------------------------------------------


def _odd_paths(folder: Path) -> dict[str, str]:
    """Names of odd things made in ``folder``: links, a FIFO, a folder, a device, URL-looking names."""
    (folder / "link-to-db").symlink_to("base.db")
    (folder / "link-to-json").symlink_to("base.json")
    (folder / "dangling").symlink_to("nowhere")
    (folder / "loop").symlink_to("loop")
    os.mkfifo(folder / "fifo")
    (folder / "adir").mkdir()
    names = {
        "link-to-db": "link-to-db",
        "link-to-json": "link-to-json",
        "dangling": "dangling",
        "loop": "loop",
        "fifo": "fifo",
        "adir": "adir",
        "slash": "adir/",
        "query": "q?x=1.db",
        "percent": "%41.db",
        "file-uri": "file:z.db",
        "sqlite-uri": "sqlite:///file:y.db?uri=true",
        "memory": "sqlite://",
        "http": "http://127.0.0.1:1/x",
        "empty": "",
        "dev-null": "/dev/null",
    }
    if ROOT:
        os.mknod(folder / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        names["dev"] = "dev"
    return names


PATH_COMMANDS = {
    "show --db": lambda p: ["profiles", "show", "--db", p],
    "import --db": lambda p: ["profiles", "import", "base.json", "--db", p],
    "solve --db": lambda p: ["solve", "--db", p],
    "export FILE": lambda p: ["profiles", "export", p, "--db", "base.db"],
    "export FILE --force": lambda p: ["profiles", "export", p, "--db", "base.db", "--force"],
    "import FILE": lambda p: ["profiles", "import", p, "--db", "base.db"],
    "solve --profile-file": lambda p: ["solve", "--profile-file", p],
    "profile --prompts": lambda p: ["profile", "--models", "ngram,nonexistent-model", "--prompts", p],
    # a plan that does not exist stops validate after its --plot is checked: no model runs
    "validate --plot": lambda p: ["validate", "--db", "base.db", "--plot", p, "--plan", 999],
}


def test_fuzz_paths(base, tmp_path, monkeypatch):
    """Every odd path at every path option: success, or one line and every file unchanged.

    A success may write where it was told to (an export over a link with --force replaces the
    link), but the database stays a database and the export it was made from stays as it was.
    """
    monkeypatch.delenv("HSD_PLAN_DB", raising=False)
    (tmp_path / "probe").mkdir()
    kinds = list(_odd_paths(tmp_path / "probe"))
    for i, (what, build) in enumerate(PATH_COMMANDS.items()):
        for j, kind in enumerate(kinds):
            folder = tmp_path / f"case-{i}-{j}"
            folder.mkdir()
            for name in ("base.db", "base.json", "p.txt"):
                shutil.copy(base / name, folder / name)
            name = _odd_paths(folder)[kind]
            monkeypatch.chdir(folder)
            before = snapshot(folder)
            result = run(*build(name))
            label = (what, kind, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (label, repr(result.exception))
            after = snapshot(folder)
            if result.exit_code != 0:
                assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: "), label
                assert comparable(after) == comparable(before), label
            assert after["base.json"] == before["base.json"] and after["p.txt"] == before["p.txt"], label
            assert (folder / "base.db").read_bytes()[:16] == b"SQLite format 3\x00", label


NUMBERS = ["0", "-1", str(10**30), "nan", "inf", "-inf", "1e400", "0x10", ""]

NUMBER_OPTIONS = {
    "generate": (
        ["generate", "--chain", "{target}", "--prompt", "w1", "--device", "cpu", "--no-warmup"],
        ["--max-new-tokens", "--seed", "--temperature", "--top-p", "--top-k", "--widths"],
    ),
    "profile": (
        ["profile", "--models", "ngram,{draft},{target}", "--prompts", "p.txt", "--db", "base.db", *PROFILE],
        ["--repeats", "--latency-grid", "--context-lens", "--max-new-tokens", "--max-prompts", "--seed", "--temperature", "--top-p"],
    ),
    "solve": (["solve", "--db", "base.db"], ["--t-max", "--top", "--max-depth", "--context-len", "--tree-budget", "--temperature"]),
    "validate": (
        ["validate", "--db", "base.db", "--prompts", "p.txt", "--device", "cpu", "--max-new-tokens", "2"],
        ["--plan", "--repeats", "--max-new-tokens", "--max-prompts"],
    ),
    "distill": (
        [
            "distill",
            "--target",
            "{target}",
            "--init",
            "layers=1",
            "--out",
            "s",
            "--prompts",
            "p.txt",
            "--device",
            "cpu",
            "--steps",
            "1",
            "--train-batch",
            "1",
            "--max-new-tokens",
            "2",
        ],
        ["--lr", "--steps", "--train-batch", "--temperature", "--seed", "--checkpoint-every", "--max-new-tokens"],
    ),
    "demo": (
        ["demo", "--family", "smollm2", "--models", "{target}:layers=0", "--db", "fresh.db"],
        ["--rounds", "--repeats", "--max-prompts", "--validate-prompts", "--max-new-tokens"],
    ),
}


@pytest.mark.parametrize("command", list(NUMBER_OPTIONS))
def test_fuzz_numbers(base, tiny_dirs, tmp_path, monkeypatch, command):
    """0, -1, huge, NaN, inf at every numeric option: success, or one line and no file changed.

    Every case runs in a fresh copy of the base folder. The base arguments make a success cheap
    (the profile is stored already, one distillation step, the demo stops at its bad model spec).
    """
    monkeypatch.delenv("HSD_PLAN_DB", raising=False)
    args, options = NUMBER_OPTIONS[command]
    args = [a.format(**tiny_dirs) for a in args]
    for option in options:
        for i, value in enumerate(NUMBERS):
            folder = tmp_path / f"{option.strip('-')}-{i}"
            folder.mkdir()
            for name in ("base.db", "base.json", "p.txt"):
                shutil.copy(base / name, folder / name)
            monkeypatch.chdir(folder)
            before = snapshot(folder)
            result = run(*args, option, value)
            label = (command, option, value, result.output[-500:])
            assert result.exception is None or isinstance(result.exception, SystemExit), (label, repr(result.exception))
            if result.exit_code != 0:
                assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: "), label
                assert comparable(snapshot(folder)) == comparable(before), label


IMPORT_FIELDS = [
    ("latency", "median_ms"),
    ("latency", "n_tokens"),
    ("latency", "context_len"),
    ("latency", "repeats"),
    ("acceptance", "alpha"),
    ("acceptance", "positions"),
    ("acceptance", "prompts"),
    ("continuations", "prompt_index"),
    ("acceptance_prompts", "alpha_sum"),
    ("acceptance_prompts", "positions"),
    ("models", "parameters"),
    ("models", "layers"),
    ("models", "vocab_size"),
    ("workloads", "count"),
    ("hardware", "threads"),
]
IMPORT_VALUES = [0, -1, 10**30, float("nan"), float("inf"), 1.5, "7", None]


def test_fuzz_import_numbers(scratch):
    """Odd numbers in every numeric field of an import: imported, or one line and no database created."""
    doc = _doc(scratch)
    for table, field in IMPORT_FIELDS:
        for value in IMPORT_VALUES:
            bad = json.loads(json.dumps(doc))
            bad[table][0][field] = value
            if table == "acceptance":
                bad[table][0]["run_lengths"][0] = value if isinstance(value, float) else 1.0
            _write_doc(scratch, bad)
            before = snapshot(scratch)
            result = run("profiles", "import", "bad.json", "--db", "fresh.db")
            label = (table, field, value, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (label, repr(result.exception))
            if result.exit_code != 0:
                assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: "), label
                assert snapshot(scratch) == before, label
            for leftover in scratch.glob("fresh.db*"):
                leftover.unlink()
