"""hsd-plan on the llama.cpp engine against llama-server's own configurations, in one run.

    python -m benchmarks.bench_llamacpp                                  # Qwen 1.5B, HumanEval
    python -m benchmarks.bench_llamacpp --spec-bench question.jsonl --category summarization
    python -m benchmarks.bench_llamacpp --t-max 8 --models ngram,ngram:min=3,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b

One workload, one machine, one sitting:

1. ``hsd-plan profile --engine llamacpp`` of ``--models`` (the packaged Q4_K_M GGUFs) on the
   workload's profiling split, into a fresh database under ``--out-dir``;
2. ``hsd-plan solve``; then, alternating round by round with llama-server:
3. ``hsd-plan validate --candidates top-k`` on the held-out split: the solver's pick, its
   runners-up and autoregressive decoding on our llama.cpp engine, each measured
   (``measured_ms_per_token``: decode only, prefill excluded);
4. llama-server (the same llama.cpp tree, the same GGUFs, threads, held-out prompts wrapped in the
   same chat template and sent as token ids, token counts and greedy decoding; ``-np 1``) in each
   configuration a user of it can choose: no speculation, ``ngram-simple``, ``ngram-mod``,
   ``ngram-map-k``, ``ngram-map-k4v``, the list ``ngram-simple,ngram-mod``,
   ``draft-simple`` at its default and at each ``--n-max`` (``--spec-draft-p-min 0``), and the flags ``hsd-plan export
   --format llamacpp`` writes for the pick (its prediction against llama-server's measurement);

5. ``hsd-plan generate --check`` of the pick on every held-out prompt: its greedy agreement with
   autoregressive decoding on the same engine (llama.cpp's passes over several tokens round
   differently from its one-token passes).

Figures: a configuration's ms per token over the workload (each prompt's median over the
rounds, weighted by its tokens: the time of the workload's tokens over their count, what the
latency model predicts; ``hsd-plan validate`` reports the same); every ratio is taken between
figures of this run. ``--reread DIR`` prints a stored run's llama-server figures this way and as
the median over prompts and rounds, which runs before this statistic reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from benchmarks.common import machine, spec_bench_option, spec_bench_set
from hsd_planner.prompts import encode_prompt, load_prompts, split
from hsd_planner.validation.llama_server import LlamaServer, LlamaServerError
from hsd_planner.validation.results import workload_ms as validated_workload_ms
from hsd_runtime import cpu_capability, parse_spec
from hsd_runtime.models.llamacpp import quantized_gguf
from hsd_runtime.models.packaged import packaged_gguf

# our lookup and llama-server's (ngram-simple: n = 4, 8 and its default 12, up to 48 tokens a round)
DEFAULT_MODELS = (
    "ngram:min=3,ngram:n=4:rule=llama-server,ngram:n=8:rule=llama-server,ngram:rule=llama-server,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b"
)


def configurations(drafter: str, n_max: list[int]) -> dict[str, list[str]]:
    """llama-server flags of each configuration, by name."""
    draft = ["--spec-type", "draft-simple", "-md", drafter]
    out = {
        "no speculation": [],
        "ngram-simple": ["--spec-type", "ngram-simple"],
        "ngram-mod": ["--spec-type", "ngram-mod"],
        "ngram-map-k": ["--spec-type", "ngram-map-k"],
        "ngram-map-k4v": ["--spec-type", "ngram-map-k4v"],
        "ngram-simple,ngram-mod": ["--spec-type", "ngram-simple,ngram-mod"],
        "draft-simple (default n_max)": draft,
    }
    for k in n_max:
        out[f"draft-simple n_max {k}"] = [*draft, "--spec-draft-n-max", str(k), "--spec-draft-p-min", "0"]
    return out


def run_config(model: Path, args: list[str], prompts: list[list[int]], new: int, threads: int, rows: list[dict]) -> None:
    """One server with ``args``: a warm-up completion, then every prompt once, each appended to
    ``rows`` as it is measured (where the server fails, the rows measured before stay)."""
    with LlamaServer(model, args, threads=threads, ctx=4096) as server:
        server.complete(prompts[0], 8)
        for ids in prompts:
            c = server.complete(ids, new)
            rows.append({"ms_per_token": c.ms_per_token, "n": c.predicted_n, "draft_n": c.draft_n, "accepted": c.draft_n_accepted})


def workload_ms(rows: list[dict], prompts: int) -> float:
    """llama-server's ms per token over the workload, as ``hsd-plan validate`` reports its own
    (:func:`hsd_planner.validation.results.workload_ms`): ``rows`` round-major (every prompt once
    a round), each prompt's median over its rounds, weighted by its tokens.

    >>> workload_ms([{"ms_per_token": 40.0, "n": 100}, {"ms_per_token": 10.0, "n": 300}] * 2, 2)
    17.5
    """
    by_prompt = [SimpleNamespace(ms_per_token=r["ms_per_token"], total_tokens=r["n"]) for i in range(prompts) for r in rows[i::prompts]]
    return validated_workload_ms(by_prompt, prompts)  # type: ignore[arg-type]


def hsd_plan(*args: str) -> dict:
    """Run one hsd-plan command with --json; its document."""
    done = subprocess.run([sys.executable, "-m", "hsd_planner", *args, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hsd-plan {args[0]} failed: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout)


def gguf_of(spec: str, threads: int) -> Path:
    """The GGUF file llama-server runs for the packaged model ``spec``: its own, or its ``quant=``
    copy (the one our engine runs, made once into the cache)."""
    parsed = parse_spec(spec)
    path = packaged_gguf(parsed.name)
    return quantized_gguf(path, parsed.quant, threads) if parsed.quant else path


def reread(out_dir: Path) -> None:
    """Each stored run's llama-server figures (``*.json`` under ``out_dir``): the workload's ms per
    token and the median over prompts and rounds, and the exported flags over the best of the
    server's own configurations by each."""
    for path in sorted(out_dir.glob("*.json")):
        if path.name.endswith(".partial.json"):
            continue
        doc = json.loads(path.read_text())
        runs, prompts = doc["llama_server_runs"], doc["prompts"]
        pooled = {c: workload_ms(rows, prompts) for c, rows in runs.items()}
        median = {c: statistics.median(r["ms_per_token"] for r in rows) for c, rows in runs.items()}
        print(f"{path}: {prompts} prompts x {doc['repeats']} rounds, {doc['new']} tokens")
        print(f"{'llama-server configuration':40s} {'workload ms/token':>18s} {'median ms/token':>16s}")
        for c in runs:
            print(f"{c:40s} {pooled[c]:18.2f} {median[c]:16.2f}")
        for label, ms in (("workload", pooled), ("median", median)):
            best = min((c for c in ms if c != "exported pick"), key=ms.__getitem__)
            print(
                f"exported over the best own ({best}) by the {label}: {ms[best] / ms['exported pick']:.3f}x; "
                f"against its prediction {ms['exported pick'] / doc['exported']['predicted_ms_per_token'] - 1:+.1%}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS, help="candidates, the draft model llama-server runs second to last, target last")
    ap.add_argument("--prompts", default="humaneval", help="prompt set, unless --spec-bench")
    spec_bench_option(ap, required=False)
    ap.add_argument("--category", default="coding", help="Spec-Bench category with --spec-bench")
    ap.add_argument("--profile-prompts", type=int, default=8)
    ap.add_argument("--latency-grid", help="tokens per pass to time (hsd-plan profile --latency-grid; default: its own)")
    ap.add_argument("--max-prompts", type=int, default=6, help="held-out prompts")
    ap.add_argument("--new", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--t-max", type=int, default=48, help="widest proposal the solver considers (hsd-plan solve --t-max)")
    ap.add_argument("--n-max", default="8", help="llama-server draft-model k to try besides its default (3)")
    ap.add_argument("--repeats", type=int, default=2, help="rounds, alternating llama-server and hsd-plan")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/out/llamacpp"))
    ap.add_argument("--fresh", action="store_true", help="profile into a new database (default: resume the one in --out-dir)")
    ap.add_argument("--reread", type=Path, metavar="DIR", help="print the llama-server figures of the runs stored in DIR, and exit")
    args = ap.parse_args()
    if args.reread:
        reread(args.reread)
        return

    models = args.models.split(",")
    target, drafter = gguf_of(models[-1], args.threads), gguf_of(models[-2], args.threads)
    if args.spec_bench:
        source = ["--prompts", str(args.spec_bench), "--category", args.category]
        prompt_set = spec_bench_set(args.spec_bench, args.category)
    else:
        source = ["--prompts", args.prompts]
        prompt_set = load_prompts(args.prompts)
    name = prompt_set.name.replace(":", "-").replace("/", "-")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    db = args.out_dir / f"{name}.db"
    if args.fresh:
        db.unlink(missing_ok=True)
    common = ["--db", str(db)]
    grid = ["--latency-grid", args.latency_grid] if args.latency_grid else []
    profile = hsd_plan("profile", "--engine", "llamacpp", "--models", args.models, *source, "--max-prompts", str(args.profile_prompts),
                       "--max-new-tokens", str(args.new), *grid, *common)  # fmt: skip
    solve = hsd_plan("solve", "--t-max", str(args.t_max), *common)
    print(f"pick: {' -> '.join(solve['chain'])} {solve['widths']}, predicted {solve['predicted_speedup']:.2f}x", flush=True)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)
    held_out = split(prompt_set, "validate", limit=args.max_prompts)
    prompts = [encode_prompt(tokenizer, text) for text in held_out.prompts]
    configs = configurations(str(drafter), [int(k) for k in args.n_max.split(",")])
    exported = hsd_plan("export", "--format", "llamacpp", *common)
    configs["exported pick"] = exported["payload"]["server_args"]
    server: dict[str, list[dict]] = {c: [] for c in configs}
    ours: dict[str, list[float]] = {}
    validations: list[dict] = []
    partial_path = args.out_dir / f"{name}.partial.json"

    def save_partial() -> None:
        partial = {"server": server, "ours": ours, "validations": validations, "solve": solve}
        partial_path.write_text(json.dumps(partial, indent=2) + "\n")

    for r in range(args.repeats):
        steps = ["server", "ours"] if r % 2 == 0 else ["ours", "server"]
        for step in steps:
            if step == "server":
                for c in configs if r % 2 == 0 else reversed(list(configs)):
                    try:
                        run_config(target, configs[c], prompts, args.new, args.threads, server[c])
                    except LlamaServerError as exc:  # one line; what was measured is kept
                        save_partial()
                        raise SystemExit(f"error: llama-server ({c}): {exc}; the rows measured so far are in {partial_path}") from None
            else:
                doc = hsd_plan("validate", "--candidates", "top-k", *source, "--max-prompts", str(args.max_prompts),
                               "--max-new-tokens", str(args.new), *common)  # fmt: skip
                validations.append(doc)
                for plan in doc["plans"]:
                    label = " -> ".join(f"{m}[{w}]" for m, w in zip(plan["chain"], [*plan["widths"], ""])).replace("[]", "")
                    label = label.replace(":engine=llamacpp", "")
                    ours.setdefault(f"{plan['kind']}: {label}", []).append(plan["measured_ms_per_token"])
                    # the autoregressive baseline validate runs beside the plans: ms = plan's ms x its measured speed-up
                    ours.setdefault("autoregressive (validate's baseline)", []).append(
                        plan["measured_ms_per_token"] * plan["measured_speedup"]
                    )
            print(f"round {r + 1}: {step} done", flush=True)
            save_partial()

    # greedy agreement of the pick with autoregressive decoding on the same engine (generate --check)
    agreement = []
    if len(solve["chain"]) > 1:
        widths = ",".join(str(w) for w in solve["widths"])
        for text in held_out.prompts:
            gen = hsd_plan("generate", "--engine", "llamacpp", "--chain", ",".join(solve["chain"]), "--widths", widths,
                           "--prompt", text, "--max-new-tokens", str(args.new), "--check", "--no-warmup")  # fmt: skip
            agreement.append(gen["check"])
    server_ms = {c: workload_ms(rows, len(prompts)) for c, rows in server.items()}
    ours_ms = {c: statistics.median(v) for c, v in ours.items()}
    none = server_ms["no speculation"]
    best_server = min(server_ms, key=server_ms.__getitem__)
    own = {c: ms for c, ms in server_ms.items() if c != "exported pick"}  # the configurations a user picks without hsd-plan
    best_own = min(own, key=own.__getitem__)
    pick = next(c for c in ours_ms if c.startswith("best"))
    ar = "autoregressive (validate's baseline)"
    print(f"\n{held_out.name}: {len(prompts)} held-out prompts x {args.repeats} rounds, {args.new} greedy tokens, {args.threads} threads; "
          f"{machine()}, {cpu_capability()}")  # fmt: skip
    print(f"{'configuration':72s} {'ms/token':>9s} {'vs llama-server none':>21s}")
    for c, ms in server_ms.items():
        print(f"{'llama-server ' + c:72s} {ms:9.2f} {none / ms:20.2f}x")
    for c, ms in ours_ms.items():
        print(f"{'hsd-plan ' + c:72s} {ms:9.2f} {none / ms:20.2f}x")
    errors = [v["median_abs_speedup_error"] for v in validations]
    predicted = exported["exported"]["predicted_ms_per_token"]
    print(f"exported pick ({' '.join(configs['exported pick']) or 'no speculation'}): measured {server_ms['exported pick']:.2f} ms/token "
          f"against {predicted:.2f} predicted ({server_ms['exported pick'] / predicted - 1:+.1%}); llama-server's default draft model "
          f"{server_ms['draft-simple (default n_max)']:.2f}")  # fmt: skip
    print(f"exported pick over llama-server's best own configuration ({best_own}, {own[best_own]:.2f} ms/token): "
          f"{own[best_own] / server_ms['exported pick']:.3f}x")  # fmt: skip
    print(f"our autoregressive / llama-server none: {ours_ms[ar] / none:.3f}; pick vs llama-server's best ({best_server}): "
          f"{server_ms[best_server] / ours_ms[pick]:.2f}x; median |speed-up error| per validation: {', '.join(f'{e:.1%}' for e in errors)}")  # fmt: skip
    doc = {
        "workload": held_out.name,
        "prompts": len(prompts),
        "new": args.new,
        "repeats": args.repeats,
        "threads": args.threads,
        "machine": machine(),
        "cpu_capability": cpu_capability(),
        "solve": {k: solve[k] for k in ("chain", "widths", "predicted_ms_per_token", "predicted_speedup")},
        "profile": profile,
        "llama_server_ms_per_token": server_ms,
        "llama_server_runs": server,
        "hsd_plan_ms_per_token": ours_ms,
        "median_abs_speedup_error": errors,
        "ours_ar_over_server_none": ours_ms[ar] / none,
        "pick_over_server_best": server_ms[best_server] / ours_ms[pick],
        "server_best": best_server,
        "server_best_own": best_own,
        "exported": {
            "over_server_best_own": own[best_own] / server_ms["exported pick"],
            "chain": exported["exported"]["chain"],
            "widths": exported["exported"]["widths"],
            "restriction": exported["restriction"],
            "args": configs["exported pick"],
            "predicted_ms_per_token": predicted,
            "measured_ms_per_token": server_ms["exported pick"],
        },
    }
    if agreement:
        identical = sum(a["identical"] for a in agreement)
        print(f"greedy check of the pick against autoregressive decoding: {identical}/{len(agreement)} prompts identical, "
              f"agreement {statistics.median(a['agreement'] for a in agreement):.1%} (median), first divergences "
              f"{[a['first_divergence'] for a in agreement]}")  # fmt: skip
    doc["greedy_check"] = agreement
    (args.out_dir / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
