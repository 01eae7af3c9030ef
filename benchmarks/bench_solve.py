"""Solver time against the number of candidates N and the width limit t_max, on synthetic
profiles, with the fitted growth exponents, and against brute-force enumeration; then, with
--real, the plan solved on real profiles (from benchmarks.bench_profile) per Spec-Bench category.

    python -m benchmarks.bench_solve
    python -m benchmarks.bench_solve --real benchmarks/out/profile-greedy.db benchmarks/out/profile-sample.db
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import time

import numpy as np

from benchmarks.common import machine
from hsd_planner.plan import SolveConfig
from hsd_planner.plan.latency import Level, RunLengths, hierarchy_latency
from hsd_planner.plan.solver import Candidate, solve_graph


def instance(n: int, seed: int):
    rng = random.Random(seed)
    costs = sorted(rng.uniform(0.1, 25.0) for _ in range(n))
    cands = [
        Candidate(f"m{i}", (lambda c, s: lambda k: c + s * (k - 1))(c, rng.uniform(0, 0.3)), lookup=i == 0) for i, c in enumerate(costs)
    ]
    target = Candidate("target", lambda k: 30.0 + 0.5 * (k - 1))
    names = [c.name for c in cands] + ["target"]
    acc = {}
    for i, j in itertools.combinations(range(len(names)), 2):
        a = rng.uniform(0.2, 0.95)
        s = [1.0]
        for g in range(1, 65):
            s.append(s[-1] * min(0.99, a + 0.01 * g))
        acc[(names[i], names[j])] = RunLengths(s)
    return cands, target, acc


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def brute(cands, target, acc, t_max):
    best = target.cost(1)
    for r in range(1, len(cands) + 1):
        for subset in itertools.combinations(cands, r):
            names = [c.name for c in subset] + ["target"]
            levels = [Level(subset[0].cost, lookup=subset[0].lookup)] + [
                Level(c.cost, acc[(a, b)]) for c, (a, b) in zip([*subset[1:], target], zip(names, names[1:]))
            ]
            for widths in itertools.product(range(1, t_max + 1), repeat=r):
                best = min(best, hierarchy_latency(levels, list(widths)).ms_per_token)
    return best


def slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--real", nargs="*", default=None, help="profile databases to solve per category (skips the synthetic part)")
    args = ap.parse_args()
    print(f"machine: {machine()}\n")
    if args.real is not None:
        real_profiles(args.real)
        return
    ns, ts = [2, 4, 8, 12, 16, 20, 24, 32], [4, 8, 16, 24, 32]
    print("| N \\ t_max | " + " | ".join(str(t) for t in ts) + " |")
    print("|---|" + "---|" * len(ts))
    grid = {}
    for n in ns:
        cells = []
        for t in ts:
            cands, target, acc = instance(n, seed=n)
            grid[n, t] = timed(lambda: solve_graph(cands, target, acc, SolveConfig(t_max=t, top_k=5)), args.repeats if n * t <= 256 else 1)
            cells.append(f"{grid[n, t]:.3f}")
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    big = [n for n in ns if n >= 8]
    print(f"\nseconds, median of {args.repeats} (1 run where N x t_max > 256), top_k = 5")
    print(f"growth exponent in N (t_max = 16, N >= 8): {slope(big, [grid[n, 16] for n in big]):.2f}")
    print(f"growth exponent in t_max (N = 20): {slope(ts, [grid[20, t] for t in ts]):.2f}")
    print(f"N = 20, t_max = 16: {grid[20, 16]:.3f} s\n")
    print("| N | t_max | solver s | brute force s | same optimum |")
    print("|---|---|---|---|---|")
    for n, t in [(2, 4), (3, 4), (4, 4), (4, 6), (5, 4), (5, 6)]:
        cands, target, acc = instance(n, seed=100 + n)
        ts_ = timed(lambda: solve_graph(cands, target, acc, SolveConfig(t_max=t)), 1)
        t0 = time.perf_counter()
        b = brute(cands, target, acc, t)
        tb = time.perf_counter() - t0
        same = math.isclose(solve_graph(cands, target, acc, SolveConfig(t_max=t)).best.prediction.ms_per_token, b, rel_tol=1e-9)
        print(f"| {n} | {t} | {ts_:.4f} | {tb:.2f} | {same} |", flush=True)


def real_profiles(dbs: list[str]) -> None:
    """Best plan per category on real profiles, against the best single drafter."""
    from benchmarks.common import SPEC_CATEGORIES
    from hsd_planner.solving import solve_and_store
    from hsd_planner.store import open_db

    print(
        "| mode | category | best plan | predicted ms/token | speed-up vs autoregressive | best single drafter | its ms/token | best / single |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for db in dbs:
        db = open_db(db)
        for category in SPEC_CATEGORIES:
            mode = "sample" if "sample" in db else "greedy"
            r = solve_and_store(db, target="smollm2-135m", workload=f"spec_bench/{category}", mode=mode, config=SolveConfig(t_max=8))
            best = next(p.plan for p in r.plans if p.kind == "best")
            single = next(p.plan for p in r.plans if p.kind == "single")  # singles come best first
            ms, single_ms = best.prediction.ms_per_token, single.prediction.ms_per_token
            print(
                f"| {mode} | {category} | {best.label} | {ms:.2f} | {best.prediction.speedup:.3f}x | "
                f"{single.label} | {single_ms:.2f} | {single_ms / ms:.3f}x |"
            )


if __name__ == "__main__":
    main()
