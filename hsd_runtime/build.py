"""From model specs to a runnable hierarchy: the one place that makes every kind of drafter.

A spec becomes a member of a chain here, one maker per kind of :mod:`hsd_runtime.terms.kinds`
(:data:`MEMBERS`) - a torch model as the loader made it (full, trimmed, int8, a trained student),
a llama.cpp GGUF model, the n-gram lookup (``ngram``), block-draft heads on the level above
(``bpd:``), a drafter steered by the level above (``steer=``) or a model that ends its drafts on
its confidence (``pmin=``) - and :func:`build_hierarchy`
hands the members to the executor, :class:`~hsd_runtime.decoding.hierarchy.Hierarchy`, which
decodes one prompt or a batch of them in lockstep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .decoding.cache import CachePool
from .decoding.confidence import Confident
from .decoding.hierarchy import Hierarchy, Member
from .decoding.ngram import NgramDrafter
from .learned.bpd import check_host, load_bpd
from .learned.steering import check_verifier, steer_model
from .models.loading import LoadedModel, ModelLoader, check_same_tokenizer
from .terms.errors import ChainError
from .terms.kinds import BLOCK_HEADS, CONFIDENT, MODEL, NGRAM_LOOKUP, STEERED, DrafterKind, kind_of
from .terms.shape import Width
from .terms.spec import ModelSpec, parse_spec

__all__ = ["MEMBERS", "build_hierarchy"]


def build_hierarchy(
    chain: Sequence[str | ModelSpec], widths: Sequence[Width], loader: ModelLoader, caches: CachePool | None = None
) -> tuple[Hierarchy, Any]:
    """Load ``chain`` (smallest first, target last) and build its hierarchy. ``caches``: a pool
    whose caches the hierarchy shares with others built on it (see :class:`~hsd_runtime.decoding.cache.CachePool`).

    Returns the hierarchy and the target's tokenizer. Raises if the models do not share a
    tokenizer, a spec cannot be loaded, or the runtime asked for cannot run one of its members.
    """
    specs = [parse_spec(s) if isinstance(s, str) else s for s in chain]
    if not specs or not kind_of(specs[-1]).own_model:
        raise ChainError("the last model of a chain is the target and cannot be ngram or bpd")
    loaded = [None if m is None else steer_model(m) for m in loader.load_chain(specs)]
    models = [m for m in loaded if m is not None]
    width = check_same_tokenizer(models)
    members: list[Member] = []
    for i, (s, m) in enumerate(zip(specs, loaded)):
        above = specs[i + 1] if i + 1 < len(specs) else None  # the level that verifies this one
        members.append(MEMBERS[kind_of(s)](_Site(s, m, above, loader, models)))
    target, names = models[-1], [str(s) for s in specs]
    return Hierarchy(members, widths, names, width, target.eos_token_ids, caches), target.tokenizer


class _Site(NamedTuple):
    """One spec of a chain being built, with what its member is made from."""

    spec: ModelSpec
    loaded: LoadedModel | None  # None for the kinds without a model of their own
    above: ModelSpec | None  # the level that verifies it (None for the target)
    loader: ModelLoader
    models: list[LoadedModel]  # the chain's loaded models, smallest first


def _model(site: _Site) -> Member:
    assert site.loaded is not None
    return site.loaded.model


def _ngram(site: _Site) -> Member:
    return NgramDrafter.of(site.spec)


def _heads(site: _Site) -> Member:
    drafter = load_bpd(site.spec, site.loader, site.models)
    check_host(drafter, site.spec, site.above)
    return drafter


def _steered(site: _Site) -> Member:
    assert site.loaded is not None
    steered: Any = site.loaded.model  # steer_model gave it its steerer
    check_verifier(site.spec, steered.steerer, site.above)
    return steered


def _confident(site: _Site) -> Member:
    assert site.loaded is not None and site.spec.p_min is not None
    return Confident(site.loaded.model, site.spec.p_min, site.spec.n_min)


# what the build makes of each kind of drafter (hsd_runtime.terms.kinds, each kind's ``member``)
MEMBERS: dict[DrafterKind, Callable[[_Site], Member]] = {
    MODEL: _model,
    NGRAM_LOOKUP: _ngram,
    BLOCK_HEADS: _heads,
    STEERED: _steered,
    CONFIDENT: _confident,
}
