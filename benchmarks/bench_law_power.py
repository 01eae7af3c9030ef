"""The power of the law harness: how small a deviation from the exact rule it detects.

The residual drawn after a rejection is perturbed with strength eps, (1 - eps) norm(max(0, p - q))
+ eps p (eps = 1 is the wrong rule "replace from p"), on the harness's depth-1 cell (a one-layer
drafter under a two-layer target, width 1, temperature 1; ``tests/test_exactness.py``), and the
same G-test at the same sample size (``tests.law.RUNS`` runs of 4 tokens, threshold
``tests.law.ALPHA``) is repeated on disjoint seed ranges. The table gives, per eps, how often the
harness rejected and the median p-value; the deviation itself is shown as the total variation
between the perturbed first-token law (exact, computed from the models) and the target's.

    python -m benchmarks.bench_law_power [--eps 0.05,0.1,0.2,0.3,0.5,1] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hsd_runtime import warp
from hsd_runtime.decoding import verify
from tests import law
from tests.test_exactness import FAST


@torch.inference_mode()
def first_token_tv(eps: float) -> float:
    """TV between the first token's law under the perturbed residual and the target's (exact).

    With width 1: P(x) = min(p, q)(x) + (1 - alpha) [(1 - eps) r(x) + eps p(x)], r = norm(max(0, p - q)).
    """
    hierarchy, target, cfg = FAST["depth1"].build()
    drafter = hierarchy.levels[0].cached.model  # type: ignore[union-attr]
    ids = torch.tensor([law.PROMPT])
    p = warp(target(input_ids=ids).logits[:, -1], cfg)[0].double()
    q = warp(drafter(input_ids=ids).logits[:, -1], cfg)[0].double()
    alpha = float(torch.minimum(p, q).sum())
    r = (p - q).clamp_min(0.0)
    r = r / r.sum()
    law_eps = torch.minimum(p, q) + (1 - alpha) * ((1 - eps) * r + eps * p)
    return 0.5 * float((law_eps - p).abs().sum())


def power(eps: float, repeats: int) -> dict:
    """Run the depth-1 cell ``repeats`` times with the residual perturbed by ``eps``."""
    right = verify.residual
    pvalues = []
    t0 = time.perf_counter()
    try:
        verify.residual = law.mixed_residual(eps) if eps else right
        for r in range(repeats):
            hierarchy, target, cfg = FAST["depth1"].build()
            pvalues.append(law.law_check(hierarchy, target, cfg, first_seed=r * law.RUNS).pvalue)
    finally:
        verify.residual = right
    return {
        "eps": eps,
        "first_token_tv": first_token_tv(eps),
        "detected": sum(p < law.ALPHA for p in pvalues),
        "repeats": repeats,
        "median_p": statistics.median(pvalues),
        "pvalues": pvalues,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eps", default="0,0.05,0.1,0.2,0.3,0.5,1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    print(f"runs per check {law.RUNS}, L = {law.L}, V = {law.V}, threshold p < {law.ALPHA:g}")
    print("| eps | first-token TV | detected | median p |")
    print("|---|---|---|---|")
    for eps in (float(x) for x in args.eps.split(",")):
        row = power(eps, args.repeats)
        rows.append(row)
        print(f"| {eps:g} | {row['first_token_tv']:.4f} | {row['detected']}/{row['repeats']} | {row['median_p']:.2g} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"runs": law.RUNS, "alpha": law.ALPHA, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
