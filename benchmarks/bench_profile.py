"""Profile the built-in SmolLM2-135M candidates on Spec-Bench, per category, and time it.

Models: ngram, smollm2-135m:layers=2, :layers=4, :layers=8 and smollm2-135m (bf16). Workloads:
the first N prompts of the profiling split of each Spec-Bench category (translation,
summarization, qa, math_reasoning, rag), each a workload of its own, so the acceptance matrix is
reported per category. Latency curves are measured in the first run and reused by the others, as
a user's database would. Greedy, then sampling at temperature 1, each into a fresh database.

    python -m benchmarks.bench_profile --spec-bench question.jsonl --per-category 8 --new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import SPEC_CATEGORIES, machine, spec_bench_option, spec_bench_set
from hsd_planner.profiling import ProfileConfig, profile_summary, run_profile
from hsd_planner.prompts import PromptSet, split
from hsd_planner.store import open_db
from hsd_runtime import ModelLoader

MODELS = ["ngram", "smollm2-135m:layers=2", "smollm2-135m:layers=4", "smollm2-135m:layers=8", "smollm2-135m"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-category", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--modes", default="greedy,sample")
    ap.add_argument("--models", default=",".join(MODELS), help="candidates, cheapest first, target last")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    spec_bench_option(ap)
    args = ap.parse_args()
    models = args.models.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    loader = ModelLoader(device="cpu", dtype=args.dtype)
    t0 = time.perf_counter()
    for spec in models[1:]:
        loader.load(spec)
    load_s = time.perf_counter() - t0
    print(f"machine: {machine()}; models loaded in {load_s:.1f} s (cached conversions)")
    report = {"machine": machine(), "load_s": load_s, "runs": {}}
    for mode in args.modes.split(","):
        db = args.out / f"profile-{mode}.db"
        db.unlink(missing_ok=True)
        db = open_db(str(db))
        config = ProfileConfig(models=models, mode=mode, temperature=1.0, dtype=args.dtype, max_new_tokens=args.new_tokens)
        runs = {}
        total = 0.0
        for category in SPEC_CATEGORIES:
            part = split(spec_bench_set(args.spec_bench, category), "profile")
            prompts = PromptSet(f"spec_bench/{category}", part.prompts[: args.per_category])
            t1 = time.perf_counter()
            outcome = run_profile(db, config, prompts, loader)
            wall = time.perf_counter() - t1
            total += wall
            runs[category] = {"wall_s": wall, **profile_summary(db, outcome).to_dict()}
            print(f"[{mode}] {category}: {wall:.1f} s, {outcome.measured} measurements", flush=True)
        report["runs"][mode] = {"total_wall_s": total, "categories": runs}
        print(
            f"\n## {mode}: whole profile {total:.1f} s ({len(SPEC_CATEGORIES)} x {args.per_category} prompts x {args.new_tokens} new tokens)\n"
        )
        _print_tables(db, runs, models)
    (args.out / "profile.json").write_text(json.dumps(report, indent=1))


def _print_tables(db, runs: dict, models: list[str]) -> None:
    from hsd_planner.store.measurements import latency_points

    rows = latency_points(db)
    grid = sorted({r.n_tokens for _, r in rows})
    for ctx in sorted({r.context_len for _, r in rows}):
        print(f"latency, median ms per forward pass, context {ctx}\n")
        print("| model | " + " | ".join(f"n={n}" for n in grid) + " |")
        print("|---|" + "---|" * len(grid))
        for spec in models:
            pts = {r.n_tokens: r.median_ms for name, r in rows if name == spec and r.context_len == ctx}
            print(f"| {spec} | " + " | ".join(f"{pts[n]:.2f}" if n in pts else "-" for n in grid) + " |")
        print()
    verifiers = models[1:]
    for category, run in runs.items():
        alpha = {(a["drafter"], a["verifier"]): a for a in run["acceptance"]}
        print(f"acceptance alpha / P(G>=4), {category} (rows: drafter, columns: verifier)\n")
        print("| drafter | " + " | ".join(verifiers) + " |")
        print("|---|" + "---|" * len(verifiers))
        for d in models[:-1]:
            cells = []
            for v in verifiers:
                a = alpha.get((d, v))
                cells.append(f"{a['alpha']:.3f} / {a['run_lengths'][4]:.3f}" if a else "")
            print(f"| {d} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
