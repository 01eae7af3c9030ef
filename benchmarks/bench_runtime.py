"""Runtime against Hugging Face transformers: same model, dtype, settings and prompts.

Rows (greedy; every run decodes exactly the same number of new tokens, see NEVER below):
  autoregressive   ours K=0                      vs  model.generate
  prompt lookup    ours ngram:n=N,target (T)     vs  generate(prompt_lookup_num_tokens=T, max_matching_ngram_size=N)
  assisted         ours drafter,target (T)       vs  generate(assistant_model=drafter), the assistant's
                                                     num_assistant_tokens=T, constant schedule, no confidence cut

Each prompt runs both sides back to back (order alternating), ``--repeats`` times; the ratio is
taken per prompt in the same run, and the table reports medians. Times are end to end (prefill +
decode) on both sides, since generate does not report them apart.

Ours runs the kernels of ``--kernels`` (prepacked weights by default, see hsd_runtime.models.packing);
transformers runs its models as it loads them, on a copy loaded with plain kernels.
``--prompts humaneval`` takes the held-out HumanEval problems instead of Spec-Bench categories.

    python -m benchmarks.bench_runtime --spec-bench question.jsonl --per-category 5 --repeats 2
    python -m benchmarks.bench_runtime --target qwen2.5-coder-1.5b --drafter qwen2.5-coder-0.5b --dtype fp32 \
        --prompts humaneval --per-category 4 --new-tokens 64 --lookup-n 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import machine, spec_bench_option, spec_bench_prompts
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_runtime import Hierarchy, ModelLoader, NgramDrafter, cpu_capability, head_rows


def hf_generate(model, ids, new_tokens, **kwargs) -> tuple[float, list[int], float]:
    """Time generate; also count the target's forward passes to get its mean accepted length."""
    passes = []
    hook = model.register_forward_pre_hook(lambda *_: passes.append(1))
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    # Both sides decode exactly new_tokens tokens: ours is built without stop tokens, and generate
    # gets as its EOS a token id the model does not produce here, the last padded row of its head
    # (min_new_tokens would also force HF's assistant to draft up to the remaining minimum in every round).
    never = head_rows(model) - 1
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=new_tokens, eos_token_id=never, **kwargs)
    elapsed = time.perf_counter() - t0
    hook.remove()
    tokens = out[0, len(ids) :].tolist()
    assert len(tokens) == new_tokens, "generate stopped early"
    # the prefill pass yields the first token; every later pass is one verification round
    return elapsed, tokens, (new_tokens - 1) / max(1, len(passes) - 1)


