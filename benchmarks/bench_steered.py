"""Steered drafters in decoding: tokens per verifier round, what steering costs, speed-up.

For a verifier and drafters given as ``NAME=SPEC`` (the same drafter with and without
``steer=DIR``), on held-out prompts of each workload (the validation split of each Spec-Bench
category and of MT-bench, never trained on), decoding of ``--new-tokens`` tokens by the verifier
alone and by ``drafter -> verifier`` at width ``--width``, greedy and at T = 1 (seeds 0..``--seeds``
- 1), every chain on every prompt in one run in a new random order per prompt:

tokens/round    tokens committed per verifier round (block efficiency), pooled
accepted        drafted tokens accepted per round (tokens/round - 1)
steer share     the projection's time over the whole decoding time (steered drafters only)
speed-up        the verifier's own decoding time over the chain's, the same prompts (pooled)

    python -m benchmarks.bench_steered --spec-bench question.jsonl --verifier smollm2-135m \\
        --drafter "l4=smollm2-135m:layers=4" --drafter "l4 steered=smollm2-135m:layers=4:steer=benchmarks/out/steer/l4"
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

import torch

from benchmarks.common import SPEC_CATEGORIES, machine, mt_bench_set, spec_bench_file, spec_bench_option, spec_bench_set
from hsd_planner.prompts import encode_prompt, split
from hsd_runtime import Hierarchy, ModelLoader, SamplingConfig, build_hierarchy
from hsd_runtime.models.device import auto_dtype, cpu_capability


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--drafter", action="append", required=True, help="NAME=SPEC, once per drafter.")
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--per-category", type=int, default=3, help="Held-out prompts per workload.")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=2, help="Sampled generations per prompt at T = 1.")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/steered.jsonl"))
    spec_bench_option(ap)
    args = ap.parse_args()
    path = spec_bench_file(args.spec_bench)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    print(f"machine: {machine()}, {cpu_capability()}, dtype {dtype}; verifier {args.verifier}, width {args.width}", flush=True)
    alone, tokenizer = build_hierarchy([args.verifier], [], loader)
    chains: dict[str, Hierarchy] = {"verifier alone": alone}
    for item in args.drafter:
        name, _, spec = item.partition("=")
        chains[name] = build_hierarchy([spec, args.verifier], [args.width], loader)[0]
    workloads = {c: spec_bench_set(path, c) for c in SPEC_CATEGORIES} | {"mt_bench": mt_bench_set(path)}
    modes = {"greedy": [SamplingConfig()]} | {"T=1": [SamplingConfig(mode="sample", temperature=1.0, seed=s) for s in range(args.seeds)]}
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as fh:
        for workload, prompts in workloads.items():
            held = split(prompts, "validate", args.per_category)
            for mode, configs in modes.items():
                sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
                for k, text in enumerate(held.prompts):
                    ids = encode_prompt(tokenizer, text)
                    for sampling in configs:
                        order = list(chains)
                        random.Random(k * 1000 + sampling.seed).shuffle(order)
                        for name in order:
                            r = chains[name].generate(ids, args.new_tokens, sampling)
                            s = sums[name]
                            s["tokens"] += len(r.tokens)
                            s["rounds"] += r.target_rounds
                            s["decode_s"] += r.decode_s
                            s["steer_s"] += r.levels[0].steer_s
                            s["steers"] += r.levels[0].steers
                for name in chains:
                    if name == "verifier alone":
                        continue
                    s = sums[name]
                    row = {
                        "workload": workload,
                        "mode": mode,
                        "drafter": name,
                        "prompts": len(held.prompts),
                        "tokens_per_round": s["tokens"] / max(s["rounds"], 1),
                        "steer_share": s["steer_s"] / max(s["decode_s"], 1e-9),
                        "steer_ms": 1000 * s["steer_s"] / max(s["steers"], 1),
                        "speedup": sums["verifier alone"]["decode_s"] / max(s["decode_s"], 1e-9),
                    }
                    rows.append(row)
                    fh.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    print("\n| workload | decoding | drafter | tokens/round | steer ms | steer share | speed-up over the verifier alone |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['mode']} | {r['drafter']} | {r['tokens_per_round']:.3f} | {r['steer_ms']:.2f} | "
            f"{100 * r['steer_share']:.1f}% | {r['speedup']:.2f}x |"
        )


if __name__ == "__main__":
    main()
