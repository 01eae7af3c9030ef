"""Several held-out draws of one workload, and the coverage of the predicted intervals over them.

One validation runs its plans on one held-out set of prompts, so its plans hit or miss their
intervals together: counting coverage needs several validations, each on its own draw. This
writes the validation split of a prompt set in consecutive draws of ``--size`` prompts, one JSONL
file each (``hsd-plan validate --prompts FILE`` reads them; every prompt is in its own file's
validation split too, as the split hashes each prompt's text), and sums the ``validate --json``
reports of such runs: plans above autoregressive decoding validated, how many measured inside
their predicted 90 % interval, the intervals' median width, the median |speed-up error| and the
regret of each validation. ``run`` does it all: a profile, a solve, one validation per draw, in
turn (each validation's misses widen the next ones' intervals, as a user's validations do), and
the summary.

    python -m benchmarks.held_out_draws run --engine llamacpp --profile-prompts 24 --draws 5 --size 4 --out-dir OUT
    python -m benchmarks.held_out_draws write --prompts humaneval --draws 3 --size 4 --out /tmp/draws
    python -m benchmarks.held_out_draws summary OUT/validate-draw-*.json
    python -m benchmarks.held_out_draws repredict --db OUT/more.db OUT/validate-draw-*.json
    python -m benchmarks.held_out_draws repredict --widen --db QA/draws.db --workload qa:profile --history HE.json QA/validate-draw-*.json
    python -m benchmarks.held_out_draws spread --db OUT/more.db --held-out-db HELD.db --held-out-workload heldout:profile
    python -m benchmarks.held_out_draws pool --db OUT/draws.db --group 2 OUT/validate-draw-*.json

``repredict`` keeps every measurement of the reports and predicts each plan again, with the
interval ``validate`` would give it before any validation is stored (the bootstrap alone), from
the newest profile of the target and workload in ``--db``: what a profile of other or more prompts
would have claimed for the same runs. With ``--widen``, each interval is widened by the reports
before it, as ``validate`` would have widened it had those predictions been stored; with
``--history``, the misses of an earlier replay (its answer's ``scores``: other workloads' draws
of the same target, validated before on the same machine) widen it too until the reports before
it hold 10 plans, as ``validate`` reads one database holding both (a workload's own validations
once they hold 10 plans, every workload's before).

``spread`` asks the same of acceptance alone, without a run: how often the bootstrap's interval
for m new prompts holds random sets of m profiled prompts and of m held-out prompts profiled on
their own (each set's truth the latency model on its own acceptance).

``pool`` reads consecutive groups of ``--group`` reports (by validation id; 0: all of them) of
one solve's plans on disjoint draws as validations of all their prompts, measured: each plan's
speed-up pooled over the group's draws, predicted for that many prompts with the bootstrap's
interval (no widening).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.bench_llamacpp import hsd_plan
from benchmarks.common import machine
from hsd_planner.plan import SOLVE_DEFAULTS, Plan, Prediction, predict, predict_over, solve, widths_from_json
from hsd_planner.prompts import load_prompts, split
from hsd_planner.solving import Bootstrap, bootstrap_predictions, bootstrap_profiles, past_plans, predicted_intervals, widened, widest
from hsd_planner.stats import miss_score, pooled_profiles, resample_profiles
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile, prompt_acceptance

# the lookups llama-server runs, a plain lookup and the 0.5B, for the 1.5B
MODELS = (
    "ngram:rule=llama-server:n=8,ngram:rule=ngram-mod:n=12:nmin=4,ngram:rule=ngram-map-k4v:n=4,ngram:n=3,"
    "qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"
)


def write_draws(prompts: str, draws: int, size: int, out: Path, category: str | None = None) -> list[Path]:
    """``draws`` files ``draw-1.jsonl``... under ``out``, each of ``size`` consecutive prompts of
    the validation split of ``prompts`` (a file, or ``humaneval``; of a JSONL file, its rows of
    ``category`` where given); fewer where the split runs out."""
    held = split(load_prompts(prompts, category), "validate").prompts
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(draws):
        part = held[i * size : (i + 1) * size]
        if len(part) < size:
            break
        path = out / f"draw-{i + 1}.jsonl"
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in part))
        files.append(path)
    return files


def summarize(reports: list[dict]) -> dict:
    """Per validation report and over all of them: plans with an interval, inside it, median width,
    median |speed-up error| as profiled and the regret (against every plan, and against those the
    solve did not predict tied with the pick)."""
    rows, plans = [], []
    for r in reports:
        mine = [p for p in r["plans"] if p["kind"] != "autoregressive" and p.get("covered") is not None]
        plans += mine
        rows.append(
            {
                "validation": r["validation_id"],
                "target": r["target"],
                "prompts": r["prompt_count"],
                "history": r.get("interval_history", 0),
                "plans": len(mine),
                "inside": sum(bool(p["covered"]) for p in mine),
                "median_width": r.get("median_interval_width"),
                "median_abs_speedup_error": r.get("median_abs_speedup_error"),
                "median_abs_error": r.get("median_abs_error"),
                "regret": r.get("regret"),
                "regret_untied": r.get("regret_untied"),
            }
        )
    widths = [p["interval_width"] for p in plans if p.get("interval_width") is not None]
    return {
        "validations": rows,
        "plans": len(plans),
        "inside": sum(bool(p["covered"]) for p in plans),
        "median_width": statistics.median(widths) if widths else None,
        "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in plans) if plans else None,
        "max_regret": max((r["regret"] for r in rows if r["regret"] is not None), default=None),
        # against the plans the solve told apart from the pick (the others were predicted tied with it)
        "max_regret_untied": max((r["regret_untied"] for r in rows if r["regret_untied"] is not None), default=None),
    }


# the prediction a plan carries into the bootstrap, which predicts it again on each resample
_UNKNOWN = Prediction(0.0, 0.0, 0.0)


def _drafted(plans: list[dict]) -> list[tuple[dict, Plan]]:
    """A report's plans above autoregressive decoding, each beside its :class:`Plan` (to predict again)."""
    return [(p, Plan(tuple(p["chain"]), tuple(widths_from_json(p["widths"])), _UNKNOWN)) for p in plans if p["kind"] != "autoregressive"]


