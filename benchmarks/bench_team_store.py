"""Many profilers on one PostgreSQL server, beside SQLite: errors, lost or duplicated rows, time.

Two measurements, each with 1, 2 and 4 writers at once on a fresh database, on a throwaway
PostgreSQL server (tests/pg.py) and on an SQLite file, medians over repeats (ratios are taken
within this run):

- **profile**: ``hsd-plan profile`` processes on the tests' tiny models (ngram, a 2-layer and a
  4-layer Llama sharing a tokenizer), N prompts split evenly among the writers, each writer its own
  prompt file (a workload) and all of them the same models and machine. A unit is one profiled
  prompt (the verifiers' continuations and the three pairs' acceptance). Time: from the launch of
  the writers to the last one's exit (each loads torch and the models first).
- **store**: writer processes that only write, through the store's own functions, N units split
  among them: one latency point and one prompt's acceptance of one shared pair (pooled again on
  every write) per unit. Time: from a common start, after every writer has connected, to the last
  one's finish; what a store costs a profiler besides measuring.

After each run every row is counted against what the writers were given: an error of any writer,
a row missing, or a key twice fails the benchmark.

    python -m benchmarks.bench_team_store --prompts 24 --units 400 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITERS = (1, 2, 4)
FAST = ["--latency-grid", "1,4", "--context-lens", "8", "--repeats", "2", "--max-new-tokens", "16", "--device", "cpu"]


def _counts(url: str) -> dict[str, int]:
    """Rows per table, and rows whose natural key repeats (must be 0)."""
    from hsd_planner.store import open_db
    from hsd_planner.store.measurements import key_counts

    db = open_db(url, create=False)
    try:
        return key_counts(db)
    finally:
        db.dispose()


def _databases(cluster, root: Path):
    """A fresh database of each kind per call: (kind, url)."""
    n = 0
    while True:
        n += 1
        yield "postgresql", cluster.url(cluster.create_database(f"bench_{os.getpid()}_{n}"))
        yield "sqlite", str(root / f"bench-{n}.db")


# --- profile: hsd-plan profile processes -----------------------------------------------------------


def _profile_run(url: str, writers: int, prompt_files: list[Path], models: str) -> tuple[float, list[str]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hsd_planner", "profile", "--models", models, "--prompts", str(f), "--db", url, *FAST, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for f in prompt_files
    ]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t0
    errors = [err.strip().splitlines()[-1] for p, (_, err) in zip(procs, outs) if p.returncode != 0]
    return wall, errors


def _profiled_prompts(n: int) -> list[str]:
    """``n`` distinct prompts of the tiny models' words that all fall in the profiling split (a
    quarter of any set is held out by a hash of each prompt), so every writer profiles all it is given."""
    from hsd_planner.prompts import PromptSet, split

    candidates = [f"w{i % 60} w{(i * 7) % 60} w{(i // 60) % 60} w{(i * 13) % 60} w{i % 60}" for i in range(20 * n)]
    kept = list(dict.fromkeys(split(PromptSet("bench", tuple(candidates)), "profile").prompts))
    return kept[:n]


# --- store: writers that only write ---------------------------------------------------------------


def _writer(url: str, first: int, count: int, ready: Path, go: Path) -> None:
    """One writer process: connect, say ready, wait for go, write ``count`` units, print its end time."""
    from hsd_planner.store import open_db
    from hsd_planner.store.measurements import register_run, save_latency, save_prompt_acceptance
    from hsd_planner.store.records import (
        HardwareRecord,
        LatencyKey,
        LatencyPoint,
        PromptAcceptance,
        PromptPairKey,
        SettingRecord,
        WorkloadRecord,
    )

    db = open_db(url)
    keys, (drafter, verifier) = register_run(
        db,
        HardwareRecord("bench", "cpu", "bench", None, 1, "-", None),
        WorkloadRecord("bench", "b" * 64, 1),
        [8],
        SettingRecord("greedy", 1.0, 1.0, "fp32", 16),
        [("ngram", None, None), ("bench", None, None)],
    )
    ready.touch()
    while not go.exists():
        time.sleep(0.005)
    for k in range(first, first + count):
        save_latency(db, LatencyKey(verifier, keys.hardware_id, "fp32", k + 1, 8), LatencyPoint(k + 1, 8, 1.0, None, (1.0,)))
        pair = PromptPairKey(drafter, verifier, keys.workload_id, keys.setting_id, k)
        save_prompt_acceptance(db, pair, PromptAcceptance(16, 8.0, [16.0, 8.0], [16, 16]))
    print(time.time(), flush=True)


def _store_run(url: str, writers: int, units: int, scratch: Path) -> tuple[float, list[str]]:
    go = scratch / f"go-{time.monotonic_ns()}"
    shares = [units // writers + (i < units % writers) for i in range(writers)]
    starts = [sum(shares[:i]) for i in range(writers)]
    readies = [scratch / f"ready-{go.name}-{i}" for i in range(writers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_team_store", "--writer", url, str(a), str(n), str(r), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a, n, r in zip(starts, shares, readies)
    ]
    while not all(r.exists() for r in readies) and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    t0 = time.time()
    go.touch()
    outs = [p.communicate() for p in procs]
    errors = [err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}" for p, (_, err) in zip(procs, outs) if p.returncode]
    ends = [float(out.split()[-1]) for p, (out, _) in zip(procs, outs) if p.returncode == 0 and out.split()]
    return (max(ends) - t0 if ends else float("nan")), errors


# --- the benchmark ----------------------------------------------------------------------------------


def _run(args: argparse.Namespace, scratch: Path, models: str) -> list[str]:
    """Both measurements on a throwaway server and SQLite files in ``scratch``; the failures found."""
    from benchmarks.common import machine
    from hsd_runtime import cpu_capability
    from tests.pg import Cluster

    failures: list[str] = []
    results: dict = {"machine": machine(), "capability": cpu_capability(), "args": {k: str(v) for k, v in vars(args).items()}}
    with Cluster() as cluster:
        print(f"PostgreSQL server: {cluster.execute('SHOW server_version')[0][0]} (fsync off), SQLite WAL", flush=True)
        dbs = _databases(cluster, scratch)
        # profile: N prompts in all, split among the writers
        table: dict[str, dict[int, list[float]]] = {"postgresql": {}, "sqlite": {}}
        prompts = _profiled_prompts(args.prompts)
        profiled = len(prompts)
        for rep in range(args.repeats):
            for writers in WRITERS:
                files = []
                for w in range(writers):
                    f = scratch / f"p{rep}-{writers}-{w}.txt"
                    f.write_text("\n".join(prompts[w::writers]))
                    files.append(f)
                for _ in range(2):
                    kind, url = next(dbs)
                    wall, errors = _profile_run(url, writers, files, models)
                    counts = _counts(url)
                    want = {
                        "acceptance_prompts": 3 * profiled,
                        "pooled_prompts": 3 * profiled,
                        "latency": 3 * 2,
                        "hardware": 1,
                        "models": 3,
                    }
                    lost = {k: (counts[k], v) for k, v in want.items() if counts[k] != v}
                    repeated = {k: v for k, v in counts.items() if k.endswith("_repeated") and v}
                    if errors or lost or repeated:
                        failures.append(f"profile {kind} x{writers}: errors {errors}, wrong counts {lost}, repeated keys {repeated}")
                    table[kind].setdefault(writers, []).append(wall)
                    print(f"profile {kind:10s} writers {writers}: {wall:6.1f} s, {profiled} prompts, errors {len(errors)}", flush=True)
        results["profile"] = table
        # store: N units written in all
        store: dict[str, dict[int, list[float]]] = {"postgresql": {}, "sqlite": {}}
        for _ in range(args.repeats):
            for writers in WRITERS:
                for _ in range(2):
                    kind, url = next(dbs)
                    wall, errors = _store_run(url, writers, args.units, scratch)
                    counts = _counts(url)
                    want = {"latency": args.units, "acceptance_prompts": args.units, "acceptance": 1, "pooled_prompts": args.units}
                    lost = {k: (counts[k], v) for k, v in want.items() if counts[k] != v}
                    repeated = {k: v for k, v in counts.items() if k.endswith("_repeated") and v}
                    if errors or lost or repeated:
                        failures.append(f"store {kind} x{writers}: errors {errors}, wrong counts {lost}, repeated keys {repeated}")
                    store[kind].setdefault(writers, []).append(wall)
                    print(f"store   {kind:10s} writers {writers}: {wall:6.2f} s for {args.units} units, errors {len(errors)}", flush=True)
        results["store"] = store
    print(f"\nmachine: {machine()}; CPU capability {cpu_capability()}")
    for name, data, unit in (("profile", table, args.prompts), ("store", store, args.units)):
        print(f"\n{name}: {unit} units in all, median of {args.repeats} (s; units/s; time over 1 writer's)")
        print(f"{'writers':>8} {'PostgreSQL':>22} {'SQLite':>22} {'PG / SQLite':>12}")
        for writers in WRITERS:
            pg_s, lite_s = (statistics.median(data[k][writers]) for k in ("postgresql", "sqlite"))
            base_pg, base_lite = (statistics.median(data[k][1]) for k in ("postgresql", "sqlite"))
            print(
                f"{writers:>8} {pg_s:8.2f} {unit / pg_s:6.1f}/s {pg_s / base_pg:5.2f}x {lite_s:8.2f} {unit / lite_s:6.1f}/s "
                f"{lite_s / base_lite:5.2f}x {pg_s / lite_s:11.2f}x"
            )
    print(f"\nerrors, lost or repeated rows: {len(failures)}" + "".join(f"\n  {f}" for f in failures))
    results["failures"] = failures
    (args.out / "team_store.json").write_text(json.dumps(results, indent=1))
    return failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=24, help="prompts (N units) profiled in all, split among the writers")
    ap.add_argument("--units", type=int, default=400, help="units written in all by the store writers")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--writer", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        url, first, count, ready, go = args.writer
        _writer(url, int(first), int(count), Path(ready), Path(go))
        return

    # the writers above start this module again: torch is imported here, not at its top
    from benchmarks.common import machine
    from hsd_runtime import cpu_capability
    from tests.tiny import save_tiny_model

    print(f"machine: {machine()}; CPU capability {cpu_capability()}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-team-"))
    (scratch / "models").mkdir()
    draft = save_tiny_model(scratch / "models" / "draft", seed=1, layers=2)
    target = save_tiny_model(scratch / "models" / "target", seed=0, layers=4)
    try:
        failures = _run(args, scratch, f"ngram,{draft},{target}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
