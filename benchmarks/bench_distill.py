"""Acceptance of distilled students (``hsd-plan distill``) against the untrained early exits.

Students of smollm2-135m with K = 2, 4, 8 layers are trained with each divergence for the same
number of steps (on-policy data from the Spec-Bench profiling split, bf16 target), then measured
on held-out Spec-Bench prompts (the validation split, 2 per category), greedy and at T = 1,
next to the untrained early exits ``smollm2-135m:layers=K``. Acceptance is measured as
``hsd-plan profile`` does: over the target's own continuation of each prompt (computed once and
shared by every student), greedy argmax agreement and 1 - TV(p, q) at T = 1.

    python -m benchmarks.bench_distill --spec-bench question.jsonl --steps 20                       # the grid
    python -m benchmarks.bench_distill --spec-bench question.jsonl --layers 4 --divergences fkl --minutes 30 --tag goal
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from benchmarks.common import SPEC_CATEGORIES, machine, spec_bench_file, spec_bench_option, spec_bench_set
from hsd_planner.profiling.acceptance import acceptance_from_logits, teacher_forced_logits
from hsd_planner.prompts import encode_prompt, split
from hsd_planner.training import DistillConfig, Distiller
from hsd_runtime import Hierarchy, ModelLoader, SamplingConfig

TARGET = "smollm2-135m"


class HeldOut:
    """The target's continuations of the held-out prompts and its logits over them, computed once."""

    def __init__(self, loader: ModelLoader, spec_bench: Path, per_category: int, new_tokens: int) -> None:
        self.target = loader.load(TARGET)
        self.width = self.target.logits_width
        alone = Hierarchy([self.target.model], [], logits_width=self.width, eos_token_ids=self.target.eos_token_ids)
        self.items = []  # (mode, prompt ids, continuation, target logits [m, V] bf16)
        for category in SPEC_CATEGORIES:
            for k, text in enumerate(split(spec_bench_set(spec_bench, category), "validate").prompts[:per_category]):
                ids = encode_prompt(self.target.tokenizer, text)
                for mode in ("greedy", "sample"):
                    sampling = SamplingConfig(mode=mode, temperature=1.0, seed=k)
                    cont = alone.generate(ids, new_tokens, sampling).tokens
                    p = teacher_forced_logits(self.target.model, ids, cont, self.width).bfloat16()
                    self.items.append((mode, ids, cont, p))

    def acceptance(self, drafter: torch.nn.Module) -> dict[str, float]:
        """Pooled per-position acceptance of ``drafter`` by the target, greedy and at T = 1."""
        sums = {"greedy": [0.0, 0], "sample": [0.0, 0]}
        for mode, ids, cont, p in self.items:
            q = teacher_forced_logits(drafter, ids, cont, self.width)
            a = acceptance_from_logits(q, p.float(), SamplingConfig(mode=mode, temperature=1.0))
            sums[mode][0] += float(a.sum())
            sums[mode][1] += len(a)
        return {mode: s / n for mode, (s, n) in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="2,4,8")
    ap.add_argument("--divergences", default="fkl,rkl,jsd,tvd")
    ap.add_argument("--data", default="on-policy")
    ap.add_argument("--steps", type=int, default=20, help="steps per student (ignored with --minutes)")
    ap.add_argument("--minutes", type=float, default=None, help="train each student for this long instead")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--train-tokens", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-per-category", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=48)
    ap.add_argument("--tag", default="grid")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/students"))
    spec_bench_option(ap)
    args = ap.parse_args()
    spec_bench = spec_bench_file(args.spec_bench)
    loader = ModelLoader(device="cpu", dtype="bf16")
    print(f"machine: {machine()}", flush=True)
    held = HeldOut(loader, spec_bench, args.eval_per_category, args.eval_tokens)
    print(f"held-out: {len(held.items) // 2} prompts x (greedy, T = 1) continuations of {args.eval_tokens} tokens", flush=True)
    rows = []
    for k in [int(x) for x in args.layers.split(",")]:
        exit_ = loader.load(f"{TARGET}:layers={k}").model
        rows.append(
            {
                "student": f"{TARGET}:layers={k} (untrained)",
                "layers": k,
                "divergence": "-",
                "steps": 0,
                "train_s": 0.0,
                **held.acceptance(exit_),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        for div in args.divergences.split(","):
            out = args.out / f"{args.tag}-l{k}-{div}"
            shutil.rmtree(out, ignore_errors=True)
            steps = 10**6 if args.minutes else args.steps
            config = DistillConfig(
                target=TARGET,
                layers=k,
                divergence=div,
                data=args.data,
                prompts=str(spec_bench),
                steps=steps,
                batch_size=args.batch_size,
                max_new_tokens=args.train_tokens,
                lr=args.lr,
                dtype="bf16",
                checkpoint_every=10**6,
            )
            d = Distiller(config, out, loader)
            t0 = time.perf_counter()
            while d.step < steps and (args.minutes is None or time.perf_counter() - t0 < 60 * args.minutes):
                entry = d.train_step()
                if d.step % 10 == 0:
                    print(
                        f"  {out.name} step {d.step}: loss {entry.loss:.3f}, greedy {entry.greedy:.3f} ({time.perf_counter() - t0:.0f} s)",
                        flush=True,
                    )
            d.wall_s = time.perf_counter() - t0
            d.config = config.model_copy(update={"steps": d.step})
            d.student.save_pretrained(out)  # usable as a model spec; the card's own acceptance is skipped (measured below)
            loader.load(TARGET).tokenizer.save_pretrained(out)
            rows.append(
                {
                    "student": str(out),
                    "layers": k,
                    "divergence": div,
                    "steps": d.step,
                    "train_s": d.wall_s,
                    "final_loss": d.log[-1].loss,
                    **held.acceptance(d.student),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n| student | K | divergence | steps x {args.batch_size} sequences | training s | greedy acceptance | acceptance at T = 1 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['student']} | {r['layers']} | {r['divergence']} | {r['steps']} | {r['train_s']:.0f} | {r['greedy']:.3f} | {r['sample']:.3f} |"
        )
    (args.out / f"{args.tag}.json").write_text(
        json.dumps({"machine": machine(), "args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