def repredict(
    db_url: str,
    reports: list[dict],
    workload: str = "humaneval:profile",
    new: int = 128,
    widen: bool = False,
    history: Sequence[Sequence[float]] = (),
) -> dict:
    """``reports``' plans predicted again from the newest profile of their target and ``workload``
    in ``db_url``: the speed-up and its bootstrap interval (no past validations; timed as the
    plan's runs were, :meth:`Bootstrap.timed_interval`), per plan above
    autoregressive decoding, beside the measured speed-up, for generations of ``new`` tokens (the
    reports' own length); summed as :func:`summarize` sums. With ``widen``, each interval is also
    widened by the misses of the reports before it (by validation id) against these predictions and
    their bootstrap intervals, as ``validate`` widens it by the validations stored before
    (:func:`widened`); the misses ``history`` (other workloads', validated before these on the same
    machine) join them until the reports before hold :data:`MIN_RESIDUALS` plans, as
    :func:`~hsd_planner.solving.past_misses` reads them. The answer's ``scores`` are all the misses,
    one list per validation, ``history`` first, to start a later replay from."""
    db = open_db(db_url, create=False)
    out, loaded = [], {}
    before: list[list[float]] = [list(g) for g in history]
    scores: list[list[float]] = []  # these reports' own misses
    for r in sorted(reports, key=lambda r: r["validation_id"]) if widen else reports:
        contexts, m = r["context_lens"], r["prompt_count"]
        drafted = _drafted(r["plans"])
        key = (r["target"], m, widest([plan for _, plan in drafted]))
        if key not in loaded:
            profile, source = load_profile(db, r["target"], workload, length=new)
            loaded[key] = profile, bootstrap_profiles(db, profile, source, drift=True, sample=m, plans=[plan for _, plan in drafted])
        profile, boot = loaded[key]
        past = scores if past_plans(scores) else before + scores  # as past_misses reads a database holding both
        plans = []
        for p, plan in drafted:
            speedup = predict_over(profile, plan.chain, plan.widths, r["acceptance"], contexts, new).speedup  # as validate predicts it
            found = bootstrap_predictions(boot.profiles, plan, r["acceptance"], contexts, new)
            runs = p.get("text_runs") or m  # the plan's runs (greedy reports count them), else one per prompt
            band = boot.timed_interval(found, profile, plan, runs) if found else None
            lo, hi = widened(band, speedup, past if widen else ()) if band else (None, None)
            measured = p["measured_speedup"]
            plans.append(
                p
                | {
                    "predicted_speedup": speedup,
                    "predicted_speedup_interval": [lo, hi] if lo is not None else None,
                    "bootstrap_speedup_interval": list(band) if band else None,
                    "covered": None if lo is None else lo <= measured <= hi,
                    "interval_width": None if lo is None else (hi - lo) / speedup,
                    "speedup_error": speedup / measured - 1.0,
                }
            )
        history = past_plans(past) if widen else 0
        missed = (
            miss_score(p["measured_speedup"], p["predicted_speedup"], p["bootstrap_speedup_interval"])
            for p in plans
            if p["bootstrap_speedup_interval"]
        )
        scores.append([x for x in missed if x is not None])
        out.append(
            r
            | {
                "plans": plans,
                "interval_history": history,
                "median_interval_width": statistics.median(p["interval_width"] for p in plans if p["interval_width"] is not None),
                "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in plans),
                "median_abs_error": None,  # the ms per token predicted again is not compared here
                "profiled_prompts": boot.prompts,
            }
        )
    return summarize(out) | {"profiled_prompts": sorted({r["profiled_prompts"] for r in out}), "scores": before + scores}


