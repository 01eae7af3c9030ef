"""The executor at b = 1 and b = 4 against a baseline commit of the project: same models, prompts and
machine, runs alternating between the two code trees.

Each run is a fresh process on one tree (this checkout, or ``--baseline``'s, checked out under a
temporary folder) that decodes ``--prompts`` Spec-Bench-style prompts greedily with each chain, one
prompt at a time (b = 1) and all of them in lockstep (b = 4), and prints ms per token (decode time
over each sequence's new tokens, the median over prompts at b = 1). ``--runs`` runs per tree,
alternating; the summary is the median of each figure per tree and their ratio (this tree over the
baseline; below 1 is faster). The tokens of both trees are compared too.

    python -m benchmarks.bench_rows --baseline f175e04 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHAINS = {
    "autoregressive": (["smollm2-135m"], []),
    "ngram>135M:layers=8>135M": (["ngram", "smollm2-135m:layers=8", "smollm2-135m"], [3, 2]),
    "135M:layers=4>135M": (["smollm2-135m:layers=4", "smollm2-135m"], [4]),
}
TEXTS = [
    "Write a short poem about the sea.",
    "Explain why the sky is blue in two sentences.",
    "List three uses of a paper clip, then repeat the list.",
    "What is 17 times 23? Show the steps.",
]


def worker(new_tokens: int) -> None:
    """One run on the tree this process imports: JSON of ms/token per chain and batch size, and tokens."""
    import torch

    from hsd_planner.prompts import encode_prompt
    from hsd_runtime import Hierarchy, ModelLoader, build_hierarchy

    torch.manual_seed(0)
    loader = ModelLoader(device="cpu", dtype="fp32")
    out: dict[str, object] = {}
    for name, (chain, widths) in CHAINS.items():
        hierarchy, tokenizer = build_hierarchy(chain, widths, loader)
        if hasattr(Hierarchy, "generate_batch"):
            batch = lambda ids: hierarchy.generate_batch(ids, new_tokens, stop_at_eos=False)  # noqa: E731
        else:  # a tree with a batched runtime of its own
            batched, _ = build_hierarchy(chain, widths, loader, batched=True)
            batch = lambda ids: batched.generate(ids, new_tokens, stop_at_eos=False)  # noqa: E731
        hierarchy.eos_token_ids = frozenset()
        ids = [encode_prompt(tokenizer, t) for t in TEXTS]
        hierarchy.generate(ids[0], 4)  # warm-up
        ones = [hierarchy.generate(i, new_tokens) for i in ids]
        many = batch(ids)
        out[name] = {
            "b1": statistics.median(r.ms_per_token for r in ones),
            "b4": many.ms_per_token,
            "tokens": [r.tokens for r in ones],
            "tokens_b4": many.sequences,
        }
    print(json.dumps(out))


def run_on(tree: Path, new_tokens: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    script = Path(__file__).resolve()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import runpy, sys; sys.argv = ['w', '--worker', '--new-tokens', '{new_tokens}']; runpy.run_path('{script}', run_name='__main__')",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="a commit to compare with")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.new_tokens)
        return
    from benchmarks.common import machine
    from hsd_runtime import cpu_capability

    here = Path(__file__).resolve().parents[1]
    print(f"{machine()}; CPU capability {cpu_capability()}; fp32; {args.new_tokens} new tokens", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "-q", "--detach", str(base), args.baseline], check=True)
        try:
            trees = {"this": here, "baseline": base}
            got: dict[str, list[dict]] = {k: [] for k in trees}
            for r in range(args.runs):
                for key in ["this", "baseline"] if r % 2 == 0 else ["baseline", "this"]:
                    got[key].append(run_on(trees[key], args.new_tokens))
                    print(f"run {r} {key}: " + ", ".join(f"{c} {v['b1']:.1f}/{v['b4']:.1f}" for c, v in got[key][-1].items()), flush=True)
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(base)], check=False)
    print("\n| chain | b | this ms/token | baseline ms/token | ratio | same tokens |\n|---|---|---|---|---|---|")
    for chain in CHAINS:
        for b, key in ((1, "b1"), (4, "b4")):
            mine = statistics.median(x[chain][key] for x in got["this"])
            theirs = statistics.median(x[chain][key] for x in got["baseline"])
            tokens = "tokens" if b == 1 else "tokens_b4"
            same = all(x[chain][tokens] == y[chain][tokens] for x in got["this"] for y in got["baseline"])
            print(f"| {chain} | {b} | {mine:.2f} | {theirs:.2f} | {mine / theirs:.3f} | {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
