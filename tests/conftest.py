"""Shared fixtures.

``HSD_PLAN_TEST_CPU=avx2`` makes the in-process tests see an AVX2-only CPU on any x86 machine: the
capability probes answer no AMX, no AVX512-BF16 and no VNNI, and oneDNN's weight reorder refuses
bf16 as it does there. Add ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` so the kernels
dispatch as there too. Python subprocesses (the CLI run as a program) see the same CPU: the
folder ``tests/cpu_view`` goes first on their ``PYTHONPATH``, and its ``sitecustomize`` answers
the probes the same way at their start.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from hsd_runtime.models import packing
from tests import pg
from tests.helpers import run as run_cli
from tests.tiny import save_tiny_model

# the subprocesses' sitecustomize is no test module: collecting it for doctests imports a second
# ``sitecustomize`` where the interpreter has its own (Debian's python does)
collect_ignore = ["cpu_view"]


def pytest_configure(config: pytest.Config) -> None:
    """Under ``pytest -n W`` (pytest-xdist) the W workers share the cores: torch and every CLI
    subprocess a test starts get cores // W threads, so the workers do not oversubscribe them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


@pytest.fixture(autouse=True)
def corpus_folder(tmp_path_factory, monkeypatch) -> Path:
    """Corpora (cached target data) go to a folder of the test session's, never the user's model cache."""
    from hsd_planner.training import corpus

    folder = tmp_path_factory.getbasetemp() / "corpora"
    monkeypatch.setattr(corpus, "corpus_root", lambda: folder)
    return folder


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two tiny models sharing a tokenizer (target, draft) and one with another tokenizer."""
    root = tmp_path_factory.mktemp("models")
    return {
        "target": save_tiny_model(root / "target", seed=0, layers=4),
        "draft": save_tiny_model(root / "draft", seed=1, layers=2),
        "other": save_tiny_model(root / "other", seed=2, layers=2, words=[f"x{i}" for i in range(60)]),
    }


@pytest.fixture(autouse=True)
def memory_log(request):
    """With ``HSD_PLAN_TEST_MEMORY=FOLDER``, append each test's peak resident memory (and what its
    process still holds after it) to ``FOLDER/<worker>.jsonl``: which test needs what, and what a
    worker keeps between tests. The peak is reset before each test (``/proc/self/clear_refs``)."""
    folder = os.environ.get("HSD_PLAN_TEST_MEMORY")
    if not folder or not Path("/proc/self/clear_refs").exists():
        yield
        return
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    yield
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    mib = {k: int(status[k].split()[0]) // 1024 for k in ("VmHWM", "VmRSS")}
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{worker}.jsonl", "a") as fh:
        fh.write(json.dumps({"test": request.node.nodeid, "peak_mib": mib["VmHWM"], "after_mib": mib["VmRSS"]}) + "\n")


@pytest.fixture(scope="module")
def qwen_loader():
    """One fp32 loader for a module's Qwen tests: the 0.5B, the 1.5B and their int8 copies load once
    per module and are freed when it ends. The tests that use it are one xdist group (``qwen``), so
    one worker holds them; a loader kept for the whole session held 12.5 GiB while that worker went
    on with other tests."""
    from hsd_runtime import ModelLoader

    loader = ModelLoader(device="cpu", dtype="fp32")
    yield loader
    # free them before the next module loads its own: pytest still holds the fixture's value here,
    # so collecting alone would free nothing
    loader.release()
    gc.collect()


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch) -> None:
    """The suite's own workers share the cores (and CI machines are shared): profiling and
    validation in a test do not watch for other work (in-process), and a CLI subprocess keeps
    what it times on a busy machine. tests/test_contention.py tests the watching itself."""
    from hsd_planner.profiling import contention

    monkeypatch.setattr(contention, "probe", lambda _threads: None)
    monkeypatch.setenv("HSD_PLAN_ALLOW_BUSY", "1")


@pytest.fixture(autouse=True)
def isolated_db(tmp_path, monkeypatch) -> Path:
    """Every test gets its own database through the environment, as a user would set it."""
    path = tmp_path / "hsd-plan.db"
    monkeypatch.setenv("HSD_PLAN_DB", str(path))
    return path


@pytest.fixture(scope="session")
def pg_programs() -> None:
    """The PostgreSQL server programs are installed. Where they are not, the tests that need them
    fail, unless ``HSD_PLAN_SKIP_PG=1`` asks to skip them."""
    reason = pg.missing_reason()
    if reason is not None:
        if os.environ.get(pg.SKIP_ENV) == "1":
            pytest.skip(f"{reason}; skipped as {pg.SKIP_ENV}=1 asks")
        pytest.fail(f"{reason}; set {pg.SKIP_ENV}=1 to skip the PostgreSQL tests", pytrace=False)


@pytest.fixture(scope="session")
def pg_cluster(pg_programs):
    """A throwaway PostgreSQL server for the whole session (see :mod:`tests.pg`), removed after."""
    with pg.Cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """A fresh, empty database on the test server, dropped after the test: its URL."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, isolated_db) -> str:
    """The test's database on each backend: the SQLite file of ``isolated_db``, or a fresh
    database on the test server (the same tests run on both)."""
    return str(isolated_db) if request.param == "sqlite" else request.getfixturevalue("pg_url")


