"""llama-server's lookups that keep state, a slot's first request against its later ones.

    python -m benchmarks.bench_server_state                       # ngram-map-k, ngram-map-k4v, ngram-mod; HumanEval
    python -m benchmarks.bench_server_state --lookups "ngram:rule=ngram-map-k@48" --max-prompts 12

``ngram:rule=ngram-mod``, ``ngram:rule=ngram-map-k`` and ``ngram:rule=ngram-map-k4v`` run on
hsd-plan's engines with a fresh state per generation, as llama-server's first request on a slot
runs them. The server keeps that state from one request to the next (``ngram-mod``: one table for
all requests; ``ngram-map-k``: each slot's key map, begun on the next prompt without being
emptied). For each lookup (``SPEC@K``, K its width) this runs, over the workload's held-out
prompts (greedy, Qwen2.5-Coder 1.5B Q4_K_M, the prompts as token ids):

1. a fresh llama-server per request, each request's drafted and accepted tokens checked against a
   replay of its own generation through the rule's state begun afresh (what the profile prices);
2. one llama-server for all requests, in order: what a server that has served others drafts,
   each request checked against a replay through one state carried from request to request.

Figures: tokens drafted, accepted and committed a round over the workload, each way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.bench_confidence import _held_out, _rounds, server_args
from benchmarks.bench_llamacpp import gguf_of
from benchmarks.common import machine
from hsd_planner.validation.llama_server import LlamaServer
from hsd_runtime import cpu_capability, parse_spec
from hsd_runtime.decoding.ngram import stateful_table
from hsd_runtime.decoding.ngram_map import KeyMap
from hsd_runtime.decoding.ngram_mod import ModTable
from hsd_runtime.terms.spec import ModelSpec
from tests.helpers import map_server_flags, replay_table

DEFAULT_LOOKUPS = "ngram:rule=ngram-map-k:n=4@16,ngram:rule=ngram-map-k4v:n=4@26,ngram:rule=ngram-mod:n=12:nmin=4@15"


def server_flags(spec: ModelSpec, k: int) -> list[str]:
    """llama-server's flags for the lookup ``spec`` drafting up to ``k`` tokens a round: the
    export's for ``ngram-mod``; the key-map types', which no export writes, spelled here."""
    if spec.map_rule:
        assert spec.ngram_rule is not None
        return map_server_flags(spec.ngram_rule, spec.ngram_order, k, spec.min_hits)
    flags = server_args(str(spec), None, k)
    assert flags is not None
    return flags


def _fresh(spec: ModelSpec, k: int) -> ModTable | KeyMap:
    assert spec.ngram_rule is not None
    return stateful_table(spec.ngram_rule, spec.ngram_order, k, spec.min_hits)


def _totals(rows: list[dict]) -> dict:
    made = sum(r["n"] for r in rows)
    return {
        "tokens": made,
        "drafted": sum(r["drafted"] for r in rows),
        "accepted": sum(r["accepted"] for r in rows),
        "per_round": made / _rounds(rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lookups", default=DEFAULT_LOOKUPS, help="SPEC@K,... (K: the width)")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--prompts", default="humaneval")
    ap.add_argument("--max-prompts", type=int, default=6, help="held-out prompts")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/out/server_state"))
    args = ap.parse_args()
    target = gguf_of(args.target, args.threads)
    held_out, prompts = _held_out(args, target)
    out = {}
    print(
        f"{held_out.name}: {len(prompts)} held-out prompts, {args.new} greedy tokens, {args.threads} threads; {machine()}, {cpu_capability()}"
    )
    print(
        f"{'lookup [k]':44s} {'fresh: drafted / accepted / tok a round':>40s} {'replayed':>9s} {'one server: drafted / accepted / tok a round':>45s} {'replayed':>9s}"
    )
    for item in args.lookups.split(","):
        name, _, width = item.rpartition("@")
        spec, k = parse_spec(name), int(width)
        flags = server_flags(spec, k)
        fresh, shared, replayed, carried_equal = [], [], 0, 0
        carried = _fresh(spec, k)
        for ids in prompts:
            with LlamaServer(target, flags, threads=args.threads, ctx=4096) as server:
                c = server.complete(ids, args.new)
            fresh.append({"n": c.predicted_n, "drafted": c.draft_n, "accepted": c.draft_n_accepted})
            replayed += replay_table(_fresh(spec, k), ids, c.tokens, k, spec.n_min, made=1)[1:] == (c.draft_n, c.draft_n_accepted)
        with LlamaServer(target, flags, threads=args.threads, ctx=4096) as server:
            for ids in prompts:
                c = server.complete(ids, args.new)
                shared.append({"n": c.predicted_n, "drafted": c.draft_n, "accepted": c.draft_n_accepted})
                carried_equal += replay_table(carried, ids, c.tokens, k, spec.n_min, made=1)[1:] == (c.draft_n, c.draft_n_accepted)
        f, s = _totals(fresh), _totals(shared)
        out[item] = {
            "flags": flags,
            "fresh": fresh,
            "one_server": shared,
            "replayed_equal": replayed,
            "carried_replay_equal": carried_equal,
            "fresh_total": f,
            "one_server_total": s,
        }
        print(f"{item:44s} {f['drafted']:>12d} / {f['accepted']:5d} / {f['per_round']:5.2f}      {replayed}/{len(prompts)}"
              f" {s['drafted']:>17d} / {s['accepted']:5d} / {s['per_round']:5.2f}      {carried_equal}/{len(prompts)}")  # fmt: skip
    args.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "workload": held_out.name,
        "prompts": len(prompts),
        "new": args.new,
        "machine": machine(),
        "cpu_capability": cpu_capability(),
        "lookups": out,
    }
    (args.out_dir / "server_state.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
