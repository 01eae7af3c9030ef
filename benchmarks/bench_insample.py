"""The demo's prediction with the workload known: profile, solve and validate on the same problems.

``hsd-plan demo`` profiles one set of HumanEval problems and validates on held-out ones, so its
speed-up error mixes two things: how far the held-out problems' acceptance is from the profiled
problems', and how far the latency model (and the machine's state) is from the runs. This
benchmark takes the first away: it profiles the family's candidates on the *held-out* problems
themselves (the same continuations the validation then decodes), solves, and validates the pick,
the best single drafter and autoregressive decoding on those problems, as the demo does. What
error is left is the latency model's and the machine's.

    python -m benchmarks.bench_insample --db insample.db
    python -m benchmarks.bench_insample --engine llamacpp --db insample-llamacpp.db
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks.common import machine
from hsd_planner.cli.loader import make_loader
from hsd_planner.cli.render import format_validation
from hsd_planner.demo import FAMILIES
from hsd_planner.plan import SolveConfig
from hsd_planner.profiling import prepare_profile, run_profile
from hsd_planner.prompts import load_prompts, split
from hsd_planner.solving import solve_and_store
from hsd_planner.store import open_db
from hsd_planner.validation import run_validation, select_plans
from hsd_runtime.models.device import auto_dtype, cpu_capability


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=list(FAMILIES), default="qwen")
    ap.add_argument("--engine", choices=["torch", "llamacpp"], default="torch")
    ap.add_argument("--db", required=True, help="a new SQLite file (what it holds already is reused)")
    args = ap.parse_args()
    family = FAMILIES[args.family].on_engine(args.engine)
    dtype = auto_dtype(torch.device("cpu"))
    print(f"machine: {machine()}; CPU capability {cpu_capability()}; {args.engine}, {dtype}", file=sys.stderr)
    held_out = split(load_prompts(family.prompts), "validate", family.validate_prompts)
    loader = make_loader("cpu", dtype, True, args.engine)
    config = family.profile_config(dtype)
    prepared = prepare_profile(config, held_out, loader)
    db = open_db(args.db)
    run_profile(db, config, held_out, loader, prepared=prepared)  # the held-out problems themselves
    solve_and_store(db, target=config.models[-1], workload=held_out.name, config=SolveConfig())
    solve, plans = select_plans(db, (), "best")
    report = run_validation(db, loader, solve, plans, held_out, family.max_new_tokens, family.repeats)
    print(format_validation(report))


if __name__ == "__main__":
    main()