def _plan_key(plan: dict) -> tuple:
    return tuple(plan["chain"]), json.dumps(plan["widths"])


def pooled_ms(reports: list[dict]) -> dict:
    """Each plan's ms per token over the draws of ``reports`` (one solve's plans validated on
    each), weighted by the tokens it wrote in each: the time of all its tokens over their count, by
    the plan's (chain, widths) and, under None, autoregressive decoding's.

    >>> ar, plan = {"kind": "autoregressive", "chain": ["t"], "widths": []}, {"kind": "best", "chain": ["d", "t"], "widths": [4]}
    >>> draw = lambda a, b, n: {"plans": [plan | {"measured_ms_per_token": b, "tokens": n}, ar | {"measured_ms_per_token": a, "tokens": n}]}
    >>> ms = pooled_ms([draw(100.0, 50.0, 10), draw(50.0, 10.0, 30)])
    >>> ms[None] / ms[_plan_key(plan)]  # 2x and 5x in the draws: 3.125x over their 40 tokens
    3.125
    """
    sums: dict = {}  # key -> (ms, tokens) summed over the draws
    for r in reports:
        for p in r["plans"]:
            key = None if p["kind"] == "autoregressive" else _plan_key(p)
            ms, tokens = sums.get(key, (0.0, 0))
            sums[key] = (ms + p["measured_ms_per_token"] * p["tokens"], tokens + p["tokens"])
    keys = [{None if p["kind"] == "autoregressive" else _plan_key(p) for p in r["plans"]} for r in reports]
    if None not in keys[0] or any(k != keys[0] for k in keys):
        raise SystemExit("every report must validate the same plans, autoregressive decoding among them")
    return {key: ms / tokens for key, (ms, tokens) in sums.items()}


