"""Acceptance of distilled students (``hsd-plan distill``) against the untrained early exits.

Students of smollm2-135m with K = 2, 4, 8 layers are trained with each divergence for the same
number of steps (target data by default: the data pipeline's cached corpus of the Spec-Bench
profiling split, several samples per prompt; or on-policy / mixed; bf16 target), then measured
on held-out Spec-Bench prompts (the validation split, 2 per category), greedy and at T = 1,
next to the untrained early exits ``smollm2-135m:layers=K``. Acceptance is measured as
``hsd-plan profile`` does: over the target's own continuation of each prompt (computed once and
shared by every student), greedy argmax agreement and 1 - TV(p, q) at T = 1.

    python -m benchmarks.bench_distill --spec-bench question.jsonl --steps 20                       # the grid
    python -m benchmarks.bench_distill --spec-bench question.jsonl --layers 4 --divergences fkl --minutes 30 --tag goal
    python -m benchmarks.bench_distill --spec-bench question.jsonl --pipeline-check 32 --layers 4 --divergences fkl --steps 1

With ``--vocab N`` the students train through their output layer trimmed to N tokens
(``hsd-plan distill --vocab``), and every row - the early exits, the students and any ``--also``
student directory - is measured through the same trimmed layer, as ``DIR:vocab=N`` drafts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.common import SPEC_CATEGORIES, machine, spec_bench_file, spec_bench_option, spec_bench_set
from hsd_planner.profiling.acceptance import teacher_forced_logits
from hsd_planner.prompts import encode_prompt, load_prompts, split, write_trained_prompts
from hsd_planner.training import DistillConfig, Distiller
from hsd_planner.training.sampling import sample_batched
from hsd_planner.training.student import HeldOut, sample
from hsd_planner.training.teacher import teacher_signal
from hsd_runtime import ModelLoader, SamplingConfig
from hsd_runtime.models.trim import kept_tokens
from hsd_runtime.models.views import trimmed_model

TARGET = "smollm2-135m"


def held_out(loader: ModelLoader, spec_bench: Path, per_category: int, new_tokens: int) -> HeldOut:
    """The target's continuations of the first ``per_category`` held-out prompts of every category."""
    target = loader.load(TARGET)
    prompts = [
        encode_prompt(target.tokenizer, text)
        for category in SPEC_CATEGORIES
        for text in split(spec_bench_set(spec_bench, category), "validate").prompts[:per_category]
    ]
    return HeldOut.make(target, prompts, new_tokens, 1.0)


