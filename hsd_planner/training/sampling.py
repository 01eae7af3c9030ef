"""Batched sampling for the trainers' data: many sequences at once from any model.

:func:`sample_batched` draws from the target (offline data) or the student (on-policy data) over
one padded KV layout (prompts decoded in lockstep), each sequence from its own seeded generator, so a
sequence depends on its prompt and seed only. :func:`by_length` groups sequences of similar
length into the batches every padded pass here and in :mod:`.teacher` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from hsd_runtime import Hierarchy, LoadedModel, SamplingConfig

__all__ = ["by_length", "last_tokens", "sample_batched"]


def sample_batched(
    model: nn.Module,
    loaded: LoadedModel,
    prompts: Sequence[list[int]],
    max_new_tokens: int,
    sampling: SamplingConfig,
    seeds: Sequence[int],
    gen_batch: int,
    progress: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """Up to ``max_new_tokens`` tokens of ``model`` after each prompt (fewer when it emits an
    end-of-sequence token), ``gen_batch`` sequences per batched decoding; sequence i draws from a
    generator seeded with ``seeds[i]``, so its tokens do not depend on the batch it ran in.
    ``loaded`` gives the vocabulary width and end tokens (the target's, for a student);
    ``progress`` gets the number of sequences done after each batch."""
    alone = Hierarchy([model], [], logits_width=loaded.logits_width, eos_token_ids=loaded.eos_token_ids)
    out: list[list[int]] = [[] for _ in prompts]
    done = 0
    for batch in by_length([len(p) for p in prompts], gen_batch):
        result = alone.generate_batch([list(prompts[i]) for i in batch], max_new_tokens, sampling, seeds=[seeds[i] for i in batch])
        for i, tokens in zip(batch, result.sequences):
            out[i] = tokens
        done += len(batch)
        if progress is not None:
            progress(done)
    return out


def by_length(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices 0..n-1 in batches of ``size``, grouped by length (shortest first): a padded
    batch pays for its longest row, so a short prompt never waits on a 1,500-token one."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[start : start + size] for start in range(0, len(order), size)]


def last_tokens(prompt: list[int], n: int) -> list[int]:
    """The last ``n`` tokens of ``prompt`` (all of it when ``n`` is 0): what a drafter reads in training."""
    return prompt[-n:] if n else prompt
