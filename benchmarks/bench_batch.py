"""Batch-aware plans on real models: profile c(n, b), solve per batch size, validate the schedule.

For each workload: profile the candidates with ``--batch-sizes`` (latency of one pass over b
sequences; acceptance once), solve at every batch size (chains, empirical acceptance, t_max 8)
and store the schedule, then run on held-out prompts, at every validated batch size b, the
schedule's plan for b, autoregressive decoding and every fixed width k of the schedule's drafter
(what a hand-set ``num_speculative_tokens`` would run), b prompts in lockstep, each sequence
decoding exactly ``--new-tokens``. Reported per workload and b: predicted against measured ms per
token and speed-up of the schedule's pick, the best fixed k measured, and where speculation stops
paying (predicted and measured).

On a shared 2-core machine the script runs torch on one thread (``--threads``): with two, a pass
waits for both threads to be scheduled, and while other jobs hold the cores single passes of
SmolLM2-135M ranged from 33 to 2,430 ms; on one thread they stayed within 38-97 ms. Profile and
validation run in the same process, so their hardware fingerprint (threads included) is the same.

    python -m benchmarks.bench_batch --spec-bench PATH
    python -m benchmarks.bench_batch --workloads builtin --validate-batch-sizes 1,4,8 --repeats 2
    python -m benchmarks.bench_batch --target qwen2.5-coder-1.5b --models ngram,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b \
        --workloads humaneval --out benchmarks/out/qwen
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from benchmarks.common import machine, spec_bench_option, spec_bench_set
from hsd_planner.plan import SolveConfig
from hsd_planner.profiling import ProfileConfig, run_profile
from hsd_planner.prompts import PromptSet, load_prompts, split
from hsd_planner.solving import solve_and_store, solve_batch_schedule
from hsd_planner.store import open_db
from hsd_planner.store.solves import solve_record
from hsd_planner.store.validations import plans_of_solve
from hsd_planner.validation import run_validation
from hsd_runtime import ModelLoader, auto_dtype, cpu_capability, resolve_device


def _prompts(workload: str, spec_bench: Path | None) -> PromptSet:
    """``builtin``, ``humaneval`` or ``spec_bench/<category>``."""
    if workload.startswith("spec_bench/"):
        return spec_bench_set(spec_bench, workload.split("/", 1)[1])
    return load_prompts(None if workload == "builtin" else workload)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="builtin,spec_bench/summarization")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--models", default="ngram,smollm2-135m:quant=int8,smollm2-135m", help="candidates, the target last")
    ap.add_argument("--batch-sizes", default="1,2,4,8,16", help="profiled and solved")
    ap.add_argument("--validate-batch-sizes", default="1,4,8")
    ap.add_argument("--profile-prompts", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts per workload")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved latency rounds when profiling")
    ap.add_argument("--repeats", type=int, default=1, help="validation: every prompt this many times at every batch size")
    ap.add_argument("--fixed", default="1,2,3,4,6,8", help="fixed widths k of the schedule's drafter run beside it")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (see above)")
    ap.add_argument("--stage", choices=["all", "profile", "validate"], default="all", help="profile only, or validate a stored profile")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    spec_bench_option(ap, required=False)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = auto_dtype(resolve_device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    check = [int(b) for b in args.validate_batch_sizes.split(",")]
    print(f"machine: {machine()}, {cpu_capability()}, {dtype}\n", flush=True)
    db = open_db(str(args.out / "batch.db"))
    results = {}
    for workload in args.workloads.split(","):
        prompts = _prompts(workload, args.spec_bench)
        config = ProfileConfig(
            models=args.models.split(","),
            dtype=dtype,
            max_new_tokens=args.new_tokens,
            latency_grid=[1, 2, 3, 4, 5, 7, 9],
            repeats=args.rounds,
            batch_sizes=sizes,
        )
        if args.stage != "validate":
            run_profile(db, config, split(prompts, "profile", args.profile_prompts), loader)
        if args.stage == "profile":
            continue
        solve_config = SolveConfig(t_max=8, trees=False)
        solved = solve_and_store(db, args.target, f"{prompts.name}:profile", config=solve_config)
        batch = solve_batch_schedule(db, solved.solve_id, solve_config, sizes)
        drafters = {plan.chain[0] for _, plan in batch.best if plan.depth == 1}
        drafter = next(iter(drafters)) if len(drafters) == 1 else solved.best.plan.chain[0]
        fixed = [([drafter, args.target], [k]) for k in map(int, args.fixed.split(","))]
        solve = solve_record(db, solved.solve_id)
        held = split(prompts, "validate", args.prompts)
        auto = [p for p in plans_of_solve(db, solve.id) if p.kind == "autoregressive"]  # the schedule and fixed chains beside it
        report = run_validation(db, loader, solve, auto, held, args.new_tokens, args.repeats, check, fixed)
        results[workload] = {"solve": batch.to_dict(), "validation": report.to_dict(), "drafter": drafter}
        print(json.dumps({"workload": workload, "schedule": batch.to_dict()["schedule"]}), flush=True)
        _table(workload, batch.to_dict(), report.to_dict())
    if results:
        (args.out / "batch.json").write_text(
            json.dumps({"machine": machine(), "capability": cpu_capability(), "results": results}, indent=1)
        )


def _table(workload: str, solve: dict, validation: dict) -> None:
    print(f"\n{workload}: predicted schedule")
    for e in solve["batch_sizes"]:
        label = " -> ".join(e["chain"]) + (f" {e['widths']}" if e["widths"] else " (k = 0)")
        print(f"  b={e['batch_size']:>2}: {label}, {e['predicted_ms_per_token']:.1f} ms/token, {e['predicted_speedup']:.2f}x")
    print(f"  speculation stops paying at: {solve['speculation_stops_paying_at']}")
    print("\n| b | plan | pred ms | meas ms | error | pred x | meas x | speed-up error | meas tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    runs = validation["plans"]
    for r in runs:
        label = " -> ".join(r["chain"]) + (f" {r['widths']}" if r["widths"] else "")
        print(
            f"| {r['batch_size']} | {r['kind']}: {label} | {r['predicted_ms_per_token']:.1f} | {r['measured_ms_per_token']:.1f} | "
            f"{r['error']:+.1%} | {r['predicted_speedup']:.2f} | {r['measured_speedup']:.2f} | {r['speedup_error']:+.1%} | "
            f"{r['measured_tokens_per_s']:.1f} |"
        )
    for b in sorted({r["batch_size"] for r in runs}):
        at = [r for r in runs if r["batch_size"] == b]
        # the schedule's plan; where it is autoregressive decoding, it ran once, as the baseline
        pick = next((r for r in at if r["kind"] == "schedule"), None) or next(r for r in at if r["kind"] == "autoregressive")
        fixed = [r for r in at if r["kind"] == "fixed" or (r["kind"] == "schedule" and r["widths"])]
        best_fixed = min(fixed, key=lambda r: r["measured_ms_per_token"]) if fixed else None
        fastest = min(at, key=lambda r: r["measured_ms_per_token"])
        print(
            f"b={b}: schedule {pick['measured_ms_per_token']:.1f} ms, best fixed k "
            f"{best_fixed['widths'] if best_fixed else '-'} {best_fixed['measured_ms_per_token'] if best_fixed else float('nan'):.1f} ms, "
            f"fastest measured: {' -> '.join(fastest['chain'])} {fastest['widths']}"
        )
    picks = [abs(r["speedup_error"]) for r in runs if r["kind"] == "schedule" and r["widths"]]
    if picks:
        print(f"median |speed-up error| of the schedule's speculative picks: {statistics.median(picks):.1%}")


if __name__ == "__main__":
    main()
