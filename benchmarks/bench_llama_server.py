"""llama-server's own speculative configurations, side by side on one workload.

    python -m benchmarks.bench_llama_server                                   # Qwen 1.5B, HumanEval held out
    python -m benchmarks.bench_llama_server --spec-bench question.jsonl --category qa

The server built by ``scripts/install_llamacpp.sh`` runs the packaged Q4_K_M GGUFs (target
``--target``, draft model ``--drafter``) with ``-t``/``-tb`` = ``--threads`` and one slot, in each
configuration a user of llama-server can choose: no speculation, the n-gram drafters
``ngram-simple`` and ``ngram-mod``, the draft model (``draft-simple``) at its default
``--spec-draft-n-max`` and at each k of ``--n-max``, and the n-gram lookup and the draft model
enabled together at the best of those k. Prompts are the held-out split, wrapped in the target's chat
template as ``hsd-plan generate`` wraps them and sent as token ids; each is decoded greedily for
``--new`` tokens. The figure is llama-server's own: decode ms per generated token
(``timings.predicted_ms / predicted_n``, prefill excluded), median over prompts; ``drafted`` and
``accepted`` are its ``draft_n`` and ``draft_n_accepted`` summed. Repeats go round the
configurations in turn, the order reversed every other round, one server at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.common import machine, spec_bench_option, spec_bench_set
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_planner.validation.llama_server import LlamaServer
from hsd_runtime import cpu_capability
from hsd_runtime.packaged import packaged_gguf


def configurations(drafter: str, n_max: list[int]) -> dict[str, list[str]]:
    """llama-server flags of each configuration, by name."""
    draft = ["--spec-type", "draft-simple", "-md", drafter]
    out = {
        "no speculation": [],
        "ngram-simple": ["--spec-type", "ngram-simple"],
        "ngram-mod": ["--spec-type", "ngram-mod"],
        "draft-simple (default n_max)": draft,
    }
    for k in n_max:
        out[f"draft-simple n_max {k}"] = [*draft, "--spec-draft-n-max", str(k), "--spec-draft-p-min", "0"]
    return out


def run_config(model: Path, args: list[str], prompts: list[list[int]], new: int, threads: int) -> list[dict]:
    """One server with ``args``: a warm-up completion, then every prompt once."""
    with LlamaServer(model, args, threads=threads, ctx=4096) as server:
        server.complete(prompts[0], 8)
        rows = []
        for ids in prompts:
            c = server.complete(ids, new)
            rows.append({"ms_per_token": c.ms_per_token, "n": c.predicted_n, "draft_n": c.draft_n, "accepted": c.draft_n_accepted})
        return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="packaged alias of the target")
    ap.add_argument("--drafter", default="qwen2.5-coder-0.5b", help="packaged alias of the draft model")
    ap.add_argument("--prompts", default="humaneval", help="prompt set (default humaneval), unless --spec-bench")
    spec_bench_option(ap, required=False)
    ap.add_argument("--category", default="qa", help="Spec-Bench category with --spec-bench")
    ap.add_argument("--max-prompts", type=int, default=6)
    ap.add_argument("--new", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-max", default="3,5,8", help="draft-model k to try")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/llama-server.json"))
    args = ap.parse_args()

    from transformers import AutoTokenizer

    target, drafter = packaged_gguf(args.target), packaged_gguf(args.drafter)
    tokenizer = AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)
    prompt_set = spec_bench_set(args.spec_bench, args.category) if args.spec_bench else load_prompts(args.prompts)
    held_out = split(prompt_set, "validate", limit=args.max_prompts)
    prompts = [encode_prompt(tokenizer, text) for text in held_out.prompts]
    n_max = [int(k) for k in args.n_max.split(",")]
    configs = configurations(str(drafter), n_max)
    results: dict[str, list[dict]] = {name: [] for name in configs}
    for r in range(args.repeats):
        for name in configs if r % 2 == 0 else reversed(list(configs)):
            results[name] += run_config(target, configs[name], prompts, args.new, args.threads)
            print(f"round {r + 1}: {name} done", flush=True)
    medians = {name: statistics.median(row["ms_per_token"] for row in rows) for name, rows in results.items()}
    best_k = min(n_max, key=lambda k: medians[f"draft-simple n_max {k}"])
    both = ["--spec-type", "ngram-simple,draft-simple", "-md", str(drafter), "--spec-draft-n-max", str(best_k), "--spec-draft-p-min", "0"]
    name = f"ngram-simple + draft-simple n_max {best_k}"
    results[name] = []
    for _ in range(args.repeats):
        results[name] += run_config(target, both, prompts, args.new, args.threads)
    medians[name] = statistics.median(row["ms_per_token"] for row in results[name])
    base = medians["no speculation"]
    print(f"\n{held_out.name}, {len(prompts)} prompts x {args.repeats}, {args.new} greedy tokens; {machine()}, {cpu_capability()}")
    print(f"{'configuration':44s} {'ms/token':>9s} {'vs none':>8s} {'drafted':>8s} {'accepted':>9s}")
    for name, rows in results.items():
        drafted, accepted = sum(r["draft_n"] for r in rows), sum(r["accepted"] for r in rows)
        print(f"{name:44s} {medians[name]:9.2f} {base / medians[name]:7.2f}x {drafted:8d} {accepted:9d}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "workload": held_out.name,
        "prompts": len(prompts),
        "new": args.new,
        "repeats": args.repeats,
        "threads": args.threads,
        "machine": machine(),
        "cpu_capability": cpu_capability(),
        "configurations": {name: configs.get(name, both) for name in results},
        "median_ms_per_token": medians,
        "runs": results,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