def pool(db_url: str, reports: list[dict], workload: str = "humaneval:profile", new: int = 128) -> dict:
    """``reports`` (validations of one solve's plans on disjoint draws) read as one validation of
    all their prompts: each plan's measured speed-up is autoregressive decoding's ms per token over
    the plan's, each pooled over the draws by tokens (a draw's ratio was taken in one run, and a
    machine that slowed between draws slows both sides of it); its prediction and bootstrap
    interval (no past validations) are for that many prompts with all their context lengths, from
    the newest profile of the target and ``workload`` in ``db_url``."""
    first = reports[0]
    if any(r["target"] != first["target"] or r["acceptance"] != first["acceptance"] for r in reports):
        raise SystemExit("the reports validate other targets or acceptance models; pool one solve's validations")
    ms = pooled_ms(reports)
    contexts = [c for r in reports for c in r["context_lens"]]
    drafted = _drafted(first["plans"])
    db = open_db(db_url, create=False)
    profile, source = load_profile(db, first["target"], workload, length=new)
    boot = bootstrap_profiles(db, profile, source, drift=True, sample=len(contexts), plans=[plan for _, plan in drafted])
    plans = []
    for p, plan in drafted:
        measured = ms[None] / ms[_plan_key(p)]
        speedup = predict_over(profile, plan.chain, plan.widths, first["acceptance"], contexts, new).speedup
        lo, hi = boot.interval([b.speedup for b in bootstrap_predictions(boot.profiles, plan, first["acceptance"], contexts, new)])
        plans.append(
            {
                "chain": p["chain"],
                "widths": p["widths"],
                "kind": p["kind"],
                "measured_speedup": measured,
                "predicted_speedup": speedup,
                "predicted_speedup_interval": [lo, hi],
                "covered": lo <= measured <= hi,
                "interval_width": (hi - lo) / speedup,
                "speedup_error": speedup / measured - 1.0,
            }
        )
    pick = next(p for p in first["plans"] if p["kind"] == "best")
    return {
        "draws": len(reports),
        "prompts": len(contexts),
        "profiled_prompts": boot.prompts,
        "plans": plans,
        "inside": sum(p["covered"] for p in plans),
        "median_width": statistics.median(p["interval_width"] for p in plans),
        "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in plans),
        "regret": ms[_plan_key(pick)] / min(ms.values()) - 1.0,
    }


def spread(db_url: str, held_db_url: str, held_workload: str, sizes: list[int], sets: int = 300, new: int = 128, seed: int = 0) -> dict:
    """On acceptance alone, how often the bootstrap's interval for m new prompts holds sets of m
    prompts: of the profiled ones, and of held-out prompts profiled on their own (``held_db_url``,
    workload ``held_workload``, its pairs a subset of the profile's).

    The plans are the solve's of the newest profile in ``db_url`` whose pairs the held-out profile
    also measured; each set's truth is the same latency model on the set's own pooled acceptance,
    and the intervals are drawn without drift, so only which prompts were drawn varies. Per m:
    the fraction of (set, plan) inside, below and above."""
    db, held_db = open_db(db_url, create=False), open_db(held_db_url, create=False)
    profile, source = load_profile(db, length=new)
    held, held_source = load_profile(held_db, workload=held_workload, length=new)
    measured = {(a.drafter, a.verifier) for a in held.acceptance}
    plans = [
        p
        for p in solve(profile, SOLVE_DEFAULTS.model_copy(update={"max_new_tokens": new, "t_max": 16}), source.contexts).singles
        if p.depth
    ]
    plans = [p for p in plans if set(zip(p.chain, p.chain[1:])) <= measured]
    by_pair = prompt_acceptance(db, source, {(a.drafter, a.verifier) for a in profile.acceptance})
    held_pairs = prompt_acceptance(held_db, held_source, measured)
    held = profile.model_copy(update={"acceptance": [a for a in held.acceptance if (a.drafter, a.verifier) in measured]})
    profiled = sorted({k for rows in by_pair.values() for k in rows})
    heldout = sorted({k for rows in held_pairs.values() for k in rows})
    widths = widest(plans)
    rng = np.random.default_rng(seed)
    out: dict = {"profiled": len(profiled), "held_out": len(heldout), "plans": [" -> ".join(p.chain) for p in plans], "sizes": {}}
    for m in sizes:
        boot = Bootstrap(resample_profiles(profile, by_pair, drift=False, sample=m, widths=widths), len(profiled), m)
        bands = np.array(predicted_intervals(boot, plans, "empirical", source.contexts, new) or [])  # (plans, 2)
        row = {}
        for name, base, pairs, keys in (("profiled", profile, by_pair, profiled), ("held_out", held, held_pairs, heldout)):
            drawn = [list(rng.choice(keys, m, replace=False)) for _ in range(sets)]
            pooled = pooled_profiles(base, pairs, drawn, widths)
            truth = np.array(
                [[predict(b, p.chain, p.widths, "empirical", source.contexts, new).speedup for p in plans] for b in pooled]
            )  # (sets, plans)
            row[name] = {
                "inside": float(((truth >= bands[:, 0]) & (truth <= bands[:, 1])).mean()),
                "below": float((truth < bands[:, 0]).mean()),
                "above": float((truth > bands[:, 1]).mean()),
            }
        out["sizes"][m] = row
    return out


