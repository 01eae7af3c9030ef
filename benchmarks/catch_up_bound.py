"""How much the unpriced catch-up passes above level 0 could cost a plan, from its profile.

The latency model prices level 0's catch-up: after a round in which level 1 accepted level 0's
whole batch, level 0's next pass feeds two tokens, c_0(2) instead of c_0(1)
(``hsd_planner.plan.latency.catch_up``). Two more such tokens are not priced:

- a middle level k: after level k + 1 accepted its whole batch of T_k, its next verification pass
  feeds its own last, unfed token besides the usual one: c_k(n + 1) instead of c_k(n), with
  probability q_k = P(A_{k+1} = T_k), once per round of level k + 1;
- level 0 under a middle level, when both acceptances happen in a row: c_0(3) instead of c_0(2),
  with probability at most q_0 q_1 (taken as independent), once per round of level 2.

This script prices both as if each always happened at its probability (an upper bound: a middle
level's batch cut at T_k sometimes ends on a token it had fed) and reports them against the
plan's predicted ms per token, for each plan with a middle level that ``solve`` ranks. With
``--measure N`` it also runs the first ``--plans`` of them on N held-out prompts of the workload
and counts what the middle level fed: its tokens fed less one a pass less the drafts it verified
are the catch-up tokens, priced at c(n + 1) - c(n) against the run's measured time.

    python -m benchmarks.catch_up_bound sqlite:///demo.db --max-new-tokens 128 --top 12 --measure 3
"""

from __future__ import annotations

import argparse
import json

from hsd_planner.choices import AcceptanceModel
from hsd_planner.cli.loader import make_loader, resolve_dtype_choice
from hsd_planner.generate import generate_text
from hsd_planner.plan import SOLVE_DEFAULTS, predict, solve
from hsd_planner.plan.config import DEFAULT_CONTEXT
from hsd_planner.plan.planner import rounds_per_round
from hsd_planner.plan.profile import Profile
from hsd_planner.plan.rounds import RoundLaw
from hsd_planner.prompts import load_prompts, split
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile
from hsd_runtime import ModelLoader, SamplingConfig


def bound(profile: Profile, chain: tuple[str, ...], widths: tuple[int, ...], acceptance: AcceptanceModel, context: int, new: int) -> dict:
    """The unpriced catch-up of one chain with a middle level: ms per token, and its share of the prediction."""
    pred = predict(profile, chain, widths, acceptance, context, new)
    pairs = profile.pairs(acceptance)
    # laws[k]: one round of level k + 1 over level k's batch of widths[k]
    laws = [RoundLaw.chain(pairs[(chain[k], chain[k + 1])], widths[k]) for k in range(len(widths))]
    m = rounds_per_round(profile, chain, widths, acceptance)  # m[j] = m(T_j): rounds of level j per round of level j + 1
    top = len(chain) - 1

    def per_target(j: int) -> float:
        """Rounds of level j per round of the target: the product of m(T_i) for i = j .. K - 1."""
        out = 1.0
        for i in range(j, top):
            out *= m[i] or 1.0
        return out

    ms_round, terms = 0.0, []
    for k in range(1, top):  # the middle levels
        cost = profile.cost(chain[k], context)
        q = laws[k].accepted[-1]  # level k + 1 accepts level k's whole batch of T_k
        n = widths[k - 1] + 1  # the pass that verifies level k - 1's batch (a lookup's full proposal: an upper bound)
        ms_round += q * _step(profile, chain[k], widths[k - 1], context) * per_target(k + 1)
        terms.append({"level": k, "model": chain[k], "q": round(q, 3), "c(n)": round(cost(n), 2), "c(n+1)": round(cost(n + 1), 2)})
        if k == 1 and not profile.model(chain[0]).lookup:  # level 0's third token after both whole acceptances
            c0, q0 = profile.cost(chain[0], context), laws[0].accepted[-1]
            ms_round += q0 * q * (c0(3) - c0(2)) * per_target(2)
    ms_token = ms_round / pred.mean_accepted_length  # tokens a target round at this length: N / m(N)
    return {
        "chain": list(chain),
        "widths": list(widths),
        "predicted_ms_per_token": round(pred.ms_per_token, 3),
        "unpriced_ms_per_token": round(ms_token, 3),
        "share": round(ms_token / pred.ms_per_token, 4),
        "levels": terms,
    }


def _step(profile: Profile, name: str, below: int, context: int) -> float:
    """What one more token costs the pass of ``name`` that verifies a batch of ``below``: c(n + 1) - c(n), n = below + 1."""
    cost = profile.cost(name, context)
    return cost(below + 2) - cost(below + 1)


def measure(
    profile: Profile, chain: tuple[str, ...], widths: tuple[int, ...], held: list[str], loader: ModelLoader, new: int, context: int
) -> dict:
    """Run the chain on the held-out prompts ``held``: the middle levels' catch-up tokens per
    target round, and their cost (priced by the profile's curves) as a share of the measured
    decode time."""
    extra = {k: 0 for k in range(1, len(chain) - 1)}
    rounds = decode_ms = extra_ms = 0.0
    for text in held:
        report = generate_text(",".join(chain), list(widths), text, new, SamplingConfig(mode="greedy"), loader)
        result = report.result
        rounds += result.target_rounds
        decode_ms += 1000 * result.decode_s
        for k in extra:
            level, below = result.levels[k], result.levels[k - 1]
            # each pass feeds the one token the level above committed and the drafts from below; the rest is catch-up
            tokens = level.tokens_fed - level.forward_passes - below.proposed
            extra[k] += tokens
            extra_ms += tokens * _step(profile, chain[k], widths[k - 1], context)
    return {
        "prompts": len(held),
        "target_rounds": rounds,
        "catch_up_tokens_per_target_round": {chain[k]: round(v / rounds, 3) for k, v in extra.items()},
        "catch_up_share_of_decode": round(extra_ms / decode_ms, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--workload", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--context", type=int, default=None, help="context length the curves are read at [default: the solver's]")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--t-max", type=int, default=SOLVE_DEFAULTS.t_max)
    ap.add_argument("--measure", type=int, default=0, help="run the first --plans of them on this many held-out prompts")
    ap.add_argument("--plans", type=int, default=2)
    args = ap.parse_args()
    db = open_db(args.db, create=False)
    profile, source = load_profile(db, workload=args.workload, length=args.max_new_tokens)
    config = SOLVE_DEFAULTS.model_copy(
        update={"top_k": args.top, "max_new_tokens": args.max_new_tokens, "t_max": args.t_max, "trees": False}
    )
    solution = solve(profile, config, args.context)
    context = args.context or DEFAULT_CONTEXT
    out = [
        bound(profile, p.chain, p.widths, config.acceptance, context, args.max_new_tokens)
        for p in solution.top
        if len(p.chain) > 2 and all(isinstance(w, int) for w in p.widths)  # a tree is level 0's only
    ]
    if args.measure:
        workload = (args.workload or source.workload).split(":")[0]  # the set the profile's split was taken from
        held = split(load_prompts(workload), "validate", args.measure).prompts
        loader = make_loader(
            "cpu", resolve_dtype_choice("auto", "cpu"), engine="torch", advise=False
        )  # one for every plan: each model loads once
        for row in out[: args.plans]:
            row["measured"] = measure(profile, tuple(row["chain"]), tuple(row["widths"]), held, loader, args.max_new_tokens, context)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
