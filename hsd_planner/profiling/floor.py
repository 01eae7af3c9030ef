"""The machine's floor: what a forward pass of n tokens cannot beat, from two measured rates.

A decoder pass must read every weight once (a head included) plus the KV cache it attends over,
and must do ``2 x weights x n`` multiply-adds plus attention. :func:`probe_floor` measures the
two rates that bound this - streaming read bandwidth (a reduction over a buffer far larger than any
cache) and matrix throughput (one GEMM through the kernels the models run) - and
:func:`pass_floor_ms` turns a model's byte and FLOP counts into
``floor(n) = max(bytes / bandwidth, flops / peak)``. A measured ``c(n) / floor(n)`` says how
far the runtime is from the machine: 1.0 is streaming the weights at the probe's rate.

The counts are arithmetic over module shapes (:func:`pass_traffic`), so they are exact and
repeatable; the rates are medians of repeated timings with their p90/p10 spread. Int8 layers count
one byte per weight and use the fp32 peak (their GEMM is bandwidth bound at decoding widths). The
KV term counts every cached position of every layer (sliding windows not subtracted); at decoding
contexts it is a few percent of the weights.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from torch import nn

from hsd_runtime import Int8Linear, PackedLinear, can_prepack, resolve_device

__all__ = ["FloorProbe", "PassTraffic", "pass_floor_ms", "pass_traffic", "probe_floor"]

PROBE_MIB = 256  # the bandwidth buffer: far above any last-level cache
_GEMM = (256, 4096, 4096)  # M x K x N of the throughput probe


@dataclass(frozen=True)
class FloorProbe:
    """The machine's measured rates (medians) and their spread (p90 / p10)."""

    bandwidth_gbs: float  # streaming read, 1e9 bytes per second
    bandwidth_spread: float
    peak_gflops: dict[str, float] = field(default_factory=dict)  # dtype -> 1e9 FLOP per second
    peak_spread: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PassTraffic:
    """What one pass of a model must move and compute, per token and per cached position."""

    weight_bytes: int  # every weight read once per pass (head included, embedding rows apart)
    row_bytes: int  # one embedding row, read per new token
    linear_weights: int  # multiply-adds per new token through the Linear layers
    kv_bytes_per_position: int  # K and V of every layer for one cached position
    attn_flops_per_pair: int  # FLOPs per (new token, attended position) over all layers
    dtype: str  # the compute dtype whose peak bounds the FLOPs


def _timed(fn, repeats: int, sync) -> list[float]:
    fn()  # warm-up: page faults, kernel selection
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def _spread(times: list[float]) -> float:
    p10, p90 = np.percentile(times, [10, 90])
    return float(p90 / p10)


def probe_floor(device: str | torch.device, dtypes: list[str], kernels: str = "plain", repeats: int = 5) -> FloorProbe:
    """Measure streaming bandwidth and GEMM throughput in each of ``dtypes`` (``fp32``/``bf16``/``fp16``).

    The GEMM runs through the kernels of ``kernels`` (``prepacked``: a weight packed once by
    oneDNN, as the models run, for each dtype this CPU can pack; ``plain``: torch's default).
    Under a second on a CPU.
    """
    from hsd_runtime.models.device import resolve_dtype

    dev = resolve_device(str(device))
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    buf = torch.ones(PROBE_MIB * 2**20 // 4, dtype=torch.float32, device=dev)  # [PROBE_MIB MiB / 4] fp32
    times = _timed(buf.sum, repeats, sync)
    bandwidth = buf.numel() * 4 / statistics.median(times) / 1e9
    band_spread = _spread(times)
    del buf
    peaks, spreads = {}, {}
    m, k, n = _GEMM
    gen = torch.Generator().manual_seed(0)
    for name in dict.fromkeys(dtypes):
        dt = resolve_dtype(name)
        a = torch.randn(m, k, generator=gen).to(dev, dt)  # [M, K]
        w = nn.Linear(k, n, bias=False).to(dev, dt)  # [N, K]
        # the models' own choice: a dtype this CPU cannot pack runs plain in them, so it does here
        layer: nn.Module = PackedLinear(w) if kernels == "prepacked" and can_prepack(dev, dt) is None else w
        with torch.inference_mode():
            times = _timed(partial(layer, a), repeats, sync)
        peaks[name] = 2 * m * k * n / statistics.median(times) / 1e9
        spreads[name] = _spread(times)
    return FloorProbe(bandwidth, band_spread, peaks, spreads)


def pass_traffic(model: nn.Module) -> PassTraffic:
    """Count the bytes and FLOPs of one pass of ``model`` (a transformers causal LM or a view)."""
    first = next(model.parameters())
    elem = first.element_size()
    weight_bytes = row_bytes = linear = 0
    int8 = False
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, PackedLinear)):
            w = mod.in_features * mod.out_features
            weight_bytes, linear = weight_bytes + w * elem, linear + w
        elif isinstance(mod, Int8Linear):
            w = mod.in_features * mod.out_features
            weight_bytes, linear, int8 = weight_bytes + w, linear + w, True  # one byte per weight
        elif isinstance(mod, nn.Embedding):
            row_bytes += mod.embedding_dim * elem
        else:  # norms and other leaves: their own tensors only (children are visited themselves)
            weight_bytes += sum(p.numel() * p.element_size() for p in mod.parameters(recurse=False))
    cfg = model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layers = cfg.num_hidden_layers
    dtype = "fp32" if int8 or first.dtype == torch.float32 else {torch.bfloat16: "bf16", torch.float16: "fp16"}[first.dtype]
    return PassTraffic(
        weight_bytes=weight_bytes,
        row_bytes=row_bytes,
        linear_weights=linear,
        kv_bytes_per_position=layers * 2 * kv_heads * head_dim * elem,
        attn_flops_per_pair=layers * 4 * heads * head_dim,  # scores and weighted sum, 2 FLOPs each
        dtype=dtype,
    )


def pass_floor_ms(traffic: PassTraffic, n: int, context_len: int, probe: FloorProbe) -> float:
    """The floor of a pass of ``n`` new tokens after ``context_len`` cached ones, in ms.

    >>> t = PassTraffic(10**9, 0, 5 * 10**8, 0, 0, "fp32")
    >>> pass_floor_ms(t, 1, 0, FloorProbe(50.0, 1.0, {"fp32": 100.0}))  # 1 GB at 50 GB/s
    20.0
    >>> pass_floor_ms(t, 1000, 0, FloorProbe(50.0, 1.0, {"fp32": 100.0}))  # 1e12 FLOP at 100 GFLOP/s
    10000.0
    """
    bytes_moved = traffic.weight_bytes + n * traffic.row_bytes + (context_len + n) * traffic.kv_bytes_per_position
    flops = 2 * n * traffic.linear_weights + n * (context_len + n) * traffic.attn_flops_per_pair
    peak = probe.peak_gflops.get(traffic.dtype)
    compute_s = flops / (peak * 1e9) if peak else 0.0
    return 1000.0 * max(bytes_moved / (probe.bandwidth_gbs * 1e9), compute_s)
