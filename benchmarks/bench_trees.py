"""Draft trees against chains at an equal target budget: tokens committed per target pass.

RSD's comparison (Jeon et al. 2024): a target pass that verifies N drafted nodes costs about the
same whether they form a chain of N tokens or a tree of N nodes, so at equal N the better draft is
the one that commits more tokens per target pass. For every prompt, every configuration runs back
to back (greedy and sampling at T = 1, the same seeds), and the table gives per workload the mean
committed tokens per target round and the median ms per token (times are only comparable within
one run of this script).

    python -m benchmarks.bench_trees --spec-bench question.jsonl --family smollm2 --per-category 2 --new-tokens 48
    python -m benchmarks.bench_trees --spec-bench question.jsonl --family qwen --per-category 1 --humaneval 2 --new-tokens 48

``--mask-cost`` instead times the verifier's pass of n tokens as a chain (causal) and as a tree of n
nodes (4-D mask, per-node positions), interleaved, to check that the mask adds no cost.

    python -m benchmarks.bench_trees --family qwen --mask-cost [--dtype fp32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from benchmarks.common import machine, spec_bench_option, spec_bench_prompts
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_runtime import (
    Hierarchy,
    LevelStats,
    ModelLoader,
    SamplingConfig,
    TreeShape,
    check_same_tokenizer,
    cpu_capability,
    head_rows,
    parse_spec,
    parse_width,
)
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.terms.tree import DraftTree

FAMILIES = {
    "smollm2": ("smollm2-135m:layers=8", "smollm2-135m", "fp32"),
    "qwen": ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "bf16"),
}
# budget N -> the draft shapes with exactly N nodes that are compared (the chain first)
BUDGETS = {6: ["6", "6x", "3x1", "2x2", "2x1x1"], 12: ["12", "6x1", "4x2", "3x3", "2x1x1x1x1x1"]}
MODES = {"greedy": SamplingConfig(mode="greedy"), "T=1": SamplingConfig(mode="sample", temperature=1.0)}


def prompts(spec_bench: Path | None, per_category: int, humaneval: int) -> dict[str, list[str]]:
    """Spec-Bench categories (first ``per_category`` each) and held-out HumanEval problems."""
    out = spec_bench_prompts(spec_bench, per_category) if per_category else {}
    if humaneval:
        out["humaneval"] = split(load_prompts("humaneval"), "validate").prompts[:humaneval]
    return out


def mask_cost(model: torch.nn.Module, width: int, repeats: int = 15) -> dict[str, dict[str, float]]:
    """Median ms of a verification pass over n drafted tokens: a chain vs a tree of n nodes."""
    prompt = list(range(100, 356))  # 256 cached tokens of context
    cached = CachedModel(model, width, LevelStats(model="verifier"))
    cached.prefill(prompt)
    out = {}
    for shape in ("2", "2x1", "4x1", "2x2x2", "4x2x1"):  # 2, 4, 8, 14, 20 nodes
        tree_shape = parse_width(shape)
        n = tree_shape.nodes if isinstance(tree_shape, TreeShape) else tree_shape
        chain_ms, tree_ms = [], []
        for r in range(repeats):
            tree = DraftTree()
            parents = [-1]
            for b in tree_shape.branching if isinstance(tree_shape, TreeShape) else (n,):
                parents = [tree.add(1000 + 7 * len(tree) + r, p) for p in parents for _ in range(b)]
            t0 = time.perf_counter()
            cached.logits(prompt + [500 + i + r for i in range(n)], len(prompt) - 1)  # one pass of n new tokens
            t1 = time.perf_counter()
            cached.tree_logits(prompt, tree)  # one pass of the n nodes
            t2 = time.perf_counter()
            chain_ms.append(1000 * (t1 - t0))
            tree_ms.append(1000 * (t2 - t1))
        c, t = statistics.median(chain_ms), statistics.median(tree_ms)
        out[f"{n} tokens"] = {"chain_ms": c, "tree_ms": t, "tree_over_chain": t / c}
        print(f"{n:>3} tokens: chain {c:.1f} ms, tree {t:.1f} ms, ratio {t / c:.3f}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="smollm2")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--humaneval", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--budgets", default="6,12")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/trees"))
    ap.add_argument("--mask-cost", action="store_true", help="time chain vs tree verification passes only")
    ap.add_argument("--dtype", default=None, help="override the family's dtype (fp32, bf16)")
    spec_bench_option(ap, required=False)
    args = ap.parse_args()

    drafter, target, dtype = FAMILIES[args.family]
    dtype = args.dtype or dtype
    loader = ModelLoader(device="cpu", dtype=dtype)
    if args.mask_cost:
        for name in (drafter, target):
            loaded = loader.load(parse_spec(name))
            print(f"{name} ({dtype}, {cpu_capability()}):")
            mask_cost(loaded.model, head_rows(loaded.model))
        return
    shapes = [s for b in args.budgets.split(",") for s in BUDGETS[int(b)]]
    small, big = (loader.load(parse_spec(name)) for name in (drafter, target))
    width = check_same_tokenizer([small, big])
    # every shape runs the same two loaded models; no EOS, so every run decodes exactly --new-tokens
    built = {s: Hierarchy([small.model, big.model], [parse_width(s)], [drafter, target], width) for s in shapes}
    tokenizer = big.tokenizer
    # rows[(mode, workload, shape)] -> [(tokens per target round, ms per token)]
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for workload, texts in prompts(args.spec_bench, args.per_category, args.humaneval).items():
        for i, text in enumerate(texts):
            ids = encode_prompt(tokenizer, text)
            for mode, sampling in MODES.items():
                for shape in shapes:
                    r = built[shape].generate(ids, args.new_tokens, sampling.model_copy(update={"seed": i}))
                    rows[(mode, workload, shape)].append((r.mean_accepted_length, r.ms_per_token))
                print(workload, i, mode, {s: round(rows[(mode, workload, s)][-1][0], 2) for s in shapes}, flush=True)

    table = {
        f"{m}|{w}|{s}": {
            "tokens_per_round": statistics.mean(t for t, _ in v),
            "ms_per_token": statistics.median(ms for _, ms in v),
            "runs": len(v),
        }
        for (m, w, s), v in rows.items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{args.family}.json"
    meta = {"machine": machine(), "cpu_capability": cpu_capability(), "drafter": drafter, "target": target, "dtype": dtype}
    out.write_text(json.dumps({"meta": meta, "args": {k: str(v) for k, v in vars(args).items()}, "table": table}, indent=1))
    print(f"\n{meta}\nwrote {out}")
    for mode in MODES:
        print(f"\n{mode}: tokens per target round (ms/token)")
        print("| workload | " + " | ".join(shapes) + " |")
        print("|---" * (len(shapes) + 1) + "|")
        for workload in sorted({w for (_, w, _) in rows}):
            cells = [table[f"{mode}|{workload}|{s}"] for s in shapes]
            print(f"| {workload} | " + " | ".join(f"{c['tokens_per_round']:.2f} ({c['ms_per_token']:.0f})" for c in cells) + " |")


if __name__ == "__main__":
    main()