def run(args: argparse.Namespace) -> dict:
    """Profile, solve, and validate on each draw in turn into ``args.out_dir``; the summary."""
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    db = ["--db", str(out / "draws.db")]
    started = time.perf_counter()
    category = ["--category", args.category] if args.category else []
    hsd_plan("profile", "--engine", args.engine, "--models", args.models, "--prompts", args.prompts, *category,
             "--max-prompts", str(args.profile_prompts), "--max-new-tokens", str(args.new),
             "--latency-grid", args.latency_grid, *db)  # fmt: skip
    solve = hsd_plan("solve", "--max-new-tokens", str(args.new), "--t-max", str(args.t_max), "--top", str(args.top), *db)
    print(f"profiled and solved in {time.perf_counter() - started:.0f} s; pick {solve['plans'][0]['chain']}", flush=True)
    reports = []
    for path in write_draws(args.prompts, args.draws, args.size, out, args.category):
        report = hsd_plan("validate", "--candidates", "all", "--prompts", str(path), "--max-prompts", str(args.size),
                          "--max-new-tokens", str(args.new), "--repeats", str(args.repeats), *db)  # fmt: skip
        (out / f"validate-{path.stem}.json").write_text(json.dumps(report, indent=1))
        reports.append(report)
        print(f"{path.stem}: {report['coverage']} inside, {time.perf_counter() - started:.0f} s", flush=True)
    summary = {"machine": machine(), "seconds": round(time.perf_counter() - started), **summarize(reports)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the held-out draws as JSONL prompt files")
    w.add_argument("--prompts", default="humaneval", help="a prompt file, or humaneval [default]")
    w.add_argument("--category", help="of a JSONL prompt file, only its rows of this category")
    w.add_argument("--draws", type=int, default=3)
    w.add_argument("--size", type=int, default=4, help="prompts per draw")
    w.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("summary", help="coverage over validate --json reports")
    s.add_argument("reports", nargs="+", type=Path)
    q = sub.add_parser("repredict", help="the reports' measurements against another profile's predictions and bootstrap intervals")
    q.add_argument("--db", required=True, help="the database whose newest profile predicts")
    q.add_argument("--workload", default="humaneval:profile")
    q.add_argument("--new", type=int, default=128, help="the reports' new tokens per generation")
    q.add_argument("--widen", action="store_true", help="widen each interval by the earlier reports' misses, as validate does")
    q.add_argument("--history", type=Path, help="with --widen: the misses of an earlier repredict's answer (its scores) before these")
    q.add_argument("reports", nargs="+", type=Path)
    o = sub.add_parser("pool", help="the reports of one solve's plans on disjoint draws as one validation of all their prompts")
    o.add_argument("--db", required=True, help="the database whose newest profile predicts")
    o.add_argument("--workload", default="humaneval:profile")
    o.add_argument("--new", type=int, default=128, help="the reports' new tokens per generation")
    o.add_argument("--group", type=int, default=0, help="pool consecutive groups of this many reports, each one validation (0: all)")
    o.add_argument("reports", nargs="+", type=Path)
    d = sub.add_parser(
        "spread", help="on acceptance alone, the bootstrap's interval for m prompts against sets of profiled and held-out prompts"
    )
    d.add_argument("--db", required=True, help="the database whose newest profile predicts")
    d.add_argument("--held-out-db", required=True, help="a database with the held-out prompts' own acceptance profiled")
    d.add_argument("--held-out-workload", required=True, help="that profile's workload name")
    d.add_argument("--sizes", default="4,8,12", help="prompts per set")
    d.add_argument("--sets", type=int, default=300, help="random sets per size")
    d.add_argument("--new", type=int, default=128)
    r = sub.add_parser("run", help="profile, solve, validate on each draw, summary")
    r.add_argument("--engine", default="llamacpp", choices=["llamacpp", "torch"])
    r.add_argument("--models", default=MODELS, help="profile --models (the last is the target)")
    r.add_argument("--prompts", default="humaneval")
    r.add_argument("--category", help="of a JSONL prompt file, only its rows of this category")
    r.add_argument("--profile-prompts", type=int, default=24)
    r.add_argument("--draws", type=int, default=5)
    r.add_argument("--size", type=int, default=4, help="held-out prompts per draw")
    r.add_argument("--new", type=int, default=128)
    r.add_argument("--t-max", type=int, default=16)
    r.add_argument("--top", type=int, default=4, help="solve --top: with every drafter's best, what each draw validates")
    r.add_argument("--repeats", type=int, default=2)
    r.add_argument("--latency-grid", default="1,2,3,4,5,6,7,8,9,12,15,16,17")
    r.add_argument("--out-dir", type=Path, default=Path("benchmarks/out/draws"))
    args = ap.parse_args()
    if args.cmd == "repredict":
        history = json.loads(args.history.read_text())["scores"] if args.history else ()
        reports = [json.loads(p.read_text()) for p in args.reports]
        print(json.dumps(repredict(args.db, reports, args.workload, args.new, args.widen, history), indent=1))
        return
    if args.cmd == "pool":
        reports = sorted((json.loads(p.read_text()) for p in args.reports), key=lambda r: r["validation_id"])
        size = args.group or len(reports)
        pooled = [pool(args.db, reports[i : i + size], args.workload, args.new) for i in range(0, len(reports) - size + 1, size)]
        plans = [p for g in pooled for p in g["plans"]]
        print(
            json.dumps(
                {
                    "validations": pooled,
                    "plans": len(plans),
                    "inside": sum(p["covered"] for p in plans),
                    "median_width": statistics.median(p["interval_width"] for p in plans),
                    "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in plans),
                    "max_regret": max(g["regret"] for g in pooled),
                },
                indent=1,
            )
        )
        return
    if args.cmd == "run":
        print(json.dumps(run(args), indent=1))
        return
    if args.cmd == "spread":
        sizes = [int(m) for m in args.sizes.split(",")]
        print(json.dumps(spread(args.db, args.held_out_db, args.held_out_workload, sizes, args.sets, args.new), indent=1))
        return
    if args.cmd == "write":
        for path in write_draws(args.prompts, args.draws, args.size, args.out, args.category):
            print(path)
        return
    print(json.dumps(summarize([json.loads(p.read_text()) for p in args.reports]), indent=1))


if __name__ == "__main__":
    main()
