"""Predicted against measured latency on real models, per Spec-Bench category.

Uses the profiles written by benchmarks.bench_profile (greedy and temperature 1). For each
category: solve (empirical acceptance, t_max 8, top 5, at the held-out prompts' median context), then run every plan of the solve - the
best, the next four, the best width of every single drafter, and autoregressive decoding - on
held-out prompts of that category (the validation split, never profiled), and compare with the
predictions of both acceptance models (empirical run lengths and i.i.d. alpha^g) for the same
measured runs.

    python -m benchmarks.bench_validate --spec-bench question.jsonl --prompts 4 --new-tokens 48
    python -m benchmarks.bench_validate --recompute   # new predictions for the stored measurements
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.common import SPEC_CATEGORIES, machine, spec_bench_option, spec_bench_set
from hsd_planner.plan import SolveConfig, predict_over
from hsd_planner.prompts import PromptSet, encode_prompt, split
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile
from hsd_planner.validation import run_validation, select_plans
from hsd_runtime import ModelLoader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--modes", default="greedy,sample")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--recompute", action="store_true", help="re-predict the measurements in validate.json with the current model")
    spec_bench_option(ap, required=False)
    args = ap.parse_args()
    if args.recompute:
        data = json.loads((args.out / "validate.json").read_text())
        rows = [_row(args.out, key.split("/")[0], key.split("/")[1], report) for key, report in data["reports"].items()]
        _table(rows)
        return
    loader = ModelLoader(device="cpu", dtype="bf16")
    tokenizer = loader.load("smollm2-135m").tokenizer
    print(f"machine: {machine()}\n", flush=True)
    rows, results = [], {}
    for mode in args.modes.split(","):
        db = open_db(str(args.out / f"profile-{mode}.db"))
        for category in SPEC_CATEGORIES:
            workload = f"spec_bench/{category}"
            held = split(spec_bench_set(args.spec_bench, category), "validate")
            prompts = PromptSet(f"{workload}:validate", held.prompts[: args.prompts])
            # solve at the context the plans will run at: the held-out prompts plus half the continuation
            context = int(statistics.median(len(encode_prompt(tokenizer, p)) for p in prompts.prompts)) + args.new_tokens // 2
            solve_and_store(
                db,
                target="smollm2-135m",
                workload=workload,
                mode=mode,
                temperature=1.0,
                config=SolveConfig(top_k=5, t_max=8, context_len=context),
            )
            solve, plans = select_plans(db, (), "all")
            report = run_validation(db, loader, solve, plans, prompts, args.new_tokens, 1).to_dict()
            rows.append(_row(args.out, mode, category, report))
            results[f"{mode}/{category}"] = report
            print(json.dumps(rows[-1]), flush=True)
    _table(rows)
    (args.out / "validate.json").write_text(json.dumps({"machine": machine(), "rows": rows, "reports": results}, indent=1))


def _row(out: Path, mode: str, category: str, report: dict) -> dict:
    """Both acceptance models' predictions for the measured plans of one category."""
    db = open_db(str(out / f"profile-{mode}.db"))
    workload = f"spec_bench/{category}"
    profile, _ = load_profile(db, "smollm2-135m", workload, mode, 1.0)
    errors = {"empirical": [], "iid": []}
    for p in report["plans"]:
        for model in errors:
            pred = predict_over(profile, p["chain"], p["widths"], model, report["context_lens"])
            p[f"{model}_predicted_ms_per_token"] = pred.ms_per_token
            p[f"{model}_error"] = (pred.ms_per_token - p["measured_ms_per_token"]) / p["measured_ms_per_token"]
            errors[model].append(abs(p[f"{model}_error"]))
        p["predicted_mean_accepted_length"] = predict_over(
            profile, p["chain"], p["widths"], "empirical", report["context_lens"]
        ).mean_accepted_length
    auto = next(p for p in report["plans"] if len(p["chain"]) == 1)
    speedup_errors = {model: [] for model in errors}
    for p in report["plans"]:
        for model in errors:
            if p is not auto:
                predicted = auto[f"{model}_predicted_ms_per_token"] / p[f"{model}_predicted_ms_per_token"]
                speedup_errors[model].append(abs(predicted / p["measured_speedup"] - 1.0))
    best = min((p for p in report["plans"] if p["kind"] == "best"), key=lambda p: p["empirical_predicted_ms_per_token"])
    # the best single-drafter plan by measurement (the solver's pick itself when it has one drafter)
    single = min((p for p in report["plans"] if len(p["chain"]) == 2), key=lambda p: p["measured_ms_per_token"])
    fastest = min(p["measured_ms_per_token"] for p in report["plans"])
    return {
        "mode": mode,
        "category": category,
        "plans": len(report["plans"]),
        "context_len": report["context_len"],
        "median_abs_error_empirical": statistics.median(errors["empirical"]),
        "median_abs_error_iid": statistics.median(errors["iid"]),
        "autoregressive_error": auto["empirical_error"],
        "speedup_error_empirical": statistics.median(speedup_errors["empirical"]),
        "speedup_error_iid": statistics.median(speedup_errors["iid"]),
        "regret": best["measured_ms_per_token"] / fastest - 1.0,
        "best": " -> ".join(best["chain"]) + f" {best['widths']}",
        "best_speedup": best["measured_speedup"],
        "best_vs_best_single": single["measured_ms_per_token"] / best["measured_ms_per_token"],
        "best_accepted_pred": best["predicted_mean_accepted_length"],
        "best_accepted_meas": best["measured_mean_accepted_length"],
    }


def _table(rows: list[dict]) -> None:
    print(
        "\n| mode | category | context | plans | median abs error, empirical / i.i.d. | autoregressive error | median abs speed-up error, empirical / i.i.d. | regret | solver's pick | its measured speed-up | over best single | accepted length pred / meas |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['category']} | {r['context_len']} | {r['plans']} | {r['median_abs_error_empirical']:.1%} / "
            f"{r['median_abs_error_iid']:.1%} | {r['autoregressive_error']:+.1%} | {r['speedup_error_empirical']:.1%} / {r['speedup_error_iid']:.1%} | "
            f"{r['regret']:.1%} | {r['best']} | {r['best_speedup']:.2f}x | "
            f"{r['best_vs_best_single']:.2f}x | {r['best_accepted_pred']:.2f} / {r['best_accepted_meas']:.2f} |"
        )


if __name__ == "__main__":
    main()
