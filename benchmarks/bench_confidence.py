"""llama-server's drafters as it runs them, predicted and measured: draft models that stop on their
confidence (``pmin=``, ``nmin=``: ``draft-simple`` with ``--spec-draft-p-min``) and its n-gram
lookups (``ngram:rule=ngram-mod``, ``ngram:rule=llama-server``, ``ngram:rule=ngram-map-k``...), on
our engine and on llama-server.

    python -m benchmarks.bench_confidence                          # Qwen 0.5B -> 1.5B, HumanEval, p_min 0.5 and 0.8
    python -m benchmarks.bench_confidence --variants pmin=0.3,pmin=0.6:nmin=2 --new 256
    python -m benchmarks.bench_confidence --engine torch --drafter qwen2.5-coder-0.5b:quant=int8   # no llama-server
    python -m benchmarks.bench_confidence --drafter ngram --variants rule=ngram-mod:n=4,rule=llama-server:n=4 \
        --widths 4,8,16 --latency-grid 1,2,3,4,5,6,7,8,9,12,15,16,17               # the n-gram lookups

One workload, one machine, one sitting:

1. ``hsd-plan profile --engine llamacpp`` (or ``--engine torch``) of the drafter alone and with each
   of ``--variants`` (``--no-base``: the variants only), and the target, on the workload's
   profiling split, into a fresh database under ``--out-dir`` (a draft model's passes are timed
   once; each ``pmin=`` reads its draft lengths off its own rows);
2. ``hsd-plan solve``, then a validation on the held-out split of its pick, autoregressive
   decoding and each drafter at each of ``--widths`` (fixed chains): predicted and measured on our
   engine (ms per token, tokens per round);
3. llama-server (the same GGUFs, threads, prompts as token ids, greedy, ``-np 1``) running each of
   those plans with the flags ``hsd-plan export --format llamacpp`` writes for it (a lookup
   without a server rule has none and is not run there), and with no speculation: its ms per
   token and its tokens per round against the plan's prediction (llama.cpp only: the server runs
   the GGUFs our llama.cpp engine profiled).

Rounds alternate llama-server and our engine (``--repeats``); every ratio is between figures of
this run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.bench_llamacpp import gguf_of, hsd_plan, run_config, workload_ms
from benchmarks.common import machine
from hsd_planner.cli.loader import resolve_dtype_choice
from hsd_planner.export.restrict import unloadable
from hsd_planner.export.stacks import Served, stack_for
from hsd_planner.prompts import PromptSet, encode_prompt, load_prompts, split
from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile
from hsd_planner.validation import run_validation, select_plans
from hsd_runtime import ModelLoader, cpu_capability, parse_spec


def server_args(name: str, drafter: Path | None, k: int) -> list[str] | None:
    """The flags ``hsd-plan export --format llamacpp`` writes for the drafter ``name`` (its model's
    GGUF ``drafter``) asked for ``k`` tokens a round; None where the server runs no such drafter.

    >>> server_args("d:pmin=0.5:nmin=2", Path("d.gguf"), 3)[-4:]
    ['--spec-draft-n-min', '2', '--spec-draft-p-min', '0.5']
    >>> server_args("ngram:rule=ngram-mod:n=4", None, 8)
    ['--spec-type', 'ngram-mod', '--spec-ngram-mod-n-match', '4', '--spec-ngram-mod-n-min', '0', '--spec-ngram-mod-n-max', '8']
    >>> server_args("ngram:rule=llama-server+ngram-mod:n=8:nmatch=12", None, 15)[:4]
    ['--spec-type', 'ngram-simple,ngram-mod', '--spec-ngram-simple-size-n', '8']
    """
    spec = parse_spec(name)
    stack = stack_for("llamacpp")
    if unloadable(name, spec.is_ngram, stack) is not None:
        return None
    served = Served(
        "target.gguf",
        "ngram" if spec.is_ngram else str(drafter),
        spec.is_ngram,
        k,
        spec.ngram_order if spec.is_ngram else 0,
        "greedy",
        None,
        p_min=spec.p_min or 0.0,
        n_min=spec.n_min,
        ngram_rule=spec.ngram_rule,
        n_match=spec.n_match,
    )
    return stack.render(served).payload["server_args"]


# the server's n-gram drafters at their own defaults
SERVER_DEFAULTS = {
    f"{t}, its defaults": ["--spec-type", t]
    for t in ("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-simple,ngram-mod")
}


def draft_lists(exported: list[str], drafter: str) -> dict[str, list[str]]:
    """llama-server's configurations that end in the draft model ``drafter`` (its GGUF), which
    hsd-plan does not price: ``draft-simple`` and the lists of an n-gram type and it at their
    defaults, and the export's lookup flags with ``draft-simple`` after them (the server tries its
    n-gram types first: the model drafts the rounds the lookup finds nothing).

    >>> draft_lists(["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "8"], "d.gguf")["the export's lookup, then draft-simple"]
    ['--spec-type', 'ngram-simple,draft-simple', '--spec-ngram-simple-size-n', '8', '-md', 'd.gguf']
    """
    model = ["-md", drafter]
    out = {"draft-simple, its defaults": ["--spec-type", "draft-simple", *model]}
    for t in ("ngram-simple", "ngram-mod"):
        out[f"{t},draft-simple, their defaults"] = ["--spec-type", f"{t},draft-simple", *model]
    if exported[:1] == ["--spec-type"] and "-md" not in exported:
        out["the export's lookup, then draft-simple"] = ["--spec-type", f"{exported[1]},draft-simple", *exported[2:], *model]
    return out


def _held_out(args: argparse.Namespace, target: Path) -> tuple[PromptSet, list[list[int]]]:
    """The workload's held-out split and its prompts as token ids, encoded as llama-server gets them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target.parent), gguf_file=target.name)
    held_out = split(load_prompts(args.prompts, args.category), "validate", limit=args.max_prompts)
    return held_out, [encode_prompt(tokenizer, text) for text in held_out.prompts]


def _rounds(rows: list[dict]) -> int:
    """llama-server's rounds over completions ``rows``: each commits its accepted tokens + 1."""
    return sum(max(1, r["n"] - r["accepted"]) for r in rows) or 1


def server_only(args: argparse.Namespace, db: Path) -> None:
    """llama-server alone over the held-out prompts, ``--repeats`` rounds: no speculation, the flags
    ``hsd-plan export --format llamacpp`` writes for the stored pick (the best plan the server can
    run, where it cannot run the pick), for a lookup the server's own n-gram defaults, and with a
    draft model as ``--drafter`` the server's configurations that end in it (:func:`draft_lists`)."""
    exported = hsd_plan("export", "--format", "llamacpp", "--db", str(db))
    plan, flags = exported["exported"], exported["payload"]["server_args"]
    name, k = plan["chain"][0], int(plan["widths"][0]) if len(plan["chain"]) > 1 else 0
    target = gguf_of(args.target, args.threads)
    held_out, prompts = _held_out(args, target)
    configs = {"no speculation": [], f"the export {name} [{k}]": flags} | (SERVER_DEFAULTS if parse_spec(name).is_ngram else {})
    if not parse_spec(args.drafter).is_ngram:
        configs |= draft_lists(flags, str(gguf_of(parse_spec(args.drafter).name, args.threads)))
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeats):
        for c, f in configs.items():
            run_config(target, f, prompts, args.new, args.threads, runs.setdefault(c, []))
    print(f"{held_out.name}: {len(prompts)} held-out prompts x {args.repeats} rounds, {args.new} greedy tokens, "
          f"{args.threads} threads; {machine()}, {cpu_capability()}; the pick {' -> '.join(exported['pick']['chain'])}, "
          f"exported {name} [{k}] predicted at {plan['predicted_ms_per_token']:.2f} ms/token")  # fmt: skip
    for why in exported["restriction"]:
        print(f"  not the pick: {why}")
    out = {}
    for c, rows in runs.items():
        ms = workload_ms(rows, len(prompts))
        out[c] = {"ms_per_token": ms, "tokens_per_round": sum(r["n"] for r in rows) / _rounds(rows), "flags": configs[c]}
        print(f"llama-server {c}: {ms:.2f} ms/token, {out[c]['tokens_per_round']:.2f} tokens a round")
    doc = {"pick": exported["pick"], "exported": plan, "restriction": exported["restriction"], "configs": out, "runs": runs,
           "machine": machine(), "cpu_capability": cpu_capability()}  # fmt: skip
    (args.out_dir / f"confidence-{args.engine}.server.json").write_text(json.dumps(doc, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="llamacpp", choices=["llamacpp", "torch"])
    ap.add_argument("--dtype", default="auto", help="the torch engine's dtype (hsd-plan profile --dtype)")
    ap.add_argument("--drafter", default="qwen2.5-coder-0.5b")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--variants", default="pmin=0.5,pmin=0.8", help="the drafter's options profiled beside it (pmin=, nmin=, rule=, n=)")
    ap.add_argument("--no-base", action="store_true", help="profile the variants only, not the drafter without options")
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--category", default=None, help="a Spec-Bench category of --prompts (e.g. summarization)")
    ap.add_argument("--profile-prompts", type=int, default=8)
    ap.add_argument("--max-prompts", type=int, default=4, help="held-out prompts")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--t-max", type=int, default=8)
    ap.add_argument("--widths", default="1,3,6", help="each drafter's widths, run as fixed chains")
    ap.add_argument("--also", default="", help="more fixed chains, DRAFTER@K,... (e.g. ngram:rule=ngram-mod:nmin=48@64)")
    ap.add_argument("--latency-grid", default="1,2,3,4,5,6,7,8,9,12,16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/out/confidence"))
    ap.add_argument(
        "--server-only",
        action="store_true",
        help="llama-server alone, on the database a run left in --out-dir: no speculation, the export's flags and the server's defaults",
    )
    args = ap.parse_args()

    variants = [f"{args.drafter}:{v}" for v in args.variants.split(",")]
    also = [(name, int(k)) for name, _, k in (item.rpartition("@") for item in args.also.split(",") if item)]
    extra = sorted({name for name, _ in also} - {args.drafter, *variants})
    models = [*([] if args.no_base else [args.drafter]), *variants, *extra, args.target]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    db = args.out_dir / f"confidence-{args.engine}.db"
    if args.server_only:
        server_only(args, db)
        return
    db.unlink(missing_ok=True)
    common = ["--db", str(db)]
    source = ["--prompts", args.prompts, *(["--category", args.category] if args.category else [])]
    dtype = ["--dtype", args.dtype] if args.engine == "torch" else []
    t0 = time.monotonic()
    profile = hsd_plan("profile", "--engine", args.engine, *dtype, "--models", ",".join(models), *source,
                       "--max-prompts", str(args.profile_prompts), "--max-new-tokens", str(args.new),
                       "--latency-grid", args.latency_grid, *common)  # fmt: skip
    profile["elapsed_s"] = round(time.monotonic() - t0, 1)
    solve = hsd_plan("solve", "--t-max", str(args.t_max), *common)
    print(f"profiled in {profile['elapsed_s']:.0f} s; pick {' -> '.join(solve['chain'])} {solve['widths']}", flush=True)

    target = gguf_of(args.target, args.threads)
    drafter = None if parse_spec(args.drafter).is_ngram else gguf_of(parse_spec(args.drafter).name, args.threads)
    held_out, prompts = _held_out(args, target)

    # each drafter at each width, as fixed chains beside the solve's pick and autoregressive decoding
    store = open_db(str(db))
    record, picked = select_plans(store, (), "best")
    names = sorted({str(m.name) for m in load_profile(store, target=record.target)[0].models if m.name != record.target})
    widths = [int(w) for w in args.widths.split(",")]
    chains = [(name, w) for name in names if name not in extra for w in widths] + also
    fixed = [((name, record.target), (w,)) for name, w in chains]
    loader = ModelLoader(device="cpu", dtype=resolve_dtype_choice(args.dtype, "cpu"), engine=args.engine, threads=args.threads)
    validations: list[dict] = []
    server: dict[str, list[dict]] = {}
    configs: dict[str, list[str] | None] = {"no speculation": []}
    for name, w in chains:
        configs[f"{name} [{w}]"] = server_args(name, drafter, w)
    pick = next((p for p in picked if p.kind != "autoregressive"), None)
    if pick is not None and len(pick.plan.chain) == 2:  # the pick's export, where it is one level
        configs.setdefault(
            f"{pick.plan.chain[0]} [{pick.plan.widths[0]}]", server_args(pick.plan.chain[0], drafter, int(pick.plan.widths[0]))
        )
    if drafter is None:
        configs |= SERVER_DEFAULTS
    for r in range(args.repeats):
        for step in ["ours", "server"] if r % 2 == 0 else ["server", "ours"]:
            if step == "ours":
                report = run_validation(store, loader, record, picked, held_out, args.new, 1, fixed=fixed)
                validations.append(report.to_dict())
            elif args.engine == "llamacpp":
                for c, flags in configs.items():
                    if flags is not None:
                        run_config(target, flags, prompts, args.new, args.threads, server.setdefault(c, []))
            print(f"round {r + 1}: {step} done", flush=True)

    server_ran = args.engine == "llamacpp"
    none = workload_ms(server["no speculation"], len(prompts)) if server_ran else float("nan")
    print(f"\n{held_out.name}: {len(prompts)} held-out prompts x {args.repeats} rounds, {args.new} greedy tokens, "
          f"{args.threads} threads; {machine()}, {cpu_capability()}")  # fmt: skip
    head = f"{'plan':48s} {'pred x':>7s} {'ours x':>7s} {'err':>7s} {'pred tok/rd':>11s} {'ours':>6s} {'pred ms':>8s}"
    head += f" {'server ms':>9s} {'err':>7s} {'srv tok/rd':>10s}" if args.engine == "llamacpp" else ""
    print(head)
    rows = []
    for label, flags in configs.items():
        if label == "no speculation" or " [" not in label:
            continue
        spec, width = label.rsplit(" [", 1)
        plans = [p for v in validations for p in v["plans"] if p["chain"][0] == spec and p["widths"] == [int(width[:-1])]]
        predicted = plans[0]["predicted_ms_per_token"]
        ours = statistics.median(p["measured_ms_per_token"] for p in plans)
        speedup = plans[0]["predicted_speedup"]
        ours_speedup = statistics.median(p["measured_speedup"] for p in plans)
        tokens = plans[0]["predicted_mean_accepted_length"]
        ours_tokens = statistics.median(p["measured_mean_accepted_length"] for p in plans)
        srv = server.get(label, [])
        srv_ms = workload_ms(srv, len(prompts)) if server_ran and srv else float("nan")
        rounds = _rounds(srv)
        drafted = sum(r["draft_n"] for r in srv) / rounds
        rows.append({"plan": label, "flags": flags, "predicted_ms": predicted, "ours_ms": ours, "predicted_speedup": speedup,
                     "ours_speedup": ours_speedup, "predicted_tokens_per_round": tokens,
                     "ours_tokens_per_round": ours_tokens, "server_ms": srv_ms, "server_drafted_per_round": drafted,
                     "server_tokens_per_round": sum(r["n"] for r in srv) / rounds, "server_rounds": rounds})  # fmt: skip
        srv_tokens = sum(r["n"] for r in srv) / rounds
        served = f" {srv_ms:9.2f} {srv_ms / predicted - 1:+7.1%} {srv_tokens:10.2f}" if server_ran else ""
        print(f"{label.replace(':engine=llamacpp', ''):48s} {speedup:7.2f} {ours_speedup:7.2f} {speedup / ours_speedup - 1:+7.1%} "
              f"{tokens:11.2f} {ours_tokens:6.2f} {predicted:8.2f}{served}")  # fmt: skip
    defaults = {c: workload_ms(server[c], len(prompts)) for c in configs if " [" not in c and c != "no speculation" and server.get(c)}
    for c, ms in defaults.items():
        print(f"llama-server {c}: {ms:.2f} ms/token")
    ours_ar = statistics.median(p["measured_ms_per_token"] for v in validations for p in v["plans"] if len(p["chain"]) == 1)
    print(
        f"our autoregressive decoding: {ours_ar:.2f} ms/token" + (f"; llama-server without speculation: {none:.2f}" if server_ran else "")
    )
    doc = {"engine": args.engine, "workload": held_out.name, "prompts": len(prompts), "new": args.new, "repeats": args.repeats, "threads": args.threads,
           "machine": machine(), "cpu_capability": cpu_capability(), "models": models, "profile": profile, "solve": solve,
           "server_none_ms": none, "server_defaults_ms": defaults, "ours_autoregressive_ms": ours_ar, "plans": rows, "validations": validations, "server_runs": server}  # fmt: skip
    (args.out_dir / f"confidence-{args.engine}.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
