"""From model specs to a runnable hierarchy: the one place that knows every kind of drafter.

A spec becomes a member of a chain here - a torch model as the loader made it (full, trimmed,
int8, a trained student), a llama.cpp GGUF model, the n-gram lookup (``ngram``), block-draft
heads on the level above (``bpd:``) or a drafter steered by the level above (``steer=``) - and
:func:`build_hierarchy` hands the members to the executor, :class:`~hsd_runtime.decoding.hierarchy.Hierarchy`,
which decodes one prompt or a batch of them in lockstep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .decoding.cache import CachePool
from .decoding.hierarchy import Hierarchy, Member
from .decoding.ngram import NgramDrafter
from .learned.bpd import check_host, load_bpd
from .learned.steering import check_verifier, steer_model
from .models.loading import ModelLoader, check_same_tokenizer
from .terms.errors import ChainError
from .terms.shape import Width
from .terms.spec import ModelSpec, parse_spec

__all__ = ["build_hierarchy"]


def build_hierarchy(
    chain: Sequence[str | ModelSpec], widths: Sequence[Width], loader: ModelLoader, caches: CachePool | None = None
) -> tuple[Hierarchy, Any]:
    """Load ``chain`` (smallest first, target last) and build its hierarchy. ``caches``: a pool
    whose caches the hierarchy shares with others built on it (see :class:`~hsd_runtime.decoding.cache.CachePool`).

    Returns the hierarchy and the target's tokenizer. Raises if the models do not share a
    tokenizer, a spec cannot be loaded, or the runtime asked for cannot run one of its members.
    """
    specs = [parse_spec(s) if isinstance(s, str) else s for s in chain]
    if not specs or not specs[-1].is_model:
        raise ChainError("the last model of a chain is the target and cannot be ngram or bpd")
    loaded = [None if m is None else steer_model(m) for m in loader.load_chain(specs)]
    models = [m for m in loaded if m is not None]
    width = check_same_tokenizer(models)
    members: list[Member] = []
    for i, (s, m) in enumerate(zip(specs, loaded)):
        above = specs[i + 1] if i + 1 < len(specs) else None  # the level that verifies this one
        if s.is_bpd:
            drafter = load_bpd(s, loader, models)
            check_host(drafter, s, above)
            members.append(drafter)
        elif m is None:
            members.append(NgramDrafter(n=s.ngram_order, name=str(s), min_size=s.ngram_min))
        else:
            if s.steer is not None:
                steered: Any = m.model  # steer_model gave it its steerer
                check_verifier(s, steered.steerer, above)
            members.append(m.model)
    target, names = models[-1], [str(s) for s in specs]
    return Hierarchy(members, widths, names, width, target.eos_token_ids, caches), target.tokenizer
