"""Steering trained for a time budget: ``hsd-plan steer train`` with ``--minutes`` instead of ``--steps``,
for one or more drafters under one verifier.

The corpus (the data pipeline's, shared with ``distill`` and ``heads train`` for the same verifier,
prompts and settings), the verifier's taps at every corpus position and the held-out
continuations are made once, for the first drafter, and not counted; then, for each drafter in
turn, steps run until the budget is spent and the steering is measured on held-out prompts and
saved with its card into ``OUT/NAME`` (the directory ``hsd-plan steer train --out`` writes).

    python -m benchmarks.bench_steer --verifier smollm2-135m --prompts question.jsonl --divergence tvd \\
        --drafter l4=smollm2-135m:layers=4@30 --drafter l4-distilled=benchmarks/out/students/goal-all-l4-tvd@20 \\
        --out benchmarks/out/steer
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import machine
from hsd_planner.training.steer import SteerConfig, SteerTrainer
from hsd_runtime import ModelLoader
from hsd_runtime.models.device import cpu_capability


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verifier", default="smollm2-135m")
    ap.add_argument("--drafter", action="append", required=True, help="NAME=SPEC[@MINUTES], once per drafter (trained one after another).")
    ap.add_argument("--prompts", default=None, help="What hsd-plan steer train --prompts takes (default: the built-in set).")
    ap.add_argument("--category", default=None, help="Train and measure on this category of a JSONL prompt file only.")
    ap.add_argument("--minutes", type=float, default=20.0, help="Training budget per drafter.")
    ap.add_argument("--form", default="lowrank")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--finetune", default="none")
    ap.add_argument("--stale", type=int, default=4)
    ap.add_argument("--divergence", default="fkl")
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--samples-per-prompt", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--drafter-lr", type=float, default=1e-5)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(f"machine: {machine()}, {cpu_capability()}", flush=True)
    loader = ModelLoader(device="cpu", dtype=args.dtype)
    first: SteerTrainer | None = None
    for item in args.drafter:
        name, _, spec = item.partition("=")
        spec, _, budget = spec.partition("@")
        minutes = float(budget) if budget else args.minutes
        config = SteerConfig(
            drafter=spec,
            verifier=args.verifier,
            form=args.form,
            rank=args.rank,
            finetune=args.finetune,
            stale=args.stale,
            divergence=args.divergence,
            prompts=args.prompts,
            category=args.category,
            steps=10**6,
            train_batch=args.train_batch,
            samples_per_prompt=args.samples_per_prompt,
            max_new_tokens=args.max_new_tokens,
            max_context=args.max_context,
            lr=args.lr,
            drafter_lr=args.drafter_lr,
            dtype=args.dtype,
            checkpoint_every=10**6,
        )
        trainer = SteerTrainer(config, args.out / name, loader)
        t0 = time.perf_counter()
        if first is None:
            trainer.prepare(lambda stage, done, total: None)
            first = trainer
            print(f"prepared in {time.perf_counter() - t0:.0f} s (corpus {trainer.corpus_s:.0f} s)", flush=True)
        else:  # the same verifier, corpus and held-out prompts: their data are shared
            trainer.corpus, trainer.taps, trainer.held, trainer.corpus_s = first.corpus, first.taps, first.held, first.corpus_s
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60 * minutes:
            s = time.perf_counter()
            loss = trainer.train_step()
            trainer.wall_s += time.perf_counter() - s
            if trainer.step % 25 == 0:
                print(f"{name} step {trainer.step}: loss {loss:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        trainer.config = trainer.config.model_copy(update={"steps": trainer.step})
        trainer.save_checkpoint()
        report = trainer.finish()
        print(json.dumps(report.to_dict()), flush=True)
        print((args.out / name / "README.md").read_text(), flush=True)


if __name__ == "__main__":
    main()
