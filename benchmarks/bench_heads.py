"""Block-draft heads trained for a time budget: ``hsd-plan heads train`` with ``--minutes`` instead of ``--steps``.

The corpus (the data pipeline's, shared with ``hsd-plan distill`` for the same host, prompts and
settings) and the host's hidden states are made first and not counted; then steps run until the
budget is spent, and the heads are measured on held-out prompts and saved with their card (the
same directory ``hsd-plan heads train --out`` writes; ``--resume`` continues it).

    python -m benchmarks.bench_heads --model smollm2-135m --prompts question.jsonl --minutes 20 --out benchmarks/out/heads/smollm2-h4
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.common import machine
from hsd_planner.training.heads import HeadsConfig, HeadsTrainer
from hsd_runtime import ModelLoader
from hsd_runtime.models.device import cpu_capability


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompts", default=None, help="What hsd-plan heads train --prompts takes (default: the built-in set).")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--samples-per-prompt", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument(
        "--vocab", type=int, default=None, help="Train through the output layer trimmed to N tokens (hsd-plan heads train --vocab)."
    )
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(f"machine: {machine()}, {cpu_capability()}", flush=True)
    config = HeadsConfig(
        model=args.model,
        heads=args.heads,
        prompts=args.prompts,
        steps=10**6,
        train_batch=args.train_batch,
        samples_per_prompt=args.samples_per_prompt,
        max_new_tokens=args.max_new_tokens,
        lr=args.lr,
        vocab=args.vocab,
        dtype=args.dtype,
        checkpoint_every=10**6,
    )
    trainer = HeadsTrainer(config, args.out, ModelLoader(device="cpu", dtype=args.dtype))
    t0 = time.perf_counter()
    trainer.prepare(lambda stage, done, total: None)
    print(
        f"prepared in {time.perf_counter() - t0:.0f} s (corpus {trainer.corpus_s:.0f} s); untrained: {json.dumps(trainer.initial)}",
        flush=True,
    )
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 60 * args.minutes:
        s = time.perf_counter()
        loss = trainer.train_step()
        trainer.wall_s += time.perf_counter() - s
        if trainer.step % 25 == 0:
            print(f"step {trainer.step}: loss {loss:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    trainer.config = trainer.config.model_copy(update={"steps": trainer.step})
    trainer.save_checkpoint()
    report = trainer.finish()
    print(json.dumps(report.to_dict()), flush=True)
    print((args.out / "README.md").read_text())


if __name__ == "__main__":
    main()