def ours(hierarchy: Hierarchy, ids, new_tokens) -> tuple[float, list[int], float, float]:
    """Time ours; also the share of decode time spent outside forward passes (runtime overhead)."""
    r = hierarchy.generate(ids, new_tokens)
    overhead = 1.0 - sum(level.time_s for level in r.levels) / r.decode_s
    return r.prefill_s + r.decode_s, r.tokens, r.mean_accepted_length, overhead


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-category", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--drafter", default="smollm2-135m:layers=8")
    ap.add_argument("--kernels", choices=["prepacked", "plain"], default="prepacked", help="ours; transformers always runs plain")
    ap.add_argument("--prompts", choices=["spec-bench", "humaneval"], default="spec-bench")
    ap.add_argument("--assist-width", type=int, default=3)
    ap.add_argument("--lookup-width", type=int, default=10)
    ap.add_argument("--lookup-n", type=int, default=3)
    ap.add_argument("--rows", default="autoregressive,prompt lookup,assisted", help="comma-separated rows to run")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/runtime.json"))
    spec_bench_option(ap, required=False)
    args = ap.parse_args()

    loader = ModelLoader(device="cpu", dtype=args.dtype, prepack=args.kernels == "prepacked")
    hf_loader = loader.with_kernels("plain")
    target, hf_target = loader.load(args.target), hf_loader.load(args.target)
    drafter, hf_drafter = loader.load(args.drafter), hf_loader.load(args.drafter)
    g = hf_drafter.model.generation_config
    g.num_assistant_tokens_schedule, g.assistant_confidence_threshold = "constant", 0.0
    g.num_assistant_tokens = args.assist_width  # HF reads T from the assistant
    names = [args.target]
    rows = {
        "autoregressive": (
            Hierarchy([target.model], [], names=names),
            dict(),
        ),
        "prompt lookup": (
            Hierarchy([NgramDrafter(args.lookup_n), target.model], [args.lookup_width], names=["ngram", *names]),
            dict(prompt_lookup_num_tokens=args.lookup_width, max_matching_ngram_size=args.lookup_n),
        ),
        "assisted": (
            Hierarchy([drafter.model, target.model], [args.assist_width], names=[args.drafter, *names]),
            dict(assistant_model=hf_drafter.model),
        ),
    }
    rows = {name: rows[name] for name in args.rows.split(",")}
    if args.prompts == "humaneval":
        categories = {"humaneval": split(load_prompts("humaneval"), "validate").prompts[: args.per_category]}
    else:
        categories = spec_bench_prompts(args.spec_bench, args.per_category)
    warm = encode_prompt(target.tokenizer, "Hello there.")
    for hierarchy, kwargs in rows.values():
        ours(hierarchy, warm, 8)
        hf_generate(hf_target.model, warm, 8, **kwargs)

    results = []
    for row, (hierarchy, kwargs) in rows.items():
        for category, prompts in categories.items():
            if row == "prompt lookup" and category not in ("summarization", "rag", "humaneval"):
                continue
            for i, text in enumerate(prompts):
                ids = encode_prompt(target.tokenizer, text)
                t_ours, t_hf, mal, hf_mal, over = [], [], [], [], []
                same = True
                for rep in range(args.repeats):
                    first_ours = (i + rep) % 2 == 0
                    if not first_ours:
                        t_h, _, m_h = hf_generate(hf_target.model, ids, args.new_tokens, **kwargs)
                        t_hf.append(t_h)
                        hf_mal.append(m_h)
                    t, toks, m, o = ours(hierarchy, ids, args.new_tokens)
                    t_ours.append(t)
                    mal.append(m)
                    over.append(o)
                    if first_ours:
                        t_h, hf_toks, m_h = hf_generate(hf_target.model, ids, args.new_tokens, **kwargs)
                        t_hf.append(t_h)
                        hf_mal.append(m_h)
                        same = same and hf_toks == toks
                rec = dict(
                    row=row,
                    category=category,
                    prompt=i,
                    prompt_tokens=len(ids),
                    ours_tok_s=args.new_tokens / statistics.median(t_ours),
                    hf_tok_s=args.new_tokens / statistics.median(t_hf),
                    ratio=statistics.median([h / o for h, o in zip(t_hf, t_ours)]),
                    mean_accepted_length=statistics.median(mal),
                    hf_mean_accepted_length=statistics.median(hf_mal),
                    ours_overhead_share=statistics.median(over),
                    same_tokens_as_hf=same,
                )
                results.append(rec)
                print(json.dumps(rec), flush=True)

    print(
        f"\nmachine: {machine()}, {cpu_capability()}; {args.target} {args.dtype}, ours {args.kernels} kernels, greedy, {args.new_tokens} new tokens, "
        f"{args.per_category} prompts per category, {args.repeats} repeats\n"
    )
    print(
        "| row | category | prompts | ours tok/s | HF tok/s | ratio ours/HF (median) | mean accepted length ours / HF | ours: decode time outside forward passes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        sel = [r for r in results if r["row"] == row]
        for category in [*dict.fromkeys(r["category"] for r in sel), "all"]:
            part = [r for r in sel if category in ("all", r["category"])]
            med = lambda key: statistics.median(r[key] for r in part)  # noqa: E731
            print(
                f"| {row} | {category} | {len(part)} | {med('ours_tok_s'):.1f} | {med('hf_tok_s'):.1f} | "
                f"{med('ratio'):.3f} | {med('mean_accepted_length'):.2f} / {med('hf_mean_accepted_length'):.2f} | "
                f"{med('ours_overhead_share'):.1%} |"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "args": vars(args) | {"out": str(args.out)}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
