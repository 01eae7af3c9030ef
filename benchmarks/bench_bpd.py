"""Block-draft heads: block efficiency of argmax, rescored and p-best drafts, and what a draft costs.

For a host and a heads directory (``hsd-plan heads train``), on held-out prompts of each workload
(the validation split of each Spec-Bench category and of MT-bench, never trained on), greedy
decoding of ``--new-tokens`` tokens by the host alone and by ``bpd:DIR[:options] -> host`` at width
H - 1, every variant on every prompt in one run (variants in a new random order per prompt):

block efficiency    tokens committed per host pass (committed tokens / host rounds), pooled
vs argmax           its ratio to the argmax drafts' on the same prompts
draft ms            the heads' time per draft (the blocks, the host's output layer over their rows,
                    any rescoring), mean
speed-up            the host's own decoding time over the variant's, the same prompts (pooled)

Every variant's tokens are checked against the host's own greedy tokens (bf16 near-ties aside).

    python -m benchmarks.bench_bpd --spec-bench question.jsonl --heads benchmarks/out/heads/smollm2-h4
    python -m benchmarks.bench_bpd --spec-bench question.jsonl --heads DIR --rescorer benchmarks/out/students/builtin-l4
    python -m benchmarks.bench_bpd --spec-bench question.jsonl --heads DIR --host-corpus benchmarks/out/host-corpus.txt

``--host-corpus PATH`` writes the host's own continuations of the Spec-Bench profiling split (the
data pipeline's cached corpus the heads trained on, decoded to text) to PATH and adds a
``+ corpus`` twin of every ``rescore=ngram`` variant that counts its bigrams (``corpus=PATH``).
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

import torch

from benchmarks.common import SPEC_CATEGORIES, machine, mt_bench_set, spec_bench_file, spec_bench_option, spec_bench_set
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_planner.training.corpus import build_corpus
from hsd_planner.training.heads import HeadsConfig
from hsd_planner.training.runs import corpus_key
from hsd_runtime import Hierarchy, ModelLoader, SamplingConfig, build_hierarchy
from hsd_runtime.learned.heads import read_card
from hsd_runtime.models.device import auto_dtype, cpu_capability

VARIANTS = {  # label -> the bpd: options (top-4 lattice, bigram rescoring of weight alpha; p-best paths as one tree)
    "argmax": "",
    "rescored a=0.5": ":k=4:rescore=ngram:alpha=0.5",
    "rescored a=1": ":k=4:rescore=ngram:alpha=1",
    "rescored a=2": ":k=4:rescore=ngram:alpha=2",
    "2-best rescored": ":k=4:p=2:rescore=ngram:alpha=1",
    "4-best rescored": ":k=4:p=4:rescore=ngram:alpha=1",
}


def write_host_corpus(host: str, spec_bench: Path, out: Path) -> None:
    """Decode the host's cached continuations of the Spec-Bench profiling split (the data pipeline's
    corpus for ``hsd-plan heads train`` / ``distill`` defaults, bf16) into the text file ``out``."""
    config = HeadsConfig(model=host, prompts=str(spec_bench), dtype="bf16")
    model = ModelLoader(device="cpu", dtype="bf16").with_kernels("plain").load(host)
    train = split(load_prompts(spec_bench), "profile")

    def refuse(stage: str, done: int, total: int) -> None:
        if stage.startswith("sampling"):
            raise SystemExit(f"no cached corpus of {host} on {train.name}: run hsd-plan heads train first")

    ids = [encode_prompt(model.tokenizer, p) for p in train.prompts]
    corpus, _ = build_corpus(model, corpus_key(host, model.model, train, config), ids, 16, None, refuse)
    texts = [model.tokenizer.decode(c, skip_special_tokens=True) for c in corpus.continuations]  # type: ignore[attr-defined]
    out.write_text("\n\n".join(texts))
    print(f"host corpus: {len(texts)} continuations, {sum(map(len, corpus.continuations)):,} tokens -> {out}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=Path, required=True, help="A heads directory (hsd-plan heads train --out).")
    ap.add_argument("--per-category", type=int, default=4, help="Held-out prompts per workload.")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="Comma-separated names of VARIANTS.")
    ap.add_argument("--rescorer", default=None, help="Also rescore with this small model of the host's tokenizer (rescore=MODEL).")
    ap.add_argument("--host-corpus", type=Path, default=None, help="Write the host's cached continuations here; add corpus= twins.")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/bpd.jsonl"))
    spec_bench_option(ap)
    args = ap.parse_args()
    path = spec_bench_file(args.spec_bench)
    card = read_card(args.heads)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader(device="cpu", dtype=dtype)
    print(f"machine: {machine()}, {cpu_capability()}, dtype {dtype}; host {card.host}, H = {card.heads}", flush=True)
    names = args.variants.split(",")
    if args.rescorer:
        VARIANTS[f"rescored by {args.rescorer}"] = f":k=4:rescore={args.rescorer}:alpha=1"
        names.append(f"rescored by {args.rescorer}")
    if args.host_corpus:
        write_host_corpus(card.host, path, args.host_corpus)
        for name in list(names):
            if "rescore=ngram" in VARIANTS[name]:
                VARIANTS[f"{name} + corpus"] = f"{VARIANTS[name]}:corpus={args.host_corpus}"
                names.append(f"{name} + corpus")
    alone, tokenizer = build_hierarchy([card.host], [], loader)
    chains: dict[str, Hierarchy] = {"host alone": alone}
    for name in names:
        chains[name] = build_hierarchy([f"bpd:{args.heads}{VARIANTS[name]}", card.host], [card.heads - 1], loader)[0]
    workloads = {c: spec_bench_set(path, c) for c in SPEC_CATEGORIES} | {"mt_bench": mt_bench_set(path)}
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    greedy = SamplingConfig()
    with args.out.open("w") as fh:
        for workload, prompts in workloads.items():
            held = split(prompts, "validate", args.per_category)
            sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for k, text in enumerate(held.prompts):
                ids = encode_prompt(tokenizer, text)
                order = list(chains)
                random.Random(k).shuffle(order)
                results = {name: chains[name].generate(ids, args.new_tokens, greedy) for name in order}
                reference = results["host alone"].tokens
                for name, r in results.items():
                    s = sums[name]
                    s["tokens"] += len(r.tokens)
                    s["rounds"] += r.target_rounds
                    s["decode_s"] += r.decode_s
                    s["identical"] += r.tokens == reference
                    if name != "host alone":
                        s["draft_s"] += r.levels[0].time_s
                        s["drafts"] += r.levels[0].forward_passes
            base = sums["argmax"]["tokens"] / max(sums["argmax"]["rounds"], 1) if "argmax" in sums else float("nan")
            for name in names:
                s = sums[name]
                row = {
                    "workload": workload,
                    "variant": name,
                    "prompts": len(held.prompts),
                    "block_efficiency": s["tokens"] / max(s["rounds"], 1),
                    "draft_ms": 1000 * s["draft_s"] / max(s["drafts"], 1),
                    "speedup": sums["host alone"]["decode_s"] / max(s["decode_s"], 1e-9),
                    "identical": int(s["identical"]),
                }
                row["vs_argmax"] = row["block_efficiency"] / base
                rows.append(row)
                fh.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    print("\n| workload | variant | block efficiency | vs argmax | draft ms | speed-up over the host alone | identical |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['variant']} | {r['block_efficiency']:.3f} | {r['vs_argmax']:.3f}x | {r['draft_ms']:.2f} | "
            f"{r['speedup']:.2f}x | {r['identical']}/{r['prompts']} |"
        )


if __name__ == "__main__":
    main()
