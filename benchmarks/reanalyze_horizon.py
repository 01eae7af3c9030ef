"""Stored validations predicted again: the steady state against generations of their own length.

Validation used to predict each plan's steady state (tokens per round E[X_K]); it now predicts a
generation of ``max_new_tokens`` tokens (expected target rounds m(N), the last round cut short;
``hsd_planner.plan.latency.hierarchy_latency``). This script takes validations stored by either
version, keeps every measurement as stored, and recomputes both predictions from the profile the
solve used: a plan's round cost is its stored prediction times its stored tokens per round, and
only the tokens per round change. Reported per validation: median |speed-up error| over the plans
above autoregressive decoding, and predicted against measured tokens per round of each plan.

    python -m benchmarks.reanalyze_horizon benchmarks/out/qwen/qwen.db /tmp/demo1.db
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict

from hsd_planner.plan.rounds import RoundLaw
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile
from hsd_planner.store.validations import stored_validations


def reanalyze(db_url: str) -> list[dict]:
    """One record per stored validation: speed-up errors under both predictions, per plan."""
    db = open_db(db_url, create=False)
    stored = []
    for v in stored_validations(db):
        solve = v.solve
        key = (solve.target, solve.workload.name, solve.setting.mode, solve.setting.temperature, solve.hardware.fingerprint)
        runs = [asdict(r) for r in v.runs]
        stored.append((v.id, v.entry.prompts_name, v.entry.max_new_tokens, key, solve.acceptance_model, runs))
    out = []
    for vid, prompts, n, key, acceptance, runs in stored:
        profile, _ = load_profile(db, *key)
        pairs = profile.pairs(acceptance)
        ar = next(r for r in runs if len(r["chain"]) == 1)
        plans = []
        for r in runs:
            if len(r["chain"]) == 1:
                continue
            pair, b = pairs[(r["chain"][-2], r["chain"][-1])], r["widths"][-1]
            round_cost = r["predicted_ms_per_token"] * r["predicted_mean_accepted_length"]
            law = RoundLaw.chain(pair, b)  # one target round over a chain of b
            steady, finite = law.mean, n / law.rounds(n)[n]
            plans.append(
                dict(
                    plan="->".join(r["chain"]) + f" {r['widths']}",
                    measured_tokens=r["measured_mean_accepted_length"],
                    steady_tokens=steady,
                    finite_tokens=finite,
                    steady_error=ar["predicted_ms_per_token"] / (round_cost / steady) / r["measured_speedup"] - 1,
                    finite_error=ar["predicted_ms_per_token"] / (round_cost / finite) / r["measured_speedup"] - 1,
                )
            )
        out.append(dict(db=db_url, validation=vid, prompts=prompts, max_new_tokens=n, plans=plans))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dbs", nargs="+")
    args = ap.parse_args()
    print(
        "| database | validation | prompts | N | plans | median abs speed-up error: steady | generation of N | tokens per round measured / steady / N |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for db in args.dbs:
        for rec in reanalyze(db):
            plans = rec["plans"]
            if not plans:
                continue
            med = lambda key: statistics.median(abs(p[key]) for p in plans)  # noqa: E731
            tokens = "; ".join(f"{p['measured_tokens']:.2f} / {p['steady_tokens']:.2f} / {p['finite_tokens']:.2f}" for p in plans[:3])
            print(
                f"| {db} | {rec['validation']} | {rec['prompts']} | {rec['max_new_tokens']} | {len(plans)} | "
                f"{med('steady_error'):.1%} | {med('finite_error'):.1%} | {tokens} |"
            )


if __name__ == "__main__":
    main()
