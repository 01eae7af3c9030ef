"""Latency measurements without storage: one cached forward pass, one n-gram proposal.

Each returns (median, p10, p90) in ms over ``repeats`` timed runs after a warm-up.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from hsd_runtime import ngram_lookup

__all__ = ["time_forward", "time_ngram"]


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
