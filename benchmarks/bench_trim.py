"""Trimmed drafter heads: a drafter's pass cost and its acceptance by the target at N kept tokens.

For each drafter (default: the Qwen2.5-Coder 0.5B and its first 6 layers, target the 1.5B) and each
N (8k, 16k, 32k and the full 151,936), two rankings: by token id (``vocab=N``) and counted on the
workload's profiling split (``hsd-plan vocab``, then ``vocab=FILE``). In one run:

cost        one cached pass of one new token after ``--context`` tokens, every variant sampled once
            per round in a new random order (drift spreads over all), median over ``--rounds``;
            ratios to the same drafter's full head.
acceptance  on held-out prompts (the validation split, never counted), the target's greedy
            continuation of ``--new-tokens`` tokens, one teacher-forced pass of the target and of
            each drafter over it: greedy (argmax agreement) and T = 1 (mean sum_x min(p, q)).

    python -m benchmarks.bench_trim --out benchmarks/out/trim
    python -m benchmarks.bench_trim --prompts humaneval --drafters qwen2.5-coder-0.5b --rounds 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.common import machine
from hsd_planner.profiling.acceptance import acceptance_from_logits, teacher_forced_logits
from hsd_planner.profiling.timing import PassTimer, sweep_order
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_runtime import Hierarchy, ModelLoader, SamplingConfig
from hsd_runtime.models.device import auto_dtype, cpu_capability

SIZES = (8192, 16384, 32768)


def variants(drafter: str, counted: dict[int, Path]) -> dict[str, str]:
    """Label -> spec: the full head, then per N the id ranking and the counted one."""
    out = {f"{drafter} full": drafter}
    for n in SIZES:
        out[f"{drafter} {n // 1024}k by id"] = f"{drafter}:vocab={n}"
        out[f"{drafter} {n // 1024}k counted"] = f"{drafter}:vocab={counted[n]}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--drafters", default="qwen2.5-coder-0.5b,qwen2.5-coder-0.5b:layers=6")
    ap.add_argument(
        "--prompts", default="humaneval", help="A prompt file or humaneval (what --prompts takes; 'builtin': the built-in set)."
    )
    ap.add_argument("--held-out", type=int, default=16, help="Held-out prompts for acceptance.")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/trim"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader("cpu", dtype)
    drafters = args.drafters.split(",")
    table: dict[str, dict[str, float | str]] = {}
    specs: dict[str, str] = {}
    for drafter in drafters:
        counted = {}
        for n in SIZES:  # the counted rankings, written by the CLI as a user would
            path = args.out / f"{Path(drafter.split(':')[0]).name}-{n}.json"
            source = [] if args.prompts == "builtin" else ["--prompts", args.prompts]
            cmd = ["hsd-plan", "vocab", "--model", drafter.split(":")[0], *source, "--size", str(n), "--out", str(path), "--force"]
            subprocess.run(cmd, check=True, stdout=sys.stderr)
            counted[n] = path
        specs |= variants(drafter, counted)
    target = loader.load(args.target)
    models = {label: loader.load(spec) for label, spec in specs.items()}

    # acceptance on held-out prompts along the target's greedy continuation
    held = split(load_prompts(None if args.prompts == "builtin" else args.prompts), "validate", args.held_out)
    alone = Hierarchy([target.model], [], logits_width=target.logits_width, eos_token_ids=())
    greedy, sampled = SamplingConfig(mode="greedy"), SamplingConfig(mode="sample", temperature=1.0)
    acc: dict[str, dict[str, list[torch.Tensor]]] = {label: {"greedy": [], "t1": []} for label in models}
    for text in held.prompts:
        prompt = encode_prompt(target.tokenizer, text)
        cont = alone.generate(prompt, args.new_tokens, greedy).tokens
        p = teacher_forced_logits(target.model, prompt, cont, target.logits_width)
        for label, m in models.items():
            q = teacher_forced_logits(m.model, prompt, cont, target.logits_width)
            acc[label]["greedy"].append(acceptance_from_logits(q, p, greedy))
            acc[label]["t1"].append(acceptance_from_logits(q, p, sampled))
        print(f"acceptance: {len(acc[next(iter(acc))]['greedy'])}/{len(held.prompts)} prompts", file=sys.stderr)

    # cost: one pass of one token, all variants interleaved per round
    timers = {label: PassTimer(m.model, args.context) for label, m in models.items()}
    samples: dict[str, list[float]] = {label: [] for label in models}
    for label in sweep_order(list(models), args.rounds):
        samples[label].append(timers[label](1))
    for label in models:
        drafter = next(d for d in drafters if label.startswith(d + " "))
        full_ms = statistics.median(samples[f"{drafter} full"])
        ms = statistics.median(samples[label])
        table[label] = {
            "spec": specs[label],
            "ms": ms,
            "cost_vs_full": ms / full_ms,
            "greedy": float(torch.cat(acc[label]["greedy"]).mean()),
            "t1": float(torch.cat(acc[label]["t1"]).mean()),
        }
    result = {
        "machine": machine(),
        "cpu": cpu_capability(),
        "dtype": dtype,
        "target": args.target,
        "prompts": args.prompts,
        "held_out": len(held.prompts),
        "new_tokens": args.new_tokens,
        "context": args.context,
        "rounds": args.rounds,
        "rows": table,
    }
    (args.out / "trim.json").write_text(json.dumps(result, indent=1))
    print(f"{result['machine']}; {result['cpu']}; {dtype}; target {args.target}; {args.prompts}, {len(held.prompts)} held-out prompts")
    print("| drafter | head | pass ms (n = 1) | cost / full | greedy acceptance | T = 1 acceptance |")
    print("|---|---|---:|---:|---:|---:|")
    for label, row in table.items():
        name, _, head = label.partition(" ")
        print(f"| {name} | {head} | {row['ms']:.2f} | {row['cost_vs_full']:.2f} | {row['greedy']:.3f} | {row['t1']:.3f} |")


if __name__ == "__main__":
    main()
