"""Stability of a profile on a noisy machine: the same profile twice, ``--gap-min`` minutes apart.

Each run profiles the SmolLM2 demo family (``hsd-plan demo --family smollm2``'s candidates, prompts
and grid) into a fresh database with ``--rounds`` interleaved latency rounds, solves, and validates
every plan of its solve on the held-out prompts. Reported:

- curve-to-curve spread: per latency point, |c_A(n) - c_B(n)| over their mean, where each curve
  is the median of the first r rounds (r = 1 .. ``--rounds``; every sample is stored in round
  order, so one profile gives every budget);
- each validation's errors (median |speed-up error|, median |error| raw and calibrated, regret
  against the best untied plan), and the same validations predicted again from the profile cut
  to its first r rounds, so a user can pick the profiling budget.

    python -m benchmarks.bench_stability --gap-min 10 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.common import machine
from hsd_planner.demo import FAMILIES
from hsd_planner.plan import SolveConfig, predict_over
from hsd_planner.profiling import run_profile
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.store.measurements import latency_points, rewrite_latency
from hsd_planner.store.profiles import load_profile
from hsd_planner.store.validations import stored_validations
from hsd_planner.validation import run_validation, select_plans
from hsd_runtime import ModelLoader
from hsd_runtime.models.device import auto_dtype, cpu_capability

FAMILY = FAMILIES["smollm2"]
TARGET = FAMILY.models.split(",")[-1]


def profile_and_validate(db_url: Path, rounds: int, loader: ModelLoader, dtype: str) -> dict:
    """One run: fresh profile, solve, validation of every plan. Returns its report and timings."""
    db_url.unlink(missing_ok=True)
    db = open_db(str(db_url))
    prompts = split(load_prompts(FAMILY.prompts), "profile", FAMILY.max_prompts)
    config = FAMILY.profile_config(dtype, rounds=rounds)
    t0 = time.perf_counter()
    run_profile(db, config, prompts, loader)
    profile_s = time.perf_counter() - t0
    solve_and_store(db, target=TARGET, workload=prompts.name, config=SolveConfig())
    solve, plans = select_plans(db, (), "all")
    held = split(load_prompts(FAMILY.prompts), "validate", FAMILY.validate_prompts)
    report = run_validation(db, loader, solve, plans, held, FAMILY.max_new_tokens, 1).to_dict()
    return {"profile_s": profile_s, "started": time.strftime("%H:%M:%S"), "report": report, "workload": prompts.name}


def _curves(db_url: Path, rounds: int) -> dict[tuple[str, int, int], list[float]]:
    """(model, context, n) -> the samples of the first interleaved rounds, in round order."""
    db = open_db(str(db_url))
    return {(spec, r.context_len, r.n_tokens): list(r.samples_ms[:rounds]) for spec, r in latency_points(db)}


def _cut(db_url: Path, rounds: int, to: Path) -> Path:
    """A copy of ``db`` whose latency medians use only the first ``rounds`` rounds."""
    to.unlink(missing_ok=True)
    with sqlite3.connect(db_url) as src, sqlite3.connect(to) as dst:  # the backup API: committed pages in the WAL included
        src.backup(dst)
    db = open_db(str(to))
    rewrite_latency(db, lambda point: replace(point, median_ms=statistics.median(point.samples_ms[:rounds])))
    db.dispose()
    return to


def _stored_validation(db: Path, loader: ModelLoader) -> tuple[str, list[int], list[dict]]:
    """The workload, per-prompt contexts and measured plans of the newest validation in ``db``."""
    validation = stored_validations(open_db(str(db)))[-1]
    workload, new_tokens = validation.solve.workload.name, validation.entry.max_new_tokens
    runs = [
        {"plan_id": r.plan_id, "chain": r.chain, "widths": r.widths, "measured_speedup": r.measured_speedup, "ms": r.measured_ms_per_token}
        for r in validation.runs
    ]
    held = split(load_prompts(FAMILY.prompts), "validate", FAMILY.validate_prompts)
    tokenizer = loader.load(TARGET).tokenizer
    contexts = [len(encode_prompt(tokenizer, p)) + new_tokens // 2 for p in held.prompts]  # as validation computes them
    return workload, contexts, runs


def _errors(db: Path, stored: tuple[str, list[int], list[dict]]) -> dict:
    """The stored validation predicted again from ``db``: median |speed-up error| over its plans."""
    workload, contexts, runs = stored
    profile, _ = load_profile(open_db(str(db)), TARGET, workload, "greedy", 1.0)
    auto = next(p for p in runs if len(p["chain"]) == 1)
    predicted = {p["plan_id"]: predict_over(profile, p["chain"], p["widths"], "empirical", contexts).ms_per_token for p in runs}
    errors = [abs(predicted[auto["plan_id"]] / predicted[p["plan_id"]] / p["measured_speedup"] - 1) for p in runs if p is not auto]
    return {
        "speedup_error": statistics.median(errors),
        "error": statistics.median(abs(predicted[p["plan_id"]] / p["ms"] - 1) for p in runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gap-min", type=float, default=10.0, help="minutes between the two runs")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved latency rounds per profile")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/stability"))
    ap.add_argument("--analyze-only", action="store_true", help="tabulate the databases and runs.json of an earlier run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    header = f"{machine()}; CPU capability {cpu_capability()}; dtype {dtype}"
    print(header, flush=True)
    saved = args.out / "runs.json"
    runs = json.loads(saved.read_text()) if args.analyze_only and saved.exists() else {}
    for i, name in enumerate("" if args.analyze_only else "AB"):
        if i:
            print(f"waiting {args.gap_min:g} min", flush=True)
            time.sleep(60 * args.gap_min)
        runs[name] = profile_and_validate(args.out / f"{name}.db", args.rounds, loader, dtype)
        saved.write_text(json.dumps(runs, indent=1, default=str))
        r = runs[name]["report"]
        print(
            f"run {name} at {runs[name]['started']}: profile {runs[name]['profile_s']:.0f} s; speed-up error {r['median_abs_speedup_error']:.1%}, "
            f"error {r['median_abs_error']:.1%} raw / {r['median_abs_error_calibrated']:.1%} calibrated, drift {r['drift']:.3f}, "
            f"regret untied {r['regret_untied']:.1%}",
            flush=True,
        )
    budgets = sorted({1, 3, 5, args.rounds} & set(range(1, args.rounds + 1)))
    rows = []
    for r in budgets:
        a, b = _curves(args.out / "A.db", r), _curves(args.out / "B.db", r)
        gaps = [
            abs(statistics.median(a[k]) - statistics.median(b[k])) / ((statistics.median(a[k]) + statistics.median(b[k])) / 2) for k in a
        ]
        models = [k for k in a if k[0] != "ngram"]  # the lookup's sub-ms timings are noise-dominated
        model_gaps = [abs(statistics.median(a[k]) - statistics.median(b[k])) / statistics.median(a[k]) for k in models]
        row = {"rounds": r, "spread_median": statistics.median(gaps), "spread_models_median": statistics.median(model_gaps)}
        row["spread_models_p90"] = sorted(model_gaps)[int(0.9 * (len(model_gaps) - 1))]
        # the same after one scale factor per profile (the machine as a whole faster or slower):
        # what is left is a change of the curves' shape, which is what ratios between plans see
        scale = statistics.geometric_mean(statistics.median(b[k]) / statistics.median(a[k]) for k in models)
        shape = [abs(statistics.median(b[k]) / scale - statistics.median(a[k])) / statistics.median(a[k]) for k in models]
        row["scale_b_over_a"], row["shape_spread_median"] = scale, statistics.median(shape)
        for name in "AB":
            cut = _cut(args.out / f"{name}.db", r, args.out / f"{name}-r{r}.db")
            row[name] = _errors(cut, _stored_validation(args.out / f"{name}.db", loader))
        rows.append(row)
    print(f"\n{header}\n")
    print(
        "| rounds | c(n) spread A vs B, models: median / p90 (all points incl. n-gram: median) | B / A scale | spread after the scale: median | A: speed-up error / raw error | B: speed-up error / raw error |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['rounds']} | {row['spread_models_median']:.1%} / {row['spread_models_p90']:.1%} ({row['spread_median']:.1%}) | "
            f"{row['scale_b_over_a']:.3f} | {row['shape_spread_median']:.1%} | "
            f"{row['A']['speedup_error']:.1%} / {row['A']['error']:.1%} | {row['B']['speedup_error']:.1%} / {row['B']['error']:.1%} |"
        )
    print("\n| run | started | profile s | plans | pick | speed-up error | error raw / calibrated | drift | regret / untied |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        r = run["report"]
        pick = next(p for p in r["plans"] if p["plan_id"] == r["pick"])
        print(
            f"| {name} | {run['started']} | {run['profile_s']:.0f} | {len(r['plans'])} | {' -> '.join(pick['chain'])} {pick['widths']} | "
            f"{r['median_abs_speedup_error']:.1%} | {r['median_abs_error']:.1%} / {r['median_abs_error_calibrated']:.1%} | {r['drift']:.3f} | "
            f"{r['regret']:.1%} / {r['regret_untied']:.1%} |"
        )
    (args.out / "stability.json").write_text(json.dumps({"machine": header, "budgets": rows, "runs": runs}, indent=1, default=str))


if __name__ == "__main__":
    main()