# What torch raises on a CPU without AVX512 (BW, VL, DQ) or AVX-NE-CONVERT, e.g. an AVX2-only EPYC.
NO_BF16 = "mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"


def refuse_bf16_packing(mp: pytest.MonkeyPatch) -> None:
    """Make oneDNN's weight reorder refuse bf16 as on an AVX2-only CPU (fp32 still packs).

    The operator itself is replaced, so any code path that packs bf16 without asking first fails
    as it would there; the cached answer of :func:`hsd_runtime.can_prepack` is cleared.
    """
    reorder = torch.ops.mkldnn._reorder_linear_weight

    def refuse(weight, *args):
        if weight.dtype == torch.bfloat16:
            raise RuntimeError(NO_BF16)
        return reorder(weight, *args)

    mp.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    packing._cpu_answer.cache_clear()


CPU_VIEW = Path(__file__).resolve().parent / "cpu_view"  # sitecustomize for subprocesses


@pytest.fixture(autouse=True, scope="session")
def emulated_cpu():
    """Answer as an AVX2-only CPU when ``HSD_PLAN_TEST_CPU=avx2`` (see the module docstring)."""
    kind = os.environ.get("HSD_PLAN_TEST_CPU", "")
    if kind not in ("", "avx2"):
        raise pytest.UsageError(f"HSD_PLAN_TEST_CPU={kind!r}: only avx2 can be emulated")
    if not kind:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_vnni_supported"):
            mp.setattr(torch.cpu, probe, lambda: False, raising=False)
        refuse_bf16_packing(mp)
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(CPU_VIEW), os.environ.get("PYTHONPATH")])))
        yield
    packing._cpu_answer.cache_clear()


# --- the scratch folder of the edge tests (tests/test_edges*.py) --------------------------------------

# a profile of the tiny models in a second: what the base folder's database holds
EDGE_PROFILE = ["--latency-grid", "1,2", "--context-lens", "8", "--repeats", "1", "--max-new-tokens", "4", "--device", "cpu"]


@pytest.fixture(scope="module")
def base(tiny_dirs, tmp_path_factory) -> Path:
    """A folder with base.db (profiled, solved), base.json (its export) and p.txt, made once."""
    folder = tmp_path_factory.mktemp("base")
    (folder / "p.txt").write_text("\n".join(f"w{i} w{i + 1} w{i}" for i in range(8)))
    models = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    db = folder / "base.db"
    result = run_cli("profile", "--models", models, "--prompts", folder / "p.txt", "--db", db, *EDGE_PROFILE)
    assert result.exit_code == 0, result.output
    assert run_cli("solve", "--db", db).exit_code == 0
    assert run_cli("profiles", "export", folder / "base.json", "--db", db).exit_code == 0
    with sqlite3.connect(db) as con:  # everything in the main file: copies need no -wal beside them
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return folder


@pytest.fixture
def scratch(base, tmp_path, monkeypatch) -> Path:
    """A private copy of the base folder, the working directory of the test."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    for name in ("base.db", "base.json", "p.txt"):
        shutil.copy(base / name, folder / name)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("HSD_PLAN_DB", raising=False)
    return folder
