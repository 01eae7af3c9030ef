"""Does a decoding round's target pass cost what the profile's pass of that size costs?

Per iteration: the target's pass of every n in ``--grid`` once (a :class:`PassTimer` at
``--context`` cached tokens, in a seeded random order, as profiling times them), then the demo's
usual pick, ``ngram[8] -> target``, decodes ``--tokens`` tokens of a held-out HumanEval problem.
The runtime's own counters give that run's mean ms per target pass and tokens fed per pass (about
9: eight drafted and one new). Prints the medians of c(n), each run's passes against the c(n)
nearest its tokens per pass in the same iteration, and how much of the process's memory sits in
transparent huge pages (``THP_MEM_ALLOC_ENABLE=1`` makes torch's allocator ask for them).

    python -m benchmarks.bench_passes --iterations 8
    THP_MEM_ALLOC_ENABLE=1 python -m benchmarks.bench_passes --iterations 8
"""

from __future__ import annotations

import argparse
import os
import random
import statistics

import torch

from benchmarks.common import machine
from hsd_planner.profiling.timing import PassTimer
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_runtime import ModelLoader, parse_width
from hsd_runtime.build import build_hierarchy
from hsd_runtime.models.device import auto_dtype, cpu_capability

TARGET = "qwen2.5-coder-1.5b"


def _huge_pages_kb() -> int:
    """kB of this process's anonymous memory in transparent huge pages (0 where not reported)."""
    try:
        with open("/proc/self/smaps_rollup") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("AnonHugePages")), 0)
    except OSError:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--context", type=int, default=160)
    ap.add_argument("--grid", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 6, 7, 8, 9, 10, 12, 16, 17, 24, 32])
    args = ap.parse_args()
    dtype = auto_dtype(torch.device("cpu"))
    print(
        f"{machine()}; CPU capability {cpu_capability()}; dtype {dtype}; THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', '0')}"
    )
    loader = ModelLoader(device="cpu", dtype=dtype)
    target = loader.load(TARGET)
    timer = PassTimer(target.model, args.context)
    pick, _ = build_hierarchy(["ngram", TARGET], [parse_width("8")], loader)
    problems = split(load_prompts("humaneval"), "validate").prompts
    rng = random.Random(0)
    samples: dict[int, list[float]] = {n: [] for n in args.grid}
    ratios = []
    for i in range(args.iterations):
        order = list(args.grid)
        rng.shuffle(order)
        for n in order:
            samples[n].append(timer(n))
        ids = encode_prompt(target.tokenizer, problems[i % 3])
        stats = pick.generate(ids, args.tokens).levels[-1]  # the target's counters
        per_pass = 1000.0 * stats.forward_s / stats.forward_passes
        fed = stats.tokens_fed / stats.forward_passes
        nearest = min(args.grid, key=lambda n: abs(n - fed))
        ratios.append(per_pass / samples[nearest][-1])
        print(
            f"{i:2d} prompt {len(ids)} tokens: {per_pass:.1f} ms per target pass, {fed:.2f} tokens fed per pass; "
            f"c({nearest}) this iteration {samples[nearest][-1]:.1f} ms",
            flush=True,
        )
    for n in args.grid:
        print(f"c({n}) median {statistics.median(samples[n]):.1f} ms  [{' '.join(f'{x:.0f}' for x in samples[n])}]")
    print(
        f"decoding's target pass / c(n) of the same iteration: median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}); anonymous memory in huge pages: {_huge_pages_kb() / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