def pipeline_rates(loader: ModelLoader, prompts: list[list[int]], new_tokens: int, gen_batch: int) -> dict[str, float]:
    """Teacher-signal positions per second, one sequence at a time (sample, then one teacher-forced
    pass per sequence) against the data pipeline (batched sampling and teacher passes), same prompts."""
    target = loader.load(TARGET)
    sampling = SamplingConfig(mode="sample", temperature=1.0)
    t0 = time.perf_counter()
    positions = 0
    for i, ids in enumerate(prompts):
        cont = sample(target.model, target, ids, new_tokens, SamplingConfig(mode="sample", temperature=1.0, seed=i))
        teacher_forced_logits(target.model, ids, cont, target.logits_width)
        positions += len(cont)
    one = positions / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    conts = sample_batched(target.model, target, prompts, new_tokens, sampling, list(range(len(prompts))), gen_batch)
    signal = teacher_signal(target.model, prompts, conts, target.logits_width, 64, 1.0, gen_batch)
    engine = signal.ids.shape[0] / (time.perf_counter() - t0)
    return {"one_at_a_time": one, "engine": engine, "ratio": engine / one}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="2,4,8")
    ap.add_argument("--divergences", default="fkl,rkl,jsd,tvd")
    ap.add_argument("--data", default="target")
    ap.add_argument("--samples-per-prompt", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--gen-batch", type=int, default=16)
    ap.add_argument("--max-prompts", type=int, default=None, help="training prompts of the profiling split (default: all)")
    ap.add_argument("--pipeline-check", type=int, default=0, help="first measure positions/s on this many prompts, both ways")
    ap.add_argument("--steps", type=int, default=20, help="steps per student (ignored with --minutes)")
    ap.add_argument("--minutes", type=float, default=None, help="train each student for this long instead")
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--train-tokens", type=int, default=64)
    ap.add_argument("--max-context", type=int, default=256, help="prompt tokens the student reads in training (0: all)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-per-category", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=48)
    ap.add_argument("--vocab", type=int, default=None, help="train and measure through the output layer trimmed to N tokens")
    ap.add_argument("--also", action="append", default=[], help="a student directory measured beside the new ones (repeatable)")
    ap.add_argument("--tag", default="grid")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/students"))
    spec_bench_option(ap)
    args = ap.parse_args()
    spec_bench = spec_bench_file(args.spec_bench)
    loader = ModelLoader(device="cpu", dtype="bf16")
    print(f"machine: {machine()}", flush=True)
    rates = None
    if args.pipeline_check:
        tok = loader.load(TARGET).tokenizer
        texts = split(load_prompts(spec_bench), "profile").prompts[: args.pipeline_check]
        rates = pipeline_rates(loader, [encode_prompt(tok, t) for t in texts], args.train_tokens, args.gen_batch)
        print(f"teacher-signal positions/s: {json.dumps(rates)}", flush=True)
    held = held_out(loader, spec_bench, args.eval_per_category, args.eval_tokens)
    print(f"held-out: {len(held.prompts)} prompts x (greedy, T = 1) continuations of {args.eval_tokens} tokens", flush=True)
    target = loader.load(TARGET)
    width = target.logits_width

    def drafting(model: Any) -> Any:
        """The model as it drafts: through the trimmed output layer with --vocab."""
        return trimmed_model(model, kept_tokens(range(width), args.vocab, target.eos_token_ids, width)) if args.vocab else model

    rows = []
    for folder in args.also:
        student = ModelLoader(device="cpu", dtype="fp32", prepack=False).load(folder).model
        rows.append({"student": folder, "layers": "-", "divergence": "-", "steps": 0, "train_s": 0.0})
        rows[-1] |= dict(zip(("greedy", "sample"), held.acceptance(drafting(student))))
        print(json.dumps(rows[-1]), flush=True)
    shared: dict[int, Distiller] = {}  # per K, the first student's run: its held-out set and initial acceptance are every K's
    for k in [int(x) for x in args.layers.split(",")]:
        exit_ = loader.load(f"{TARGET}:layers={k}").model
        rows.append(
            {
                "student": f"{TARGET}:layers={k} (untrained)",
                "layers": k,
                "divergence": "-",
                "steps": 0,
                "train_s": 0.0,
                **dict(zip(("greedy", "sample"), held.acceptance(drafting(exit_)))),
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
                max_prompts=args.max_prompts,
                steps=steps,
                train_batch=args.train_batch,
                samples_per_prompt=args.samples_per_prompt,
                top_k=args.top_k,
                gen_batch=args.gen_batch,
                max_new_tokens=args.train_tokens,
                max_context=args.max_context,
                lr=args.lr,
                vocab=args.vocab,
                dtype="bf16",
                checkpoint_every=10**6,
            )
            d = Distiller(config, out, loader)
            if k in shared:  # the card's held-out continuations and the student as built do not depend on the divergence
                d.held_out, d.initial = shared[k].held_out, shared[k].initial
            shared.setdefault(k, d)
            t0 = time.perf_counter()
            d.prepare()  # the corpus (or its cache) and the student as built: counted in the budget
            corpus_s = time.perf_counter() - t0
            print(f"  corpus: {len(d.corpus.prompts) if d.corpus else 0} sequences in {corpus_s:.0f} s", flush=True)
            while d.step < steps and (args.minutes is None or time.perf_counter() - t0 < 60 * args.minutes):
                entry = d.train_step()
                if d.step % 10 == 0:
                    print(
                        f"  {out.name} step {d.step}: loss {entry.loss:.3f}, greedy {entry.greedy:.3f} ({time.perf_counter() - t0:.0f} s)",
                        flush=True,
                    )
            d.wall_s = time.perf_counter() - t0 - corpus_s  # training alone; the budget (--minutes) counts both
            d.config = config.model_copy(update={"steps": d.step})
            d.student.save_pretrained(out)  # usable as a model spec; the card's own acceptance is skipped (measured below)
            loader.load(TARGET).tokenizer.save_pretrained(out)
            write_trained_prompts(out, d.train_set, config.reserve)  # what profile checks its prompts against
            rows.append(
                {
                    "student": str(out),
                    "layers": k,
                    "divergence": div,
                    "steps": d.step,
                    "train_s": d.wall_s,
                    "corpus_s": corpus_s,
                    "positions": d.positions,
                    "final_loss": d.log[-1].loss,
                    **dict(zip(("greedy", "sample"), held.acceptance(d.drafting))),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(
        f"\n| student | K | divergence | data | steps x {args.train_batch} sequences | positions | total s (corpus) | greedy acceptance | acceptance at T = 1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        total = r["train_s"] + r.get("corpus_s", 0.0)
        print(
            f"| {r['student']} | {r['layers']} | {r['divergence']} | {args.data if r['steps'] else '-'} | {r['steps']} | {r.get('positions', 0):,} | "
            f"{total:.0f} ({r.get('corpus_s', 0.0):.0f}) | {r['greedy']:.3f} | {r['sample']:.3f} |"
        )
    (args.out / f"{args.tag}.json").write_text(
        json.dumps(
            {
                "machine": machine(),
                "args": vars(args) | {"out": str(args.out), "spec_bench": str(args.spec_bench)},
                "rates": rates,
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
