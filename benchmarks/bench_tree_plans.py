"""Does the planner choose trees where they pay? Profile, solve with and without trees, validate.

Per workload: ``hsd-plan profile`` (the n-gram lookup, a drafter and the target; sibling curves
A(k) come with the acceptance profile), ``hsd-plan solve --top K`` with trees allowed, then
``hsd-plan validate`` of the pick, the best chain-only plan of the same solve (what ``solve
--no-trees`` picks; the test suite checks they agree), the best tree plan when the pick is a chain,
and autoregressive decoding, interleaved in one run. Reported: each plan's predicted and measured
speed-up, the measured ratio pick / best chain, and the speed-up error of tree plans.

    python -m benchmarks.bench_tree_plans --spec-bench question.jsonl --family qwen --workloads humaneval,translation,qa --mode sample \
        --prompts 4 --validate-prompts 3 --new-tokens 40
    python -m benchmarks.bench_tree_plans --spec-bench question.jsonl --family qwen --workloads translation,qa --mode sample --dtype fp32 \
        --prompts 4 --validate-prompts 3 --new-tokens 40
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.common import machine, spec_bench_file, spec_bench_option
from hsd_runtime import cpu_capability

FAMILIES = {
    "qwen": "ngram,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b",
    "smollm2": "ngram,smollm2-135m:layers=8,smollm2-135m:layers=16,smollm2-135m",
}


def cli(*args: str) -> dict:
    """Run ``hsd-plan ARGS --json`` and return its JSON (stderr passes through: progress bars)."""
    out = subprocess.run([sys.executable, "-m", "hsd_planner", *args, "--json"], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout)


def is_tree(widths: list) -> bool:
    return any(isinstance(w, str) for w in widths)


def run_workload(args: argparse.Namespace, workload: str, db: Path) -> dict:
    source = (
        ["--prompts", "humaneval"]
        if workload == "humaneval"
        else ["--prompts", str(spec_bench_file(args.spec_bench)), "--category", workload]
    )
    mode = ["--mode", args.mode] + (["--temperature", "1"] if args.mode == "sample" else [])
    common = ["--db", str(db)]
    cli(
        "profile",
        "--models",
        FAMILIES[args.family],
        *source,
        *mode,
        "--max-prompts",
        str(args.prompts),
        "--max-new-tokens",
        str(args.new_tokens),
        "--latency-grid",
        "1,2,4,8,16,32",
        "--repeats",
        "3",
        "--dtype",
        args.dtype,
        *common,
    )
    solved = cli("solve", "--top", "30", *mode, *common)
    plans = solved["plans"]
    ranked = [p for p in plans if p["kind"] in ("best", "top")]
    pick = ranked[0]
    best_chain = next((p for p in ranked if not is_tree(p["widths"])), None)
    best_tree = next((p for p in ranked if is_tree(p["widths"])), None)
    auto = next(p for p in plans if p["kind"] == "autoregressive")
    ids = list(dict.fromkeys(p["id"] for p in (pick, best_chain, best_tree, auto) if p is not None))
    flags = [x for i in ids for x in ("--plan", str(i))]
    validated = cli(
        "validate", *flags, *source, "--max-prompts", str(args.validate_prompts), "--max-new-tokens", str(args.new_tokens), *common
    )
    # validate runs each distinct (chain, widths) once: the pick may be autoregressive decoding itself
    by_key = {(tuple(p["chain"]), tuple(p["widths"])): p for p in validated["plans"]}
    by_id = {p["id"]: by_key[(tuple(p["chain"]), tuple(p["widths"]))] for p in plans if p["id"] in ids}

    def row(p: dict | None) -> dict | None:
        if p is None:
            return None
        v = by_id[p["id"]]
        chain = " -> ".join(f"{m}[{w}]" for m, w in zip(v["chain"], v["widths"])) + f" -> {v['chain'][-1]}"
        return {
            "plan": chain,
            "predicted_speedup": v["predicted_speedup"],
            "measured_speedup": v["measured_speedup"],
            "speedup_error": v["speedup_error"],
            "measured_tokens_per_round": v["measured_mean_accepted_length"],
            "predicted_tokens_per_round": v["predicted_mean_accepted_length"],
        }

    out = {"pick": row(pick), "best_chain": row(best_chain), "best_tree": row(best_tree), "autoregressive": row(auto)}
    if best_chain is not None:
        out["pick_over_best_chain_measured"] = by_id[pick["id"]]["measured_speedup"] / by_id[best_chain["id"]]["measured_speedup"]
        out["pick_over_best_chain_predicted"] = pick["predicted_speedup"] / best_chain["predicted_speedup"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen")
    ap.add_argument("--workloads", default="humaneval,translation")
    ap.add_argument("--mode", choices=["greedy", "sample"], default="sample")
    ap.add_argument("--prompts", type=int, default=6, help="profiling prompts")
    ap.add_argument("--validate-prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--dtype", default="auto", help="the models' dtype (auto: bf16 where native)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/tree_plans"))
    spec_bench_option(ap, required=False)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for workload in args.workloads.split(","):
        db = args.out / f"{args.family}-{args.mode}-{args.dtype}-{workload}.db"  # one database per workload: resumable
        results[workload] = run_workload(args, workload, db)
        print(json.dumps({workload: results[workload]}, indent=1), flush=True)
    meta = {"machine": machine(), "cpu_capability": cpu_capability(), "args": {k: str(v) for k, v in vars(args).items()}}
    path = args.out / f"{args.family}-{args.mode}-{args.dtype}.json"
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
