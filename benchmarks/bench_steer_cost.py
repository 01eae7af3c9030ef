"""What one steering projection costs, per form of W_g, against the passes of a round.

For each verifier -> drafter pair, the projection of every form (``full``: W_g whole;
``lowrank``: B A of rank ``--rank``; ``simple``: one vector per layer of the drafter's hidden
size) is built at the pair's real shapes with random weights and timed (median of ``--repeats``
calls, in the models' dtype), next to the passes one round of width k makes: the verifier's pass
over k + 1 tokens and k drafter passes of one token (the drafter steered, its vectors set), all
in one run and interleaved (the projection as ``profile`` times it, n = 0 of the steered drafter's
curve). ``share`` = projection / (verifier pass + k drafter passes).

    python -m benchmarks.bench_steer_cost --pair smollm2-135m:benchmarks/out/students/goal-all-l4-tvd \\
        --pair qwen2.5-coder-1.5b:qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

from benchmarks.common import machine
from hsd_planner.profiling.timing import PassTimer
from hsd_runtime import ModelLoader
from hsd_runtime.learned.steering import Steerer, SteeringCard, SteeringProjection, default_taps, steered_model
from hsd_runtime.models.device import auto_dtype, cpu_capability

FORMS = ("full", "lowrank", "simple")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", action="append", required=True, help="VERIFIER:DRAFTER specs (a drafter path may not hold ':').")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--width", type=int, default=4, help="k: drafted tokens per round.")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--context", type=int, default=512)
    args = ap.parse_args()
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    print(f"machine: {machine()}, {cpu_capability()}, dtype {dtype}", flush=True)
    print("\n| verifier -> drafter | form | W_g weights | projection ms | verifier pass ms | drafter pass ms | share of a round |")
    print("|---|---|---|---|---|---|---|")
    for pair in args.pair:
        verifier_spec, _, drafter_spec = pair.partition(":")
        verifier, drafter = loader.load(verifier_spec), loader.load(drafter_spec)
        vcfg, dcfg = verifier.model.config, drafter.model.config
        taps = default_taps(int(vcfg.num_hidden_layers))
        timers = {"verifier": (PassTimer(verifier.model, args.context), args.width + 1)}
        weights = {}
        for form in FORMS:
            width = int(dcfg.hidden_size if form == "simple" else dcfg.intermediate_size)
            card = SteeringCard(
                drafter=drafter_spec,
                verifier=verifier_spec,
                taps=taps,
                verifier_hidden=int(vcfg.hidden_size),
                drafter_layers=int(dcfg.num_hidden_layers),
                width=width,
                form=form,
                rank=args.rank if form == "lowrank" else 0,
            )
            projection = SteeringProjection(card)
            with torch.no_grad():
                projection.up.weight.normal_(0, 0.01)  # nonzero, so the drafter adds real vectors
            steerer = Steerer(projection.to(dtype=verifier.model.dtype).eval().requires_grad_(False), card)
            weights[form] = sum(w.numel() for m in (projection.up, projection.down) if m is not None for w in m.parameters())
            timer = PassTimer(steered_model(drafter.model, steerer), args.context)
            timers[form], timers[f"{form} projection"] = (timer, 1), (timer, 0)  # n = 0: the projection alone
        samples: dict[str, list[float]] = {name: [] for name in timers}
        for r in range(args.repeats):
            order = list(timers)
            random.Random(r).shuffle(order)
            for name in order:
                timer, n = timers[name]
                samples[name].append(timer(n))
        ms = {name: statistics.median(s) for name, s in samples.items()}
        for form in FORMS:
            round_ms = ms["verifier"] + args.width * ms[form]
            print(
                f"| {verifier_spec} -> {drafter_spec} | {form} | {weights[form] / 1e6:.1f}M | {ms[f'{form} projection']:.3f} | "
                f"{ms['verifier']:.2f} | {ms[form]:.2f} | {100 * ms[f'{form} projection'] / round_ms:.1f}% |",
                flush=True,
            )
        del verifier, drafter, timers


if __name__ == "__main__":
    main()
