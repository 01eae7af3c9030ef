"""Measurements without storage: forward-pass latency and per-position acceptance.

Acceptance of drafter i by verifier j is measured on the verifier's own continuation of a
prompt: both are teacher-forced over prompt + continuation in one pass each, and at every
continuation position t

- greedy: a_t = 1 when the drafter's argmax equals the verifier's argmax, else 0;
- sampling: a_t = sum_x min(p_j(x), q_i(x)) = 1 - TV(p_j, q_i), the probability that the
  verification rule accepts the drafted token.

The n-gram drafter proposes at most one token at each position (one-hot q): a_t is 1 when it
equals the verifier's argmax (greedy) or p_j of that token (sampling), and 0 when it proposes
nothing. Acceptance is bursty, so besides the mean the run-length distribution
P(G >= g) - the chance that g consecutive drafted tokens from a position are all accepted - is
kept as sums over start positions that combine exactly across prompts.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from hsd_runtime import SamplingConfig, ngram_lookup, warp

__all__ = [
    "G_MAX",
    "time_forward",
    "time_ngram",
    "teacher_forced_logits",
    "acceptance_from_logits",
    "ngram_acceptance",
    "run_length_sums",
]

G_MAX = 64


def _summary(samples_s: list[float]) -> tuple[float, float, float]:
    ms = np.asarray(samples_s) * 1000.0
    return float(np.median(ms)), float(np.percentile(ms, 10)), float(np.percentile(ms, 90))


@torch.inference_mode()
def time_forward(model: nn.Module, n: int, context_len: int, repeats: int, warmup: int = 2, seed: int = 0) -> tuple[float, float, float]:
    """(median, p10, p90) ms of one cached forward pass of ``n`` new tokens after ``context_len``.

    The context is cached once; each repeat feeds ``n`` tokens and crops them off again, so every
    pass sees the same cache length.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    vocab = model.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(seed)
    context = torch.randint(0, vocab, (1, context_len), generator=gen).to(device)
    new = torch.randint(0, vocab, (1, n), generator=gen).to(device)
    cache = DynamicCache()
    model(input_ids=context, past_key_values=cache, use_cache=True, logits_to_keep=1)
    samples = []
    for i in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=n)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            samples.append(time.perf_counter() - t0)
        cache.crop(-n)
    return _summary(samples)


def time_ngram(order: int, n: int, context_len: int, repeats: int, seed: int = 0) -> tuple[float, float, float]:
    """(median, p10, p90) ms of one n-gram proposal of up to ``n`` tokens over ``context_len`` tokens."""
    rng = np.random.default_rng(seed)
    context = rng.integers(0, 1000, context_len).tolist()
    samples = []
    for _ in range(repeats + 2):
        t0 = time.perf_counter()
        ngram_lookup(context, order, n)
        samples.append(time.perf_counter() - t0)
    return _summary(samples[2:])


@torch.inference_mode()
def teacher_forced_logits(model: nn.Module, prompt: list[int], continuation: list[int], width: int) -> torch.Tensor:
    """Logits ``[len(continuation), width]``; row t is the prediction for ``continuation[t]``."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + continuation], device=device)
    m = len(continuation)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=m + 1).logits[0, :m, :width]
    return logits.float()


def acceptance_from_logits(q_logits: torch.Tensor, p_logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Per-position acceptance ``[m]`` of a drafter (q) by a verifier (p), both ``[m, V]``."""
    if sampling.greedy:
        return (q_logits.argmax(-1) == p_logits.argmax(-1)).double().cpu()
    p, q = warp(p_logits, sampling), warp(q_logits, sampling)
    return torch.minimum(p, q).sum(-1).double().clamp(0.0, 1.0).cpu()


def ngram_acceptance(order: int, prompt: list[int], continuation: list[int], p_logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Per-position acceptance ``[m]`` of the n-gram drafter by a verifier with logits ``[m, V]``."""
    m = len(continuation)
    probs = None if sampling.greedy else warp(p_logits, sampling).cpu()
    argmax = p_logits.argmax(-1).tolist()
    out = torch.zeros(m, dtype=torch.float64)
    seq = list(prompt)
    for t in range(m):
        proposal = ngram_lookup(seq, order, 1)
        if proposal:
            x = proposal[0]
            out[t] = float(x == argmax[t]) if probs is None else float(probs[t, x])
        seq.append(continuation[t])
    return out


def run_length_sums(a: torch.Tensor, g_max: int = G_MAX) -> tuple[list[float], list[int]]:
    """Sums behind P(G >= g), g = 0..g_max, from per-position acceptance ``a`` ``[m]``.

    ``run_sum[g]`` = sum over start positions t (with t + g <= m) of prod(a[t : t + g]), and
    ``run_count[g]`` the number of such t; P(G >= g) = run_sum[g] / run_count[g].

    >>> run_length_sums(torch.tensor([1.0, 1.0, 0.0, 1.0]), g_max=3)
    ([4.0, 3.0, 1.0, 0.0], [4, 4, 3, 2])
    """
    m = len(a)
    run_sum, run_count = [float(m)], [m]
    prod = torch.ones(m, dtype=torch.float64)
    for g in range(1, g_max + 1):
        if g > m:
            run_sum.append(0.0)
            run_count.append(0)
            continue
        prod = prod[: m - g + 1] * a[g - 1 :].double()  # prod[t] = a[t] * ... * a[t + g - 1]
        run_sum.append(float(prod.sum()))
        run_count.append(m - g + 1)
    return run_sum, run_count

