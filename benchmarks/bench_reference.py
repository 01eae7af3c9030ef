"""Do reference passes follow the decoding around them? (the calibration of ``hsd-plan validate``)

Per iteration, on one held-out HumanEval problem: the target's reference pass of 1 token three
times and of 8 tokens three times (a :class:`PassTimer` at ``--context`` tokens, as validation
times them), then ``--tokens`` tokens of autoregressive decoding, then the 1-token pass three times
again. Every other iteration also runs an int8 0.5B-drafted plan first, as validation interleaves
plans. Prints each iteration; the summary is the ratio of decoding ms/token to the reference
c(1) before and after, per iteration.

    python -m benchmarks.bench_reference --iterations 16
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.common import machine
from hsd_planner.profiling.timing import PassTimer
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_runtime import ModelLoader, parse_width
from hsd_runtime.build import build_hierarchy
from hsd_runtime.models.device import auto_dtype, cpu_capability

TARGET = "qwen2.5-coder-1.5b"
DRAFTER = "qwen2.5-coder-0.5b:quant=int8"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--context", type=int, default=160)
    args = ap.parse_args()
    dtype = auto_dtype(torch.device("cpu"))
    print(f"{machine()}; CPU capability {cpu_capability()}; dtype {dtype}", flush=True)
    loader = ModelLoader(device="cpu", dtype=dtype)
    auto, _ = build_hierarchy([TARGET], [], loader)
    drafted, _ = build_hierarchy([DRAFTER, TARGET], [parse_width("3x")], loader)
    tokenizer = loader.load(TARGET).tokenizer
    problems = split(load_prompts("humaneval"), "validate").prompts
    timer = PassTimer(loader.load(TARGET).model, args.context)
    auto.generate(encode_prompt(tokenizer, problems[0]), 4)  # warm-up
    ratios: list[tuple[float, float]] = []
    for i in range(args.iterations):
        ids = encode_prompt(tokenizer, problems[i % len(problems)])
        if i % 2:
            drafted.generate(ids, args.tokens)
        before = [timer(1) for _ in range(3)]
        eight = [timer(8) for _ in range(3)]
        run = auto.generate(ids, args.tokens)
        after = [timer(1) for _ in range(3)]
        ratios.append((run.ms_per_token / statistics.median(before), run.ms_per_token / statistics.median(after)))
        print(
            f"{i:2d} context {len(ids)}: decoding {run.ms_per_token:.1f} ms/token; c(1) before {_ms(before)}, c(8) {_ms(eight)}, "
            f"c(1) after {_ms(after)}",
            flush=True,
        )
    between = [statistics.median([b, a]) for b, a in ratios]
    print(
        f"decoding / reference c(1): median {statistics.median(between):.3f}, "
        f"within 5% in {sum(abs(r - 1) <= 0.05 for r in between)} of {len(between)} iterations; "
        f"before and after differ by more than 20% in {sum(abs(b / a - 1) > 0.2 for b, a in ratios)}"
    )


def _ms(samples: list[float]) -> str:
    return "/".join(f"{x:.0f}" for x in samples)


if __name__ == "__main__":
    main()
