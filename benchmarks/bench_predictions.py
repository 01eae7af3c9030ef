"""How far a plan's predicted speed-up can be trusted: error, interval coverage and regret at
several generation lengths, on one of the demo's model families.

For each length N: profiles the family (its demo budget; continuations of N new tokens, as a
user who serves N-token replies profiles, or of ``--profile-tokens`` for every N), solves for N (``solve --max-new-tokens N``; ``--t-max`` as asked), validates every plan
of the solve (``--candidates all``: the pick, the next ones, the best of every single drafter,
autoregressive decoding) on the family's held-out prompts at N new tokens, and records per plan
the speed-up predicted from the profile as measured against the one measured beside
autoregressive decoding, whether it fell inside the predicted 90% interval, and that interval's
width. Per length: the median |speed-up error| over the plans above autoregressive decoding and
the regret of the pick; over all lengths: the coverage.

    python -m benchmarks.bench_predictions --family smollm2 --lengths 48,128,256
    python -m benchmarks.bench_predictions --family smollm2 --lengths 48,128,256 --profile-tokens 128
    python -m benchmarks.bench_predictions --family smollm2 --t-max 16 --lengths 128
    python -m benchmarks.bench_predictions --family qwen --lengths 128 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import machine
from hsd_planner.demo import FAMILIES
from hsd_planner.plan import SolveConfig
from hsd_planner.profiling import run_profile
from hsd_planner.prompts import load_prompts, split
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.validation import ValidationReport, run_validation, select_plans
from hsd_runtime import ModelLoader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="smollm2")
    ap.add_argument("--engine", default="torch", choices=["torch", "llamacpp"])
    ap.add_argument("--dtype", default=None, help="[default: bf16 where the CPU has AVX512-BF16, else fp32]")
    ap.add_argument("--lengths", default="48,128,256", help="generation lengths N to solve for and validate at")
    ap.add_argument("--profile-tokens", type=int, default=None, help="new tokens of each profiled continuation [default: each N]")
    ap.add_argument("--t-max", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2, help="runs of every plan on every held-out prompt")
    ap.add_argument("--prompts", type=int, default=None, help="held-out prompts [default: the family's demo count]")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    args = ap.parse_args()
    dtype = args.dtype or ("bf16" if torch.cpu._is_avx512_bf16_supported() else "fp32")
    family = FAMILIES[args.family].on_engine(args.engine)
    lengths = [int(x) for x in args.lengths.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.family}-{args.engine}-{dtype}-t{args.t_max}"
    db = open_db(str(args.out / f"predictions-{args.family}-{args.engine}-{dtype}.db"))
    loader = ModelLoader(device="cpu", dtype=dtype, engine=args.engine)
    print(f"machine: {machine()}, AVX512-BF16 {torch.cpu._is_avx512_bf16_supported()}, {dtype}\n", flush=True)

    prompts = split(load_prompts(family.prompts), "profile", family.max_prompts)
    held = split(load_prompts(family.prompts), "validate", args.prompts or family.validate_prompts)
    runs = []
    for n in lengths:
        config = family.profile_config(dtype).model_copy(update={"max_new_tokens": args.profile_tokens or n})
        started = time.perf_counter()
        run_profile(db, config, prompts, loader)  # resumes: what the database holds is not measured again
        print(f"profiled {config.max_new_tokens} new tokens in {time.perf_counter() - started:.0f} s", flush=True)
        # solved on the acceptance profiled at N where there is one (else at --profile-tokens)
        solve_and_store(db, target=config.models[-1], workload=prompts.name, config=SolveConfig(max_new_tokens=n, t_max=args.t_max))
        solve, plans = select_plans(db, (), "all")
        started = time.perf_counter()
        report = run_validation(db, loader, solve, plans, held, n, args.repeats)
        runs.append(
            {"max_new_tokens": n, "profiled_tokens": config.max_new_tokens, "seconds": time.perf_counter() - started, **_summary(report)}
        )
        print(json.dumps(runs[-1], indent=None), flush=True)
    out = args.out / f"predictions-{tag}.json"
    out.write_text(json.dumps({"machine": machine(), "dtype": dtype, "family": args.family, "engine": args.engine, "runs": runs}, indent=1))
    _table(runs)
    print(f"\nwritten: {out}")


def _summary(report: ValidationReport) -> dict:
    """One validation's figures: per plan above autoregressive decoding its errors and interval."""
    plans = [
        {
            "plan": p.plan.label,
            "kind": p.kind,
            "predicted_speedup": p.plan.prediction.speedup,
            "measured_speedup": p.measured_speedup,
            "speedup_error": p.speedup_error,
            "calibrated_speedup_error": p.calibrated_speedup_error,
            "interval": p.predicted_speedup_interval,
            "covered": p.covered,
            "interval_width": p.interval_width,
            "predicted_tokens_per_round": p.plan.prediction.mean_accepted_length,
            "measured_tokens_per_round": p.measured_mean_accepted_length,
            "same_text": p.same_text,
            "text_runs": p.text_runs,
        }
        for p in report.plans
        if p.plan.depth
    ]
    return {
        "validation_id": report.validation_id,
        "median_abs_speedup_error": report.median_abs_speedup_error,
        "median_abs_speedup_error_calibrated": report.median_abs_speedup_error_calibrated,
        "coverage": report.coverage,
        "median_interval_width": report.median_interval_width,
        "regret": report.regret,
        "drift": report.drift,
        "pick": next(p.plan.label for p in report.plans if p.plan_id == report.pick),
        "plans": plans,
    }


def _table(runs: list[dict]) -> None:
    print(
        "\n| new tokens | plans | median \\|speed-up error\\| (calibrated) | inside 90% interval | median width | regret "
        "| outputs identical to autoregressive | pick |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        hits = [p["covered"] for p in r["plans"] if p["covered"] is not None]
        same = [(p["same_text"], p["text_runs"]) for p in r["plans"] if p["same_text"] is not None]
        texts = f"{sum(a for a, _ in same)} of {sum(b for _, b in same)}" if same else "-"
        print(
            f"| {r['max_new_tokens']} | {len(r['plans'])} | {r['median_abs_speedup_error']:.1%} ({r['median_abs_speedup_error_calibrated']:.1%}) "
            f"| {sum(hits)} of {len(hits)} | {r['median_interval_width']:.0%} | {r['regret']:.1%} | {texts} | {r['pick']} |"
        )
    hits = [p["covered"] for r in runs for p in r["plans"] if p["covered"] is not None]
    errors = [abs(p["speedup_error"]) for r in runs for p in r["plans"]]
    if hits:
        print(
            f"\nall lengths: {sum(hits)} of {len(hits)} inside ({sum(hits) / len(hits):.0%}); median |speed-up error| {statistics.median(errors):.1%}"
        )


if __name__ == "__main__":
    main()
