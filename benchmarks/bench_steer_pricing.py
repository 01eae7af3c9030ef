"""A steered drafter's projection charged once per proposal or once per pass, against measurement.

Decoding runs a steered drafter's projection (its verifier's taps to its vectors) once per
proposal; ``profile`` times it apart (n = 0 of the drafter's curve) and the planner charges it
once a round. Charging it to every pass instead (what timing each pass with a projection in it
gives) over-prices a round of width w by w - 1 projections. For every plan of a validation
(``hsd-plan validate --json``), this prints the prediction both ways, from the same profile and at
the same contexts as ``validate``, as a speed-up over the target's own decoding, beside the
speed-up measured in the same run (a ratio of one run, which the machine's drift between
profiling and validation cancels from); the per-proposal prediction must equal ``validate``'s
own. The runtime's own counters give the projections it ran per target round and their time.

    hsd-plan profile --models smollm2-135m:layers=4,smollm2-135m:layers=4:steer=DIR,smollm2-135m \\
        --max-prompts 16 --db benchmarks/out/pricing.db
    hsd-plan solve --db benchmarks/out/pricing.db --no-trees --top 8
    hsd-plan validate --db benchmarks/out/pricing.db --plan ... --max-prompts 8 --repeats 2 --json > validation.json
    python -m benchmarks.bench_steer_pricing --db benchmarks/out/pricing.db --validation validation.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hsd_planner.plan import LatencyCurve, Profile, format_chain, predict_over, widths_from_json
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile


def per_pass(profile: Profile) -> Profile:
    """``profile`` with every model's proposal cost moved into each of its passes (n >= 1)."""
    models = []
    for m in profile.models:
        points = m.latency[1].points
        if any(0 in row for row in points.values()):
            moved = {c: {n: ms + row[0] for n, ms in row.items() if n} for c, row in points.items()}
            m = m.model_copy(update={"latency": {1: LatencyCurve(points=moved)}})
        models.append(m)
    return profile.model_copy(update={"models": models})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, required=True)
    ap.add_argument("--validation", type=Path, required=True, help="The output of hsd-plan validate --json.")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="The validation's --max-new-tokens.")
    args = ap.parse_args()
    run = json.loads(args.validation.read_text())
    profile, _ = load_profile(open_db(str(args.db)), target=run["target"], mode=run["mode"])
    moved = per_pass(profile)
    contexts = run["context_lens"]
    print(f"validation {run['validation_id']} ({run['mode']}, {run['prompt_count']} prompts), ms per token")
    auto = next(p["predicted_ms_per_token"] for p in run["plans"] if len(p["chain"]) == 1)  # the same run's baseline
    print(
        "\n| plan | projection ms, profiled / measured | projections a round | predicted speed-up, per proposal "
        "| per pass | measured (90 % interval) | error per proposal / per pass |"
    )
    print("|---|---|---|---|---|---|---|")
    for plan in run["plans"]:
        chain, widths = plan["chain"], widths_from_json(plan["widths"])
        once = predict_over(profile, chain, widths, run["acceptance"], contexts, args.max_new_tokens).ms_per_token
        assert abs(once - plan["predicted_ms_per_token"]) < 1e-6 * once, "not the validation's own prediction"
        every = predict_over(moved, chain, widths, run["acceptance"], contexts, args.max_new_tokens).ms_per_token
        measured, (lo, hi) = plan["measured_speedup"], plan["measured_speedup_interval"]
        p = max((profile.proposal(name, contexts) for name in chain[:-1]), default=0.0)
        steers, steer_s = sum(lv.get("steers", 0) for lv in plan["levels"]), sum(lv.get("steer_s", 0.0) for lv in plan["levels"])
        rounds = plan["levels"][-1]["forward_passes"]  # the target's passes after the prefill: its rounds
        ran = f"{p:.2f} / {1000 * steer_s / steers:.2f}" if steers else "-"
        label = format_chain([name.rsplit("/", 1)[-1] for name in chain], widths)  # a steering directory by its last part
        print(
            f"| {label} | {ran} | {steers / rounds:.2f} | {auto / once:.3f}x | {auto / every:.3f}x | {measured:.3f}x ({lo:.2f}-{hi:.2f}) | "
            f"{100 * (auto / once - measured) / measured:+.1f} % / {100 * (auto / every - measured) / measured:+.1f} % |"
        )


if __name__ == "__main__":
    main()
