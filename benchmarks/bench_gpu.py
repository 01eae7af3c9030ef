"""The GPU path, measured on a bare device in a few minutes: Qwen2.5 shapes with random weights.

A pass costs the same whatever the weights' values, so the real Qwen2.5 shapes (0.5B, 1.5B, 3B,
7B; bf16; configs as published by Qwen) are built with random weights on the device: no weights,
tokenizer or network needed. For each shape:

- the floor: the weights' bytes at the card's measured copy bandwidth;
- c(n), one pass of n new tokens after a context of L, for n = 1..64 and L = 256, 1024: the static
  engine with CUDA graphs, the static engine eager, transformers eager (``DynamicCache``);
- with ``--gaps``, c(1) and c(5) after a given host work before each pass (net of it);
- greedy decoding, ms/token over 128 new tokens: the static engine (graphs), the torch engine
  (transformers over a ``DynamicCache``), and with ``--compile`` transformers' own ``generate``
  over its static cache, which it compiles on CUDA (what users run instead);
- with ``--rounds`` (alone): a lookup plan's target passes against the target's alone, host and
  device time apart;

then the planner on the GPU: the curves above with the acceptance of the shipped Qwen2.5-Coder
profile (the same weights' acceptance, measured on a CPU: it does not depend on the machine), the
solver's pick for the 1.5B target and its predicted speed-up over autoregressive decoding and over
the best single drafter. Output: one JSON object per line on stdout and in ``--out``.

    python -m benchmarks.bench_gpu --device cuda --sizes q05,q15,q7 --out gpu.jsonl
    python -m benchmarks.bench_gpu --device cpu --sizes tiny --grid 1,4 --contexts 32   # the logic, on a CPU
    python -m benchmarks.bench_gpu --save /tmp/m --tokenizer TOKDIR --sizes q05,q15     # model folders for the CLI
    python -m benchmarks.bench_gpu --device cpu --count-ops --sizes q05,q15                # kernels a pass launches
    python -m benchmarks.bench_gpu --sizes q15 --grid 1 --contexts 256 --gaps 0,0.1,0.2,0.5  # passes after host work
    python -m benchmarks.bench_gpu --sizes q15 --rounds --repeats 5                         # a lookup plan's target passes

``--save`` writes each shape's random weights (bf16) as a model folder with a Qwen2.5 tokenizer's
files, so ``hsd-plan profile/solve/validate --engine static`` run on them like on any model: the
passes cost what the trained models' cost, and acceptance is measured on the text these weights
write (a random model's greedy text soon repeats one token, which a lookup drafts in full).

On a bare GPU machine: ``benchmarks/gpu/check.sh`` installs the project from carried wheels first
(``TESTS_S=0 PROFILE_S=0 COMPILE_S=0`` runs this benchmark alone).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

# (hidden, intermediate, layers, heads, kv heads, tied embeddings, output rows): Qwen2.5's configs
SHAPES = {
    "q05": (896, 4864, 24, 14, 2, True, 151936),
    "q15": (1536, 8960, 28, 12, 2, True, 151936),
    "q3": (2048, 11008, 36, 16, 2, True, 151936),
    "q7": (3584, 18944, 28, 28, 4, False, 152064),
    "tiny": (64, 128, 2, 4, 2, True, 1024),
}
# the shipped profile's models that each shape stands for
PROFILED = {"q05": "qwen2.5-coder-0.5b", "q15": "qwen2.5-coder-1.5b"}
PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "amd-epyc-avx512bf16-qwen2.5-coder-humaneval.json"


def emit(record: dict[str, Any], out: Any) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()


def build(shape: str, device: torch.device, dtype: torch.dtype) -> Any:
    """A random-weight Qwen2 causal LM of ``shape``, made on ``device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    h, inter, layers, heads, kv, tied, rows = SHAPES[shape]
    cfg = Qwen2Config(
        hidden_size=h, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
        tie_word_embeddings=tied, vocab_size=rows, rope_theta=1e6, max_position_embeddings=32768, rms_norm_eps=1e-6,
        use_sliding_window=False,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM(cfg).to(dtype).eval()


def save(shape: str, root: Path, tokenizer: Path, device: torch.device) -> dict[str, Any]:
    """Write a random-weight model of ``shape`` to ``root/shape`` (bf16 safetensors, config and the
    tokenizer files of ``tokenizer``): a folder any model spec can name."""
    import shutil

    t0 = time.perf_counter()
    model = build(shape, device, torch.bfloat16)
    model.config.bos_token_id, model.config.eos_token_id = 151643, 151645  # Qwen2.5's
    folder = root / shape
    model.save_pretrained(folder)
    for f in tokenizer.iterdir():
        if f.is_file() and (f.name.startswith("tokenizer") or f.suffix == ".jinja"):
            shutil.copy(f, folder / f.name)
    params = sum(p.numel() for p in model.parameters())
    return {"saved": shape, "folder": str(folder), "params": params, "seconds": round(time.perf_counter() - t0, 1)}


# operators that launch no kernel of their own (views, allocation, dtype bookkeeping)
NO_KERNEL = {
    "aten::view", "aten::reshape", "aten::transpose", "aten::expand", "aten::slice", "aten::select", "aten::unsqueeze",
    "aten::squeeze", "aten::permute", "aten::as_strided", "aten::t", "aten::_unsafe_view", "aten::detach", "aten::alias",
    "aten::empty", "aten::empty_strided", "aten::resize_", "aten::lift_fresh", "aten::result_type",
}  # fmt: skip


def ops_per_pass(shape: str, device: torch.device) -> dict[str, Any]:
    """The compute operators one static-engine pass of 1 token runs, eagerly on ``device``: the
    top-level aten calls that are not views, each at least one kernel when captured on a GPU."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    from hsd_runtime.models.static_engine import StaticModel

    model = build(shape, device, torch.bfloat16)
    static = StaticModel(model, shape, n_ctx=512, graphs=False)
    cache = static.open_cache(static.n_vocab, 300)
    cache.feed(list(range(10, 266)), 0, 1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        cache.feed([5], 256, 1)
    ops: collections.Counter[str] = collections.Counter()
    for e in prof.events():
        parent = e.cpu_parent
        if e.name.startswith("aten::") and e.name not in NO_KERNEL and (parent is None or not parent.name.startswith("aten::")):
            if e.name == "aten::to" and not e.cpu_children:
                continue  # a cast to the dtype a tensor has: no copy
            ops[e.name] += 1
    total = sum(ops.values())
    return {"shape": shape, "layers": static.num_layers, "ops_per_pass": total, "per_layer": round(total / static.num_layers, 1),
            "most": dict(ops.most_common(8))}  # fmt: skip


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bandwidth_gbs(device: torch.device) -> float:
    """The median copy bandwidth (bytes read + written per second) over 256 MiB buffers."""
    src = torch.empty(128 << 20, dtype=torch.float16, device=device)
    dst = torch.empty_like(src)
    samples = []
    for _ in range(12):
        sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(device)
        samples.append(2 * src.numel() * 2 / (time.perf_counter() - t0) / 1e9)
    return statistics.median(samples[2:])


def median_ms(fn: Any, device: torch.device, repeats: int) -> float:
    fn()  # warm-up (a graph's capture, a kernel's first launch)
    samples = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append(1000 * (time.perf_counter() - t0))
    return statistics.median(samples)


def gap_curve(model: Any, gaps: list[float], context: int, repeats: int, ns: tuple[int, ...] = (1, 5)) -> dict[str, dict[int, float]]:
    """c(n) of the static engine when each pass follows ``g`` ms of host work (a busy wait, as a
    lookup's drafting or a round's bookkeeping is), net of that work: whether a GPU left idle
    between passes runs the next one slower than passes back to back."""
    from hsd_runtime.models.static_engine import StaticModel

    static = StaticModel(model, "bench", n_ctx=context + max(ns) + 16)
    gen = torch.Generator().manual_seed(0)
    cache = static.open_cache(static.n_vocab, context + max(ns) + 1)
    cache.feed(torch.randint(0, 1000, (context,), generator=gen).tolist(), 0, 1)
    out: dict[str, dict[int, float]] = {}
    for gap in gaps:
        out[str(gap)] = {}
        for n in ns:
            new = torch.randint(0, 1000, (n,), generator=gen).tolist()

            def one(new: list[int] = new, n: int = n, gap: float = gap) -> None:
                end = time.perf_counter() + gap / 1000
                while time.perf_counter() < end:
                    pass
                cache.feed(new, context, n)

            out[str(gap)][n] = round(median_ms(one, static.device, repeats) - gap, 3)
    return out


def static_curve(
    model: Any, graphs: bool, grid: list[int], contexts: list[int], repeats: int, attention: str = "efficient"
) -> dict[int, dict[int, float]]:
    """c(n) of the static engine: a cache holding ``L`` random tokens, then passes of n at L (rolled back after each)."""
    from hsd_runtime.models.static_engine import StaticModel

    static = StaticModel(model, "bench", n_ctx=max(contexts) + max(grid) + 16, graphs=graphs, attention=attention)
    gen = torch.Generator().manual_seed(0)
    curve: dict[int, dict[int, float]] = {}
    for ctx in contexts:
        cache = static.open_cache(static.n_vocab, ctx + max(grid) + 1)
        cache.feed(torch.randint(0, 1000, (ctx,), generator=gen).tolist(), 0, 1)
        curve[ctx] = {}
        for n in grid:
            new = torch.randint(0, 1000, (n,), generator=gen).tolist()
            curve[ctx][n] = median_ms(lambda new=new, ctx=ctx: cache.feed(new, ctx, n), static.device, repeats)
    return curve


def dynamic_curve(model: Any, grid: list[int], contexts: list[int], repeats: int) -> dict[int, dict[int, float]]:
    """c(n) of transformers eager over a ``DynamicCache`` (the torch engine's pass)."""
    from transformers import DynamicCache

    from hsd_runtime.models.output import cache_argument

    device = next(model.parameters()).device
    curve: dict[int, dict[int, float]] = {}
    for ctx in contexts:
        cache = DynamicCache()
        with torch.inference_mode():
            model(
                input_ids=torch.randint(0, 1000, (1, ctx), device=device), **cache_argument(model, cache), use_cache=True, logits_to_keep=1
            )
        curve[ctx] = {}
        for n in grid:
            ids = torch.randint(0, 1000, (1, n), device=device)

            def one(ids: torch.Tensor = ids, n: int = n) -> None:
                with torch.inference_mode():
                    model(input_ids=ids, **cache_argument(model, cache), use_cache=True, logits_to_keep=n)
                cache.crop(-n)

            curve[ctx][n] = median_ms(one, device, repeats)
    return curve


def greedy_ms(members: list[Any], new: int, prompt_len: int = 64) -> float:
    """ms per token of greedy decoding of ``new`` tokens after a random prompt (after one warm-up run)."""
    from hsd_runtime import Hierarchy

    prompt = torch.randint(0, 1000, (prompt_len,), generator=torch.Generator().manual_seed(1)).tolist()
    hierarchy = Hierarchy(members, [])
    hierarchy.generate(prompt, new)
    t0 = time.perf_counter()
    result = hierarchy.generate(prompt, new)
    return 1000 * (time.perf_counter() - t0) / max(1, len(result.tokens))


def compiled_greedy_ms(model: Any, new: int, prompt_len: int = 64) -> dict[str, float]:
    """transformers' own greedy ``generate`` over its static cache, as its docs advise for speed: on
    CUDA, ``generate`` compiles the model's forward itself (``torch.compile``, reduce-overhead:
    CUDA graphs); ms/token of the third run (the first compiles, the second captures), beside the
    same ``generate`` with compilation turned off."""
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    ids = torch.randint(0, 1000, (1, prompt_len), device=device)
    out: dict[str, float] = {}
    for label, off in (("compiled", False), ("uncompiled", True)):
        config = GenerationConfig(
            max_new_tokens=new, min_new_tokens=new, do_sample=False, cache_implementation="static", pad_token_id=0, disable_compile=off
        )
        for _ in range(2):
            model.generate(ids, generation_config=config)
        sync(device)
        t0 = time.perf_counter()
        model.generate(ids, generation_config=config)
        sync(device)
        out[label] = round(1000 * (time.perf_counter() - t0) / new, 3)
    return out


class _PassClock:
    """Times every pass of a static model's caches while installed: its shape (tokens, every row
    or the last), its wall time on the host and its time on the device (CUDA events around it)."""

    def __init__(self) -> None:
        from hsd_runtime.models.static_engine import StaticCache

        self.cls, self.original = StaticCache, StaticCache._pass
        self.passes: list[tuple[int, bool, float, Any]] = []
        clock = self

        def timed(cache: Any, tokens: list[int], positions: list[int], slots: list[int], blocked: Any, every_row: bool) -> Any:
            events = None
            if cache.device.type == "cuda":
                events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            if events:
                events[0].record()
            out = clock.original(cache, tokens, positions, slots, blocked, every_row)
            if events:
                events[1].record()
                events[1].synchronize()
            clock.passes.append((len(tokens), every_row, time.perf_counter() - t0, events))
            return out

        StaticCache._pass = timed  # type: ignore[method-assign]

    def take(self) -> list[tuple[int, bool, float, float]]:
        """The passes since the last call: (tokens, every row, host ms, device ms; the host's off CUDA)."""
        got = [(n, every, 1000 * wall, ev[0].elapsed_time(ev[1]) if ev else 1000 * wall) for n, every, wall, ev in self.passes]
        self.passes = []
        return got

    def remove(self) -> None:
        self.cls._pass = self.original  # type: ignore[method-assign]


def round_costs(shape: str, device: torch.device, new: int, repeats: int, cells: int = 512, prompt_len: int = 160) -> dict[str, Any]:
    """What a lookup plan's target does that its passes alone do not: greedy decoding of ``shape``
    on the static engine (CUDA graphs, bf16) alone, under ``ngram[4]``, and under the same lookup
    made to propose nothing (its host work, then one-token passes), the three in turn over the
    same prompts (random tokens, and a block repeated, on which the lookup drafts), their order
    rotated each repeat, on caches of ``cells`` positions (512: what a validation of 128 new tokens
    after HumanEval's prompts opens). Per plan: the target's one-token passes, median host and device ms, its
    verification passes, the lookup's ms a round, ms/token of the decode (the prefill left out)."""
    from hsd_runtime import Hierarchy
    from hsd_runtime.decoding.cache import CachePool
    from hsd_runtime.decoding.drafters import Proposal
    from hsd_runtime.decoding.ngram import NgramDrafter
    from hsd_runtime.models.static_engine import StaticModel

    class Silent(NgramDrafter):
        """The lookup's work each round, then nothing proposed."""

        def propose(self, ctx: Any, n: int) -> list[Proposal | None]:
            return [None if p is None else Proposal([]) for p in super().propose(ctx, n)]

    model = build(shape, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    static = StaticModel(model, shape, n_ctx=cells)
    gen = torch.Generator().manual_seed(2)
    vocab = min(150000, SHAPES[shape][6])
    block = torch.randint(0, vocab, (prompt_len // 5,), generator=gen).tolist()
    prompts = {"random": torch.randint(0, vocab, (prompt_len,), generator=gen).tolist(), "repeated": block * 5}
    pool = CachePool(cells)
    plans = {
        "alone": Hierarchy([static], [], [shape], caches=pool),
        "ngram[4]": Hierarchy([NgramDrafter(n=3, name="ngram"), static], [4], ["ngram", shape], caches=pool),
        "silent ngram[4]": Hierarchy([Silent(n=3, name="silent"), static], [4], ["silent", shape], caches=pool),
    }
    for h in plans.values():  # captures every graph a plan replays
        for p in prompts.values():
            h.generate(p, new)
    clock = _PassClock()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    order = list(plans)
    try:
        for r in range(repeats):
            for label in order[r % 3 :] + order[: r % 3]:
                for kind, prompt in prompts.items():
                    clock.take()
                    result = plans[label].generate(prompt, new)
                    passes = clock.take()[1:]  # the prefill's pass left out
                    lookup = result.levels[0] if label != "alone" else None
                    runs.setdefault((label, kind), []).append(
                        {"passes": passes, "ms_per_token": 1000 * result.decode_s / len(result.tokens), "rounds": result.target_rounds,
                         "lookup_ms": 0.0 if lookup is None else 1000 * lookup.time_s / max(1, lookup.forward_passes)}
                    )  # fmt: skip
    finally:
        clock.remove()
    out: dict[str, Any] = {"rounds": shape, "cells": cells, "new_tokens": new, "repeats": repeats}
    for (label, kind), got in runs.items():
        ones = [p for run in got for p in run["passes"] if p[0] == 1]
        wide = [p for run in got for p in run["passes"] if p[0] > 1]
        out[f"{label} / {kind}"] = {
            "one_token_passes": len(ones),
            "one_token_host_ms": round(statistics.median(p[2] for p in ones), 3) if ones else None,
            "one_token_device_ms": round(statistics.median(p[3] for p in ones), 3) if ones else None,
            "one_token_host_mean_ms": round(statistics.fmean(p[2] for p in ones), 3) if ones else None,
            "one_token_every_row": sum(p[1] for p in ones),
            "wide_passes": len(wide),
            "wide_host_ms": round(statistics.median(p[2] for p in wide), 3) if wide else None,
            "wide_device_ms": round(statistics.median(p[3] for p in wide), 3) if wide else None,
            "lookup_ms_per_round": round(statistics.median(run["lookup_ms"] for run in got), 3),
            "rounds": statistics.median(run["rounds"] for run in got),
            "ms_per_token": round(statistics.median(run["ms_per_token"] for run in got), 3),
        }
    return out


def plan_on_gpu(curves: dict[str, dict[int, dict[int, float]]], target: str) -> dict[str, Any]:
    """The solver's pick with these GPU curves and the shipped profile's acceptance."""
    from hsd_planner.plan import Profile, SolveConfig, solve
    from hsd_planner.store import open_memory_db
    from hsd_planner.store.exchange import import_document, read_document
    from hsd_planner.store.profiles import load_profile

    db = open_memory_db()
    import_document(db, read_document(PROFILE, "profile"))
    cpu, _source = load_profile(db, target=PROFILED[target])
    names = {name: shape for shape, name in PROFILED.items() if shape in curves}
    models = []
    for m in cpu.models:
        if m.name in names:
            models.append({"name": m.name, "latency": curves[names[m.name]]})
        elif m.lookup:
            models.append({"name": m.name, "lookup": True, "latency": m.latency[1].points})  # host work: the CPU's figure
    kept = {m["name"] for m in models}
    acceptance = [a.model_dump() for a in cpu.acceptance if a.drafter in kept and a.verifier in kept]
    profile = Profile(target=PROFILED[target], models=models, acceptance=acceptance)
    solution = solve(profile, SolveConfig(t_max=8))
    single = solution.best_single
    return {
        "target": PROFILED[target],
        "pick": solution.best.label,
        "predicted_speedup": round(solution.best.prediction.speedup, 3),
        "best_single": None if single is None else single.label,
        "pick_over_best_single": None
        if single is None
        else round(single.prediction.ms_per_token / solution.best.prediction.ms_per_token, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", default="q05,q15,q7")
    ap.add_argument("--grid", default="1,2,3,4,5,6,8,12,16,24,32,48,64")
    ap.add_argument("--contexts", default="256,1024")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument(
        "--attention",
        default="cudnn",
        help="SDPA backends of the static engine's passes to time, the first one in full (cudnn: the engine's in bf16)",
    )
    ap.add_argument(
        "--compile", default="", help="shapes to time with transformers' generate over its static cache, compiled (slow to compile)"
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--save", type=Path, help="write each shape as a random-weight model folder under this folder, then stop")
    ap.add_argument("--tokenizer", type=Path, help="with --save: a folder holding a Qwen2.5 tokenizer's files")
    ap.add_argument("--gaps", default="", help="ms of host work before each pass to time c(1) and c(5) after (e.g. 0,0.1,0.2,0.5)")
    ap.add_argument("--count-ops", action="store_true", help="count the compute operators of one pass of each shape, then stop")
    ap.add_argument("--rounds", action="store_true", help="time a lookup plan's target passes against the target's alone, then stop")
    ap.add_argument("--cells", default="512", help="with --rounds: the positions of the plans' caches (one run each)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.rounds:
        out = args.out.open("a") if args.out else None
        for shape in args.sizes.split(","):
            for cells in args.cells.split(","):
                emit(round_costs(shape, device, args.new_tokens, args.repeats, int(cells)), out)
        return 0
    if args.count_ops:
        for shape in args.sizes.split(","):
            emit(ops_per_pass(shape, device), None)
        return 0
    if args.save is not None:
        if args.tokenizer is None:
            ap.error("--save needs --tokenizer")
        for shape in args.sizes.split(","):
            emit(save(shape, args.save, args.tokenizer, device), None)
        return 0
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    grid = [int(x) for x in args.grid.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    out = args.out.open("a") if args.out else None
    info: dict[str, Any] = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        info |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
    info["bandwidth_gbs"] = round(bandwidth_gbs(device), 1)
    emit(info, out)
    from hsd_runtime.models.static_engine import StaticModel

    graphs = device.type == "cuda"
    static_curves: dict[str, dict[int, dict[int, float]]] = {}
    for shape in args.sizes.split(","):
        t0 = time.perf_counter()
        model = build(shape, device, dtype)
        params = sum(p.numel() for p in model.parameters())
        floor = params * model.dtype.itemsize / (info["bandwidth_gbs"] * 1e9) * 1000
        rec: dict[str, Any] = {"shape": shape, "params": params, "floor_ms": round(floor, 3), "built_s": round(time.perf_counter() - t0, 1)}
        first = args.attention.split(",")[0]
        static_curves[shape] = static_curve(model, graphs, grid, contexts, args.repeats, first)
        rec["static"] = static_curves[shape]
        if args.gaps:
            rec["after_gap"] = gap_curve(model, [float(g) for g in args.gaps.split(",")], contexts[0], args.repeats)
        few = [n for n in grid if n in (1, 8, 32)] or grid[:1]
        if graphs:
            rec["static_eager"] = static_curve(model, False, few, contexts[:1], 5)
        rec["transformers_eager"] = dynamic_curve(model, few, contexts[:1], 5)
        c1 = static_curves[shape][contexts[0]][grid[0]]
        rec["c1_over_floor"] = round(c1 / floor, 2)
        if 8 in grid:
            rec["c8_over_c1"] = round(static_curves[shape][contexts[0]][8] / c1, 3)
        rec["greedy_static_ms"] = round(greedy_ms([StaticModel(model, shape, n_ctx=1024, attention=first)], args.new_tokens), 3)
        for backend in args.attention.split(",")[1:] if graphs else []:
            try:
                rec[f"static_{backend}"] = static_curve(model, graphs, few, contexts, 5, backend)
                one = StaticModel(model, shape, n_ctx=1024, attention=backend)
                rec[f"greedy_static_{backend}_ms"] = round(greedy_ms([one], args.new_tokens), 3)
            except Exception as exc:  # a backend that refuses this shape: say so, time the others
                rec[f"static_{backend}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        rec["greedy_torch_ms"] = round(greedy_ms([model], min(args.new_tokens, 32)), 3)
        if shape in args.compile.split(","):
            try:
                timed = compiled_greedy_ms(model, args.new_tokens)
                rec["greedy_compiled_transformers_ms"] = timed["compiled"]
                rec["greedy_uncompiled_static_cache_ms"] = timed["uncompiled"]
            except Exception as exc:  # say how it failed, keep the shape's other figures
                rec["greedy_compiled_transformers_ms"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        rec["total_s"] = round(time.perf_counter() - t0, 1)
        emit(rec, out)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if {"q05", "q15"} <= static_curves.keys():
        emit({"plan": plan_on_gpu(static_curves, "q15")}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
