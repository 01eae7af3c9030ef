"""Where the demo's memory goes: the models' own bytes against what the process holds.

Loads the demo's candidates as the profiler does, with one :class:`ModelLoader` and parents
before their quantized copies (so views and copies share their parents' tensors as in the demo) and prints, after each, the seconds it took,
the process's resident memory split into anonymous (the process's own) and file-backed (pages of
memory-mapped checkpoints, which the kernel can drop and read again), the peak resident memory so
far; at the end, the bytes the loaded models hold (every distinct parameter, buffer and packed
weight, counted once). The peak counts file pages too; run it in a memory-limited cgroup to check that a
machine of that size runs the demo.

    python -m benchmarks.bench_memory --dtype fp32
    python -m benchmarks.bench_memory --dtype bf16
"""

from __future__ import annotations

import argparse
import time

from torch import nn

from benchmarks.common import machine
from hsd_planner.demo import FAMILIES
from hsd_runtime import Int8Linear, ModelLoader, PackedLinear, parse_spec
from hsd_runtime.models.device import cpu_capability


def _status_mb() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and VmHWM of this process, in MiB (Linux)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024
    return out


def model_bytes(models: list[nn.Module]) -> int:
    """Bytes the ``models`` hold, shared weights counted once: every distinct storage of their
    parameters, buffers and packed weights, plus one byte per weight of each int8 layer (read from
    its shape, since unpacking it would allocate a copy)."""
    storages: dict[int, int] = {}
    int8: dict[int, int] = {}
    for model in models:
        held = [*model.parameters(), *model.buffers()]
        for module in model.modules():
            if isinstance(module, PackedLinear):
                held += [module._packed] + ([module.bias] if module.bias is not None else [])
            elif isinstance(module, Int8Linear):
                int8[id(module)] = module.in_features * module.out_features
        for t in held:
            if t.is_mkldnn:  # a packed weight: an opaque oneDNN tensor with no storage to ask
                storages[id(t)] = t.numel() * t.element_size()
            else:
                storage = t.untyped_storage()
                storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
    return sum(storages.values()) + sum(int8.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="qwen", choices=sorted(FAMILIES))
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--no-prepack", action="store_true", help="torch's plain kernels instead of prepacked weights")
    args = parser.parse_args()
    print(f"# {machine()}; CPU capability {cpu_capability()}; {args.dtype}, {'plain' if args.no_prepack else 'prepacked'} kernels")
    loader = ModelLoader("cpu", args.dtype, prepack=not args.no_prepack)
    print(f"start: {_status_mb()}")
    loaded: list[nn.Module] = []
    print("| model | load s | resident MiB | anonymous | file-backed | peak so far |")
    print("|---|---|---|---|---|---|")
    specs = [parse_spec(s) for s in FAMILIES[args.family].models.split(",")]
    for spec in sorted(specs, key=lambda s: s.quant is not None):  # parents first, as the profiler loads them
        if spec.is_ngram:
            continue
        t0 = time.perf_counter()
        loaded.append(loader.load(spec).model)
        seconds = time.perf_counter() - t0
        mb = _status_mb()
        print(f"| {spec} | {seconds:.1f} | {mb['VmRSS']} | {mb['RssAnon']} | {mb['RssFile']} | {mb['VmHWM']} |", flush=True)
    # every candidate's parent is a candidate too, so the loaded models hold all the loader holds
    print(f"models' own bytes: {model_bytes(loaded) // 2**20} MiB")


if __name__ == "__main__":
    main()
