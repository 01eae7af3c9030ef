"""HSD where it can pay: the Qwen2.5-Coder family on HumanEval and Spec-Bench, target the 1.5B.

Three stages, each reading what the one before stored (``--stages`` picks):

profile    every candidate (n-gram, int8 copies of both models, the 0.5B, early exits of both,
           the 1.5B target) on the profiling split of each workload: HumanEval (``--humaneval``
           problems) and Spec-Bench's six categories (``--per-category`` prompts each; the
           multi-turn one is the first turns of its 80 MT-bench questions), one workload each,
           ``--new-tokens`` continuations, library defaults otherwise (what ``hsd-plan profile``
           does). Wall time per workload.
validate   per workload: solve (top 5, every single drafter, autoregressive), run every plan on
           held-out prompts (the validation split, never profiled), predicted against measured.
hf         on HumanEval's held-out prompts: the solver's pick, the best single drafter (by the
           validation's measurement) and autoregressive decoding, ours, against Hugging Face
           transformers on the same loaded target in the same run: ``generate``, assisted generation
           with the 0.5B and with the int8 0.5B as assistant (the assistant's default schedule,
           and constant ``num_assistant_tokens`` from ``--constant``, best kept) and prompt lookup.
           Every run decodes exactly ``--new-tokens`` tokens (no stop token on either side),
           prompts alternate which side runs first, ratios are per prompt.

    python -m benchmarks.bench_qwen --spec-bench question.jsonl --out benchmarks/out/qwen
    python -m benchmarks.bench_qwen --spec-bench question.jsonl --out benchmarks/out/qwen --stages hf
    python -m benchmarks.bench_qwen --spec-bench question.jsonl --out benchmarks/out/qwen --stages validate --only qa,rag
    python -m benchmarks.bench_qwen --spec-bench question.jsonl --out benchmarks/out/qwen --stages profile,validate --only mt_bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import SPEC_CATEGORIES, machine, mt_bench_set, spec_bench_option, spec_bench_set
from hsd_planner.plan import SolveConfig
from hsd_planner.profiling import ProfileConfig, profile_summary, run_profile
from hsd_planner.prompts import PromptSet, encode_prompt, load_prompts, split
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.validation import run_validation, select_plans
from hsd_runtime import Hierarchy, ModelLoader
from hsd_runtime.build import build_hierarchy
from hsd_runtime.models.device import auto_dtype, cpu_capability

TARGET = "qwen2.5-coder-1.5b"
MODELS = [
    "ngram",
    "qwen2.5-coder-0.5b:quant=int8",
    "qwen2.5-coder-0.5b:layers=12",
    "qwen2.5-coder-0.5b",
    "qwen2.5-coder-1.5b:quant=int8",
    "qwen2.5-coder-1.5b:layers=14",
    TARGET,
]
ASSISTANTS = {"0.5B": "qwen2.5-coder-0.5b", "0.5B int8": "qwen2.5-coder-0.5b:quant=int8"}


def _workloads(args) -> list[tuple[str, PromptSet, PromptSet]]:
    """(name, profiling prompts, held-out prompts) per workload."""
    out = []
    humaneval = load_prompts("humaneval")
    out.append(
        (
            "humaneval",
            PromptSet("humaneval", split(humaneval, "profile").prompts[: args.humaneval]),
            PromptSet("humaneval:validate", split(humaneval, "validate").prompts[: args.humaneval_validate]),
        )
    )
    for every in [*(spec_bench_set(args.spec_bench, category) for category in SPEC_CATEGORIES), mt_bench_set(args.spec_bench)]:
        name = every.name  # spec_bench/<category>
        out.append(
            (
                name,
                PromptSet(name, split(every, "profile").prompts[: args.per_category]),
                PromptSet(f"{name}:validate", split(every, "validate").prompts[: args.per_category_validate]),
            )
        )
    out = out[: args.workloads]
    return [w for w in out if not args.only or w[0].split("/")[-1] in args.only]


def stage_profile(args, db, loader, dtype: str, runs: dict) -> dict:
    """Profile every workload (those of ``--only``), adding each to ``runs``."""
    config = ProfileConfig(models=args.models, dtype=dtype, max_new_tokens=args.new_tokens)
    for name, prompts, _ in _workloads(args):
        t0 = time.perf_counter()
        outcome = run_profile(db, config, prompts, loader)
        wall = time.perf_counter() - t0
        summary = profile_summary(db, outcome).to_dict()
        runs[name] = {"wall_s": wall, "prompts": len(prompts.prompts), "summary": summary}
        alphas = {f"{a['drafter']} > {a['verifier']}": round(a["alpha"], 3) for a in summary["acceptance"] if a["verifier"] == TARGET}
        print(f"[profile] {name}: {wall:.0f} s; alpha by the target: {alphas}", flush=True)
    return runs


def stage_validate(args, db, loader, reports: dict, save) -> dict:
    """Validate every workload (those of ``--only``), adding each report to ``reports`` and
    calling ``save()`` as it lands, so that a stopped run keeps the workloads it finished."""
    for name, _, held in _workloads(args):
        solved = solve_and_store(db, target=TARGET, workload=name, config=SolveConfig(top_k=5, t_max=args.t_max))
        solve, plans = select_plans(db, (), "all")
        assert solve.id == solved.solve_id
        report = run_validation(db, loader, solve, plans, held, args.new_tokens, args.repeats)
        reports[name] = report.to_dict()
        save()
        row = _summary_row(name, reports[name])
        print(f"[validate] {json.dumps(row)}", flush=True)
    return reports


def _summary_row(name: str, report: dict) -> dict:
    plans = report["plans"]
    pick = next(p for p in plans if p["plan_id"] == report["pick"])
    auto = next(p for p in plans if len(p["chain"]) == 1)  # kind "best" when it is the pick
    singles = [p for p in plans if len(p["chain"]) == 2]
    single = min(singles, key=lambda p: p["measured_ms_per_token"])
    fastest = min(plans, key=lambda p: p["measured_ms_per_token"])
    stacks = [p for p in plans if len(p["chain"]) > 2]  # two drafters or more
    stack = min(stacks, key=lambda p: p["measured_ms_per_token"]) if stacks else None
    errors = [abs(p["predicted_speedup"] / p["measured_speedup"] - 1) for p in plans if p is not auto]
    calibrated = [abs(p["calibrated_speedup_error"]) for p in plans if p is not auto and p.get("calibrated_speedup_error") is not None]
    return {
        "workload": name,
        "plans": len(plans),
        "pick": _plan_name(pick),
        "pick_pred_speedup": pick["predicted_speedup"],
        "pick_meas_speedup": pick["measured_speedup"],
        "best_single": _plan_name(single),
        "best_single_meas_speedup": single["measured_speedup"],
        "pick_over_best_single": single["measured_ms_per_token"] / pick["measured_ms_per_token"],
        "fastest": _plan_name(fastest),
        "fastest_over_best_single": single["measured_ms_per_token"] / fastest["measured_ms_per_token"],
        "best_hierarchy": _plan_name(stack) if stack else None,
        "best_hierarchy_pred_meas_speedup": (stack["predicted_speedup"], stack["measured_speedup"]) if stack else None,
        "best_hierarchy_over_best_single": single["measured_ms_per_token"] / stack["measured_ms_per_token"] if stack else None,
        "median_abs_speedup_error": statistics.median(errors),
        "median_abs_speedup_error_calibrated": statistics.median(calibrated) if calibrated else None,
        "pick_cal_speedup": pick.get("calibrated_speedup"),
        "pick_accepted": (pick["predicted_mean_accepted_length"], pick["measured_mean_accepted_length"]),
        "median_abs_error": report["median_abs_error"],
        "median_abs_error_calibrated": report["median_abs_error_calibrated"],
        "drift": report["drift"],
        "regret": report["regret"],
        "regret_untied": report["regret_untied"],
    }


def _plan_name(plan: dict) -> str:
    return (
        " -> ".join(f"{name}[{w}]" for name, w in zip(plan["chain"], plan["widths"])) + f" -> {plan['chain'][-1]}"
        if plan["widths"]
        else plan["chain"][-1]
    )


def _hf_generate(model, ids: list[int], new_tokens: int, never: int, **kwargs) -> tuple[float, list[int]]:
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=new_tokens, eos_token_id=never, **kwargs)
    elapsed = time.perf_counter() - t0
    tokens = out[0, len(ids) :].tolist()
    assert len(tokens) == new_tokens, "generate stopped early"
    return elapsed, tokens


def _ours(hierarchy: Hierarchy, ids: list[int], new_tokens: int) -> tuple[float, list[int]]:
    r = hierarchy.generate(ids, new_tokens)
    assert len(r.tokens) == new_tokens
    return r.prefill_s + r.decode_s, r.tokens


def stage_hf(args, engine, loader, reports: dict) -> dict:
    report = reports["humaneval"]
    plans = report["plans"]
    pick = next(p for p in plans if p["plan_id"] == report["pick"])
    single = min((p for p in plans if len(p["chain"]) == 2), key=lambda p: p["measured_ms_per_token"])
    auto = next(p for p in plans if len(p["chain"]) == 1)  # kind "best" when it is the pick
    target = loader.load(TARGET)
    never = target.model.config.vocab_size - 1  # a padding row of Qwen's embedding: never generated
    ours: dict[str, Hierarchy] = {}
    for label, plan in (("ours: pick", pick), ("ours: best single", single), ("ours: autoregressive", auto)):
        hierarchy, _ = build_hierarchy(plan["chain"], plan["widths"], loader)
        hierarchy.eos_token_ids = frozenset()  # exactly --new-tokens tokens, like generate below
        ours[f"{label} ({_plan_name(plan)})"] = hierarchy
    theirs: dict[str, dict] = {"HF generate": {}}
    defaults = {}
    for label, spec in ASSISTANTS.items():
        assistant = loader.load(spec).model
        g = assistant.generation_config
        defaults[label] = dict(
            num_assistant_tokens=g.num_assistant_tokens,
            schedule=g.num_assistant_tokens_schedule,
            confidence_threshold=g.assistant_confidence_threshold,
        )
        theirs[f"HF assisted, {label}, default schedule"] = dict(assistant_model=assistant)
        for t in args.constant:
            theirs[f"HF assisted, {label}, constant {t}"] = dict(assistant_model=assistant, _constant=t)
    theirs[f"HF prompt lookup ({args.lookup_tokens} tokens)"] = dict(prompt_lookup_num_tokens=args.lookup_tokens)
    print(f"[hf] assistant generation defaults: {defaults}", flush=True)

    def run_theirs(kwargs: dict, ids: list[int]) -> tuple[float, list[int]]:
        kwargs = dict(kwargs)
        constant = kwargs.pop("_constant", None)
        if "assistant_model" in kwargs:
            g = kwargs["assistant_model"].generation_config
            saved = (g.num_assistant_tokens, g.num_assistant_tokens_schedule, g.assistant_confidence_threshold)
            if constant is not None:
                g.num_assistant_tokens, g.num_assistant_tokens_schedule, g.assistant_confidence_threshold = constant, "constant", 0.0
            try:
                return _hf_generate(target.model, ids, args.new_tokens, never, **kwargs)
            finally:
                g.num_assistant_tokens, g.num_assistant_tokens_schedule, g.assistant_confidence_threshold = saved
        return _hf_generate(target.model, ids, args.new_tokens, never, **kwargs)

    held = _workloads(args)[0][2]
    warm = encode_prompt(target.tokenizer, "def f(x):")
    for h in ours.values():
        _ours(h, warm, 4)
    for kw in theirs.values():
        run_theirs(kw, warm)
    times: dict[str, list[float]] = {name: [] for name in [*ours, *theirs]}
    same: dict[str, bool] = {name: True for name in theirs}
    for i, text in enumerate(held.prompts):
        ids = encode_prompt(target.tokenizer, text)
        tokens: dict[str, list[int]] = {}
        for name in [*ours, *theirs] if i % 2 == 0 else [*theirs, *ours]:
            elapsed, tokens[name] = _ours(ours[name], ids, args.new_tokens) if name in ours else run_theirs(theirs[name], ids)
            times[name].append(elapsed)
        reference = next(t for n, t in tokens.items() if n in ours and "autoregressive" in n)
        for name in theirs:
            same[name] = same[name] and tokens[name] == reference
        print(f"[hf] prompt {i}: " + ", ".join(f"{n.split(' (')[0]} {t[-1]:.1f}s" for n, t in times.items()), flush=True)
    ref = next(n for n in ours if "autoregressive" in n)
    rows = {}
    for name, t in times.items():
        rows[name] = {
            "median_s": statistics.median(t),
            "speedup_over_ours_autoregressive": statistics.median(a / b for a, b in zip(times[ref], t)),
            "tokens_as_ours_autoregressive": same.get(name),
        }
    pick_name = next(n for n in ours if n.startswith("ours: pick"))
    for name in rows:
        rows[name]["pick_over_this"] = statistics.median(b / a for a, b in zip(times[pick_name], times[name]))
    return {"prompts": len(held.prompts), "new_tokens": args.new_tokens, "assistant_defaults": defaults, "rows": rows}


def _print_tables(result: dict) -> None:
    if "profile" in result:
        print("\n| workload | prompts | profile wall |\n|---|---|---|")
        for name, run in result["profile"].items():
            print(f"| {name} | {run['prompts']} | {run['wall_s'] / 60:.1f} min |")
    if "validate" in result:
        print(
            "\n| workload | plans | solver's pick | speed-up predicted / calibrated / measured | best single drafter (measured) |"
            " pick over best single | fastest plan measured | median abs speed-up error as profiled / calibrated |"
            " median abs error raw / calibrated | regret (untied) | pick's tokens per round predicted / measured |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, report in result["validate"].items():
            r = _summary_row(name, report)
            cal = "-" if r["pick_cal_speedup"] is None else f"{r['pick_cal_speedup']:.2f}x"
            cal_err = "-" if r["median_abs_speedup_error_calibrated"] is None else f"{r['median_abs_speedup_error_calibrated']:.1%}"
            print(
                f"| {name} | {r['plans']} | {r['pick']} | {r['pick_pred_speedup']:.2f}x / {cal} / {r['pick_meas_speedup']:.2f}x | "
                f"{r['best_single']} ({r['best_single_meas_speedup']:.2f}x) | {r['pick_over_best_single']:.2f}x | "
                f"{r['fastest']} ({r['fastest_over_best_single']:.2f}x best single) | {r['median_abs_speedup_error']:.1%} / {cal_err} | "
                f"{r['median_abs_error']:.1%} / {r['median_abs_error_calibrated']:.1%} | {r['regret']:.1%} ({r['regret_untied']:.1%}) | "
                f"{r['pick_accepted'][0]:.2f} / {r['pick_accepted'][1]:.2f} |"
            )
    if "hf" in result:
        hf = result["hf"]
        print(f"\nHumanEval held-out, {hf['prompts']} prompts x {hf['new_tokens']} tokens, end to end (prefill + decode)\n")
        print("| configuration | median s | speed-up over autoregressive (ours) | the pick over it | same tokens as ours AR |")
        print("|---|---|---|---|---|")
        for name, r in hf["rows"].items():
            same = "" if r["tokens_as_ours_autoregressive"] is None else ("yes" if r["tokens_as_ours_autoregressive"] else "no")
            print(f"| {name} | {r['median_s']:.2f} | {r['speedup_over_ours_autoregressive']:.2f}x | {r['pick_over_this']:.2f}x | {same} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="profile,validate,hf")
    ap.add_argument("--humaneval", type=int, default=16, help="HumanEval problems profiled")
    ap.add_argument("--humaneval-validate", type=int, default=6, help="held-out HumanEval problems validated")
    ap.add_argument("--per-category", type=int, default=4, help="Spec-Bench prompts profiled per category")
    ap.add_argument("--per-category-validate", type=int, default=3)
    ap.add_argument("--workloads", type=int, default=7, help="the first N workloads (HumanEval first, MT-bench last)")
    ap.add_argument(
        "--only",
        type=lambda s: s.split(","),
        default=[],
        help="profile and validate only these workloads (humaneval, translation, ..., mt_bench), keeping the others' stored results",
    )
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument(
        "--models", type=lambda s: s.split(","), default=MODELS, help=f"candidates profiled, target last [default: {','.join(MODELS)}]"
    )
    ap.add_argument("--t-max", type=int, default=8, help="widest proposal the solver considers (hsd-plan solve --t-max)")
    ap.add_argument("--repeats", type=int, default=1, help="validation runs of every plan on every held-out prompt")
    ap.add_argument(
        "--constant", type=lambda s: [int(x) for x in s.split(",")], default=[3, 6], help="HF constant num_assistant_tokens tried"
    )
    ap.add_argument("--lookup-tokens", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/qwen"))
    spec_bench_option(ap, required=False)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    db = open_db(str(args.out / "qwen.db"))
    result_file = args.out / "qwen.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    result["machine"] = f"{machine()}; CPU capability {cpu_capability()}; dtype {dtype}"
    print(result["machine"], flush=True)
    stages = args.stages.split(",")
    if "profile" in stages:
        result["profile"] = stage_profile(args, db, loader, dtype, result.get("profile", {}) if args.only else {})
        result_file.write_text(json.dumps(result, indent=1))
    if "validate" in stages:
        result["validate"] = result.get("validate", {}) if args.only else {}

        def save() -> None:
            result_file.write_text(json.dumps(result, indent=1))

        stage_validate(args, db, loader, result["validate"], save)
    if "hf" in stages:
        result["hf"] = stage_hf(args, db, loader, result["validate"])
        result_file.write_text(json.dumps(result, indent=1))
    _print_tables(result)


def tables(path: Path) -> None:
    """Print the tables of a stored result file (``python -c 'from benchmarks.bench_qwen import tables; tables(...)'``)."""
    _print_tables(json.loads(Path(path).read_text()))


if __name__ == "__main__":
    main()
