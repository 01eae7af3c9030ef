"""A trained drafter's acceptance on the prompts it trained on, on the profiling prompts its
trainer left to ``profile`` (``--reserve``), and on held-out validation prompts.

The trainers record the digests of their training prompts in ``DIR/trained_prompts.json``; this
splits the profiling split of the same prompt set by that record, takes the first ``--unseen``
prompts it never trained on (the reserve: what ``profile --max-prompts 16`` reads), the first
``--seen`` it trained on, and the first ``--held-out`` of the validation split, and measures the
drafter's acceptance by the target on each group as ``hsd-plan profile`` does (the target's own
continuation of each prompt, greedy argmax agreement and 1 - TV at T = 1).

    python -m benchmarks.bench_reserve --target smollm2-135m --drafter benchmarks/out/students/reserve-l4:vocab=8192 \\
        --prompts question.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import machine
from hsd_planner.prompts import encode_prompt, load_prompts, prompt_digest, split, trained_digests
from hsd_planner.training.student import HeldOut
from hsd_runtime import ModelLoader, parse_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", required=True, help="a trained drafter's spec (a student directory, with options)")
    ap.add_argument("--prompts", required=True, help="the prompt set it was trained on")
    ap.add_argument("--category", default=None)
    ap.add_argument("--unseen", type=int, default=16)
    ap.add_argument("--seen", type=int, default=32)
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()

    digests = trained_digests(Path(parse_spec(args.drafter).name))
    if not digests:
        raise SystemExit(f"{args.drafter}: no trained_prompts.json record in its directory")
    every = load_prompts(args.prompts, args.category)
    profiled = split(every, "profile").prompts
    groups = {
        "profiling prompts left to profile (never trained on)": [p for p in profiled if prompt_digest(p) not in digests][: args.unseen],
        "profiling prompts trained on": [p for p in profiled if prompt_digest(p) in digests][: args.seen],
        "held-out validation prompts": list(split(every, "validate").prompts[: args.held_out]),
    }
    loader = ModelLoader()
    target, drafter = loader.load(args.target), loader.load(args.drafter).model
    print(f"{machine()}; {args.drafter} by {args.target}, {args.max_new_tokens} tokens a prompt")
    print("| prompts | n | greedy | T = 1 |\n|---|---|---|---|")
    results = {}
    for name, texts in groups.items():
        t0 = time.perf_counter()
        held = HeldOut.make(target, [encode_prompt(target.tokenizer, t) for t in texts], args.max_new_tokens, 1.0)
        greedy, sampled = held.acceptance(drafter)
        results[name] = {"prompts": len(texts), "greedy": greedy, "sampled": sampled, "seconds": time.perf_counter() - t0}
        print(f"| {name} | {len(texts)} | {greedy:.3f} | {sampled:.3f} |", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": machine(), "drafter": args.drafter, "target": args.target, "groups": results}, indent=1))


if __name__ == "__main__":
    main()
