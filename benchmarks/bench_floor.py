"""Pass cost against the machine's floor, with torch's default kernels and with prepacked weights.

For each model and dtype, a plain copy (torch's default CPU linear) and a prepacked copy
(``hsd_runtime.models.packing``) are timed in the same run: every round measures the floor probe
(streaming bandwidth, GEMM throughput) and then one pass of n tokens after ``--context`` cached
tokens for every (variant, n), in a shuffled order, so drift of the machine hits all alike.
Reported: medians over rounds of c(n), c(8)/c(1), and c(1)/floor(1) with the floor of the same round.

``--compile`` instead times ``torch.compile`` with inductor's weight freezing on the first model
in fp32 (compile time per pass shape, and c(1), c(8) after compiling, against plain and prepacked),
the alternative the runtime did not take.

``--plans`` runs fixed hierarchies of the Qwen family end to end on held-out HumanEval problems
with plain and with prepacked kernels (each prompt: every plan of both kernels, interleaved), and
reports each plan's speed-up over autoregressive decoding on the same kernels: what prepacking
changes for speculative decoding, not only for one pass.

    python -m benchmarks.bench_floor --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --dtypes fp32,bf16 --rounds 5
    python -m benchmarks.bench_floor --plans --dtypes bf16 --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import machine
from hsd_planner.profiling.floor import pass_floor_ms, pass_traffic, probe_floor
from hsd_planner.profiling.timing import PassTimer
from hsd_runtime import ModelLoader, cpu_capability


def measure(models: list[str], dtypes: list[str], grid: list[int], context: int, rounds: int, seed: int) -> list[dict]:
    """One record per (model, dtype, variant) with its per-round samples and floors."""
    rng = random.Random(seed)
    records = []
    for dtype in dtypes:
        for name in models:
            variants = {v: ModelLoader("cpu", dtype, prepack=v == "prepacked").load(name).model for v in ("plain", "prepacked")}
            timers = {v: PassTimer(m, context) for v, m in variants.items()}
            traffic = pass_traffic(variants["plain"])
            samples: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in grid}
            floors: dict[int, list[float]] = {n: [] for n in grid}
            probes = []
            for r in range(rounds):
                probe = probe_floor("cpu", [dtype], "prepacked")
                probes.append(probe)
                for n in grid:
                    floors[n].append(pass_floor_ms(traffic, n, context, probe))
                order = list(samples)
                rng.shuffle(order)
                for v, n in order:
                    samples[(v, n)].append(timers[v](n))
                print(f"[{name} {dtype}] round {r + 1}/{rounds}: bandwidth {probe.bandwidth_gbs:.1f} GB/s", flush=True)
            for v in variants:
                records.append(
                    dict(
                        model=name,
                        dtype=dtype,
                        variant=v,
                        context=context,
                        c_ms={n: samples[(v, n)] for n in grid},
                        floor_ms={n: floors[n] for n in grid},
                        bandwidth_gbs=[p.bandwidth_gbs for p in probes],
                        peak_gflops=[p.peak_gflops[dtype] for p in probes],
                        weight_bytes=traffic.weight_bytes,
                    )
                )
            del variants, timers
            gc.collect()
    return records


def compile_frozen(name: str, context: int, rounds: int) -> dict:
    """``torch.compile`` with inductor freezing on ``name`` in fp32: compile time and c(1), c(8)."""
    import torch._inductor.config as inductor

    inductor.freezing = True
    model = ModelLoader("cpu", "fp32", prepack=False).load(name).model
    plain = PassTimer(model, context)
    packed = PassTimer(ModelLoader("cpu", "fp32").load(name).model, context)
    compiled = torch.compile(model, dynamic=True)
    timer = PassTimer(compiled, context)
    out: dict = {"model": name}
    for n in (1, 8):
        t0 = time.perf_counter()
        timer(n)  # the first pass of each shape compiles (its sample is PassTimer's untimed warm-up)
        out[f"compile_s_n{n}"] = time.perf_counter() - t0
    for n in (1, 8):
        out[f"compiled_c{n}_ms"] = statistics.median(timer(n) for _ in range(rounds))
        out[f"plain_c{n}_ms"] = statistics.median(plain(n) for _ in range(rounds))
        out[f"prepacked_c{n}_ms"] = statistics.median(packed(n) for _ in range(rounds))
    return out


PLANS = {
    "autoregressive": ([TARGET := "qwen2.5-coder-1.5b"], []),
    "ngram[8] -> 1.5B": (["ngram", TARGET], [8]),
    "0.5B[4] -> 1.5B": (["qwen2.5-coder-0.5b", TARGET], [4]),
    "0.5B int8[4] -> 1.5B": (["qwen2.5-coder-0.5b:quant=int8", TARGET], [4]),
    "ngram[8] -> 0.5B int8[8] -> 1.5B": (["ngram", "qwen2.5-coder-0.5b:quant=int8", TARGET], [8, 8]),
    "ngram[8] -> 0.5B[8] -> 1.5B": (["ngram", "qwen2.5-coder-0.5b", TARGET], [8, 8]),
}


def plans(dtype: str, prompts: int, new_tokens: int, rounds: int) -> list[dict]:
    """Every plan of PLANS with both kernels on held-out HumanEval problems; ms per token per run."""
    from hsd_planner.prompts import encode_prompt, load_prompts, split
    from hsd_runtime import build_hierarchy

    held = split(load_prompts("humaneval"), "validate").prompts[:prompts]
    built, tokenizer = {}, None
    for kernels in ("plain", "prepacked"):
        loader = ModelLoader("cpu", dtype, prepack=kernels == "prepacked")
        for label, (chain, widths) in PLANS.items():
            built[(kernels, label)], tokenizer = build_hierarchy(chain, widths, loader)
    encoded = [encode_prompt(tokenizer, p) for p in held]
    for h in built.values():
        h.generate(encoded[0], 4)  # warm-up
    runs: dict[tuple[str, str], list[dict]] = {key: [] for key in built}
    for i, ids in enumerate(encoded):
        for r in range(rounds):
            for key, h in built.items():
                g = h.generate(ids, new_tokens)
                runs[key].append(dict(prompt=i, round=r, ms_per_token=g.ms_per_token, tokens_per_round=g.mean_accepted_length))
            print(f"[plans] prompt {i + 1}/{len(encoded)} round {r + 1}/{rounds}", flush=True)
    return [dict(kernels=k, plan=label, runs=v) for (k, label), v in runs.items()]


def plans_table(records: list[dict], dtype: str) -> None:
    """Speed-up of each plan over autoregressive decoding on the same kernels (per-run ratios, medians)."""
    by = {(r["kernels"], r["plan"]): r["runs"] for r in records}
    print(f"\nplans on held-out HumanEval ({dtype}, greedy); speed-up = autoregressive ms/token / plan ms/token, same kernels, same run\n")
    print("| plan | plain ms/token | plain speed-up | prepacked ms/token | prepacked speed-up | tokens per round |")
    print("|---|---|---|---|---|---|")
    for label in PLANS:
        cells = []
        for kernels in ("plain", "prepacked"):
            runs, ar = by[(kernels, label)], by[(kernels, "autoregressive")]
            cells += [
                f"{statistics.median(x['ms_per_token'] for x in runs):.1f}",
                f"{ratio([a['ms_per_token'] for a in ar], [x['ms_per_token'] for x in runs]):.2f}x",
            ]
        tpr = statistics.median(x["tokens_per_round"] for x in by[("prepacked", label)])
        print(f"| {label} | {' | '.join(cells)} | {tpr:.2f} |")


def ratio(xs: list[float], ys: list[float]) -> float:
    """Median of per-round ratios x/y (same round: the machine's state cancels)."""
    return statistics.median(x / y for x, y in zip(xs, ys))


def table(records: list[dict], grid: list[int]) -> None:
    print(f"\nmachine: {machine()}, {cpu_capability()}\n")
    print("| model | dtype | kernels | " + " | ".join(f"c({n}) ms" for n in grid) + " | c(8)/c(1) | c(1)/floor | floor(1) ms |")
    print("|---|---|---|" + "---|" * (len(grid) + 3))
    for r in records:
        c = r["c_ms"]
        cells = " | ".join(f"{statistics.median(c[n]):.1f}" for n in grid)
        c8 = f"{ratio(c[8], c[1]):.2f}" if 8 in c and 1 in c else "-"
        print(
            f"| {r['model']} | {r['dtype']} | {r['variant']} | {cells} | {c8} | {ratio(c[1], r['floor_ms'][1]):.2f} | "
            f"{statistics.median(r['floor_ms'][1]):.1f} |"
        )
    by = {(r["model"], r["dtype"], r["variant"]): r for r in records}
    print("\n| model | dtype | plain / prepacked c(1) | c(8) |")
    print("|---|---|---|---|")
    for model, dtype, variant in by:
        if variant == "plain":
            p, q = by[(model, dtype, "plain")]["c_ms"], by[(model, dtype, "prepacked")]["c_ms"]
            print(f"| {model} | {dtype} | {ratio(p[1], q[1]):.2f}x | {ratio(p[8], q[8]):.2f}x |")
    bw = [b for r in records if r["variant"] == "plain" for b in r["bandwidth_gbs"]]
    print(f"\nfloor probe over all rounds: bandwidth median {statistics.median(bw):.1f} GB/s, range {min(bw):.1f}-{max(bw):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--grid", default="1,2,4,8,16")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="instead: torch.compile with freezing (first model, fp32)")
    ap.add_argument("--plans", action="store_true", help="instead: Qwen plans end to end, plain against prepacked kernels")
    ap.add_argument("--prompts", type=int, default=4, help="--plans: held-out HumanEval problems")
    ap.add_argument("--new-tokens", type=int, default=64, help="--plans: tokens per generation")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/floor.json"))
    args = ap.parse_args()
    grid = [int(x) for x in args.grid.split(",")]
    if args.plans:
        dtype = args.dtypes.split(",")[0]
        found = plans(dtype, args.prompts, args.new_tokens, args.rounds)
        plans_table(found, dtype)
        print(f"\nmachine: {machine()}, {cpu_capability()}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_name(f"plans-{dtype}.json").write_text(
            json.dumps({"machine": machine(), "args": vars(args) | {"out": str(args.out)}, "records": found}, indent=1)
        )
        return
    result: dict = {"machine": machine(), "capability": cpu_capability(), "args": vars(args) | {"out": str(args.out)}}
    if args.compile:
        result["compile"] = compile_frozen(args.models.split(",")[0], args.context, args.rounds)
        print(f"\ntorch.compile with freezing: {json.dumps(result['compile'])}")
        args.out = args.out.with_name("compile.json")
    else:
        result["records"] = measure(args.models.split(","), args.dtypes.split(","), grid, args.context, args.rounds, args.seed)
        table(result["records"], grid)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
