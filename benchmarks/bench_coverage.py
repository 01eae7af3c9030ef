"""How often the predicted 90% interval holds what a held-out set of prompts drafts, over many
random splits of one profiled workload.

A validation measures a plan on a handful of held-out prompts, and all the plans of one validation
share them: 34 plans over two validations are two draws of the held-out set, not 34. This
benchmark takes a profile of many prompts (the per-prompt acceptance rows every profile stores)
and splits it at random ``--splits`` times into ``--profiled`` prompts and ``--held-out`` others.
For each split and plan:

- the prediction from the profiled prompts' acceptance (what ``solve`` would say);
- its 90% interval over bootstrap profiles of those prompts, each pooling ``--held-out`` prompts
  (what ``validate`` prints before it runs), without the latency drift: this isolates which
  prompts were drawn;
- the held-out figure: the same latency model on the held-out prompts' own acceptance. For a
  lookup our engine and llama-server draft exactly what the profile replays (see
  docs/benchmarks/predictions.md), so this is what a validation measures less its timing noise.

It reports per plan the coverage (held-out figure inside the interval), the median interval width
over the prediction, and the median |speed-up error| the held-out draw alone makes: the floor under
a validation's error on that many prompts, however exact the latency model.

    hsd-plan profile --engine llamacpp --prompts humaneval --max-prompts 48 --max-new-tokens 128 \\
        --models ngram:rule=llama-server:n=8,ngram:rule=ngram-mod:n=12:nmin=4,ngram:rule=ngram-map-k4v:n=4,ngram:n=3,\\
qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --latency-grid 1,2,3,4,5,6,7,8,9,12,15,16,17,24,31,32,33 \\
        --db benchmarks/out/coverage/coverage.db
    python -m benchmarks.bench_coverage --db benchmarks/out/coverage/coverage.db --profiled 8 --held-out 6
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from benchmarks.common import machine
from hsd_planner.plan import SolveConfig, predict, solve
from hsd_planner.plan.plans import format_chain
from hsd_planner.solving import Bootstrap
from hsd_planner.stats import interval, pooled_profile, resample_profiles
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile, prompt_acceptance
from hsd_runtime import cpu_capability


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, required=True, help="a profile of many prompts (hsd-plan profile --max-prompts 48 ...)")
    ap.add_argument("--profiled", type=int, default=8, help="prompts each split profiles")
    ap.add_argument("--held-out", type=int, default=6, help="prompts each split validates on")
    ap.add_argument("--splits", type=int, default=200)
    ap.add_argument("--new", type=int, default=128, help="new tokens a generation (solve --max-new-tokens)")
    ap.add_argument("--t-max", type=int, default=32)
    ap.add_argument("--widths", default="4,8,16", help="each drafter's widths, as one-level plans beside the solve's")
    ap.add_argument("--context", type=int, default=256, help="the context the cost curves are read at")
    ap.add_argument("--top", type=int, default=3, help="the full profile's best hierarchies to follow")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/coverage/coverage.json"))
    args = ap.parse_args()

    store = open_db(str(args.db))
    profile, source = load_profile(store)
    pairs = {(a.drafter, a.verifier) for a in profile.acceptance}
    by_pair = prompt_acceptance(store, source, pairs)
    prompts = sorted(set.intersection(*(set(rows) for rows in by_pair.values())))
    if len(prompts) < args.profiled + args.held_out:
        raise SystemExit(f"{len(prompts)} prompts profiled: fewer than --profiled + --held-out")

    # the plans: the full profile's top hierarchies, each drafter's best, each drafter at --widths
    config = SolveConfig(t_max=args.t_max, top_k=args.top, max_new_tokens=args.new, trees=False)
    found = solve(profile, config, contexts=args.context)
    plans = {format_chain(p.chain, p.widths): (p.chain, p.widths) for p in [*found.top, *found.singles]}
    drafters = sorted({a.drafter for a in profile.acceptance if a.verifier == profile.target})
    for name in drafters:
        for w in (int(x) for x in args.widths.split(",")):
            plans.setdefault(format_chain((name, profile.target), (w,)), ((name, profile.target), (w,)))

    rng = np.random.default_rng(args.seed)
    # per plan and split: predicted and held-out speed-up, the percentile and the expanded interval
    rows: dict[str, list[tuple[float, float, tuple[float, float], tuple[float, float]]]] = {label: [] for label in plans}
    for s in range(args.splits):
        order = [prompts[i] for i in rng.permutation(len(prompts))]
        profiled, held = order[: args.profiled], order[args.profiled : args.profiled + args.held_out]
        base, heldout = pooled_profile(profile, by_pair, profiled), pooled_profile(profile, by_pair, held)
        sub = {pair: {k: rows_[k] for k in profiled} for pair, rows_ in by_pair.items()}
        # the bootstrap validate draws, and its interval as validate computes it
        boot = Bootstrap(resample_profiles(base, sub, seed=args.seed + s, sample=args.held_out), args.profiled, args.held_out)
        for label, (chain, widths) in plans.items():
            predicted = predict(base, chain, widths, config.acceptance, args.context, args.new)
            measured = predict(heldout, chain, widths, config.acceptance, args.context, args.new)
            spread = [predict(b, chain, widths, config.acceptance, args.context, args.new).speedup for b in boot.profiles]
            rows[label].append((predicted.speedup, measured.speedup, interval(spread), boot.interval(spread)))
        print(f"\rsplit {s + 1}/{args.splits}", end="", flush=True)
    print()

    print(f"{args.db}: {len(prompts)} prompts profiled; {args.splits} random splits of {args.profiled} profiled, "
          f"{args.held_out} held out; {args.new} new tokens; {machine()}, {cpu_capability()}")  # fmt: skip
    out = {}
    for label, got in rows.items():
        out[label] = {"median_abs_error": statistics.median(abs(p / m - 1) for p, m, _a, _b in got)}
        for kind, k in (("percentile", 2), ("expanded", 3)):
            inside = sum(g[k][0] <= g[1] <= g[k][1] for g in got)
            out[label][kind] = {"inside": inside, "width": statistics.median((g[k][1] - g[k][0]) / g[0] for g in got)}
        cells = ", ".join(f"{kind} {out[label][kind]['inside']}/{len(got)} inside, width {out[label][kind]['width']:.1%}"
                          for kind in ("percentile", "expanded"))  # fmt: skip
        print(f"  {label}: {cells}; the held-out draw's median |error| {out[label]['median_abs_error']:.1%}")
    # a plan whose interval has no width (a lookup that never drafts at that width) holds its figure trivially
    counted = [label for label, v in out.items() if v["percentile"]["width"] > 0]
    total = sum(len(rows[label]) for label in counted)
    for kind in ("percentile", "expanded"):
        inside = sum(out[label][kind]["inside"] for label in counted)
        width = statistics.median(out[label][kind]["width"] for label in counted)
        print(f"{len(counted)} plans that draft, {kind}: {inside}/{total} inside ({inside / total:.1%}), median width {width:.1%}")
    floor = statistics.median(out[label]["median_abs_error"] for label in counted)
    print(f"the held-out draw's median |error|, median over those plans: {floor:.1%}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"db": str(args.db), "prompts": len(prompts), "profiled": args.profiled, "held_out": args.held_out, "splits": args.splits,
           "new": args.new, "machine": machine(), "cpu_capability": cpu_capability(), "plans": out}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
