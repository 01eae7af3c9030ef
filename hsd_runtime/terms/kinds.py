"""The kinds of drafter a model spec can name, in one table: what the build makes of each and what
profiling and planning need to know of it.

Every spec :func:`~hsd_runtime.terms.spec.parse_spec` accepts is of one kind (:func:`kind_of`):

- ``model``: a model of its own, whatever made it (a packaged alias, a directory such as a trained
  student, a ``.gguf`` file; ``layers=``, ``vocab=``, ``quant=``, ``weights=random`` views and copies);
- ``ngram``: the n-gram lookup over the context;
- ``bpd``: block-draft heads (``bpd:DIR``) read off the hidden state of the model directly above;
- ``steered``: a model steered (``steer=DIR``) by the taps of the verifier directly above;
- ``confident``: a model that ends its draft where its confidence falls below ``pmin=``.

:func:`hsd_runtime.build.build_hierarchy` makes one member per kind; the planner's profiler reads
how each is timed, whom it drafts for and how its acceptance is measured from here instead of
asking the spec. Torch-free, like the rest of :mod:`hsd_runtime.terms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .choices import ENGINES
from .spec import ModelSpec

__all__ = [
    "BLOCK_HEADS",
    "CONFIDENT",
    "KINDS",
    "MODEL",
    "NGRAM_LOOKUP",
    "STEERED",
    "DrafterKind",
    "Host",
    "Measure",
    "Timing",
    "kind_of",
]

# what a latency point of the kind times: one cached pass of its model over n new tokens, one
# n-gram lookup proposing up to n tokens, or one draft of up to n tokens from the heads
Timing = Literal["pass", "lookup", "heads"]
# how its acceptance under a verifier is measured (hsd_planner.profiling.acceptance): its own
# teacher-forced logits against the verifier's, the block the lookup proposes at each start, the
# heads on the verifier's hidden rows, the steered model's pass steered from stale taps, or its
# own logits with each start's draft ended at its first unconfident position
Measure = Literal["logits", "blocks", "heads", "steered", "confident"]
# the level directly above that the kind needs: the model whose hidden state its heads read, or
# the verifier whose taps steer it
Host = Literal["host", "verifier"]


@dataclass(frozen=True)
class DrafterKind:
    """One kind of drafter.

    ``member``: what the build makes of a spec of this kind. ``own_model``: the loader loads a
    model for it (``ModelLoader.load_chain`` gives None for the others). ``timing``: what its
    latency points time (:data:`Timing`); ``projection``: its curve also has an n = 0 point, the
    steering projection run once per proposal. ``host``: the level directly above it that it
    needs (None: it drafts under any level, and may draft a verifier's continuation while
    profiling). ``lookup``: it proposes its whole draft in one call (a draft of n tokens costs
    c(n), not n c(1)) and the planner prices chains of it only. ``verifies``: profiled as a
    verifier (its distribution is its own: a steered model's depends on the level above it).
    ``batched``: it runs b sequences in lockstep and has c(n, b) curves. ``engines``: the engines
    it runs on. ``acceptance``: how its acceptance is measured (:data:`Measure`). ``stops``: it
    ends a draft early on its own confidence, so a round may draft fewer tokens than its width
    (and the planner prices its passes by the measured draft lengths).
    """

    name: str
    member: str
    own_model: bool
    timing: Timing
    projection: bool
    host: Host | None
    lookup: bool
    verifies: bool
    batched: bool
    engines: tuple[str, ...]
    acceptance: Measure
    stops: bool = False

    @property
    def drafts_trees(self) -> bool:
        """Whether the planner prices draft trees of it (the profiler measures its sibling
        acceptance): a drafter that proposes token by token; a lookup, and a drafter that stops
        on its confidence, draft chains only."""
        return not (self.lookup or self.stops)


MODEL = DrafterKind(
    name="model",
    member="the loaded model itself, on its engine",
    own_model=True,
    timing="pass",
    projection=False,
    host=None,
    lookup=False,
    verifies=True,
    batched=True,
    engines=ENGINES,
    acceptance="logits",
)
NGRAM_LOOKUP = DrafterKind(
    name="ngram",
    member="an NgramDrafter of order n= proposing on suffix matches of at least min= tokens, or as a rule= of llama-server's",
    own_model=False,
    timing="lookup",
    projection=False,
    host=None,
    lookup=True,
    verifies=False,
    batched=True,
    engines=ENGINES,  # no passes of its own: the lookup runs on the host beside any engine
    acceptance="blocks",
)
BLOCK_HEADS = DrafterKind(
    name="bpd",
    member="a BpdDrafter: the trained heads, checked against the model directly above (their host)",
    own_model=False,
    timing="heads",
    projection=False,
    host="host",
    lookup=True,
    verifies=False,
    batched=False,
    engines=("torch",),  # the heads read hidden states, which the torch engine alone keeps
    acceptance="heads",
)
STEERED = DrafterKind(
    name="steered",
    member="the loaded model with its steerer, checked against the model directly above (its verifier)",
    own_model=True,
    timing="pass",
    projection=True,
    host="verifier",
    lookup=False,
    verifies=False,
    batched=False,
    engines=("torch",),  # steering reads the verifier's hidden states and adds vectors inside the drafter's layers
    acceptance="steered",
)

CONFIDENT = DrafterKind(
    name="confident",
    member="the loaded model in a Confident wrapper: level 0 drafting until its confidence falls below pmin=",
    own_model=True,
    timing="pass",
    projection=False,
    host=None,
    lookup=False,
    verifies=False,  # the rule ends a level-0 draft; a verifier's batch is its accepted tokens
    batched=True,
    engines=ENGINES,
    acceptance="confident",
    stops=True,
)

KINDS: tuple[DrafterKind, ...] = (MODEL, NGRAM_LOOKUP, BLOCK_HEADS, STEERED, CONFIDENT)


def kind_of(spec: ModelSpec) -> DrafterKind:
    """The kind of drafter ``spec`` names.

    >>> from hsd_runtime.terms.spec import parse_spec
    >>> specs = ("ngram:n=3", "bpd:heads", "smollm2-135m:steer=st", "smollm2-135m:layers=8", "smollm2-135m:pmin=0.5")
    >>> [kind_of(parse_spec(s)).name for s in specs]
    ['ngram', 'bpd', 'steered', 'model', 'confident']
    """
    if spec.is_ngram:
        return NGRAM_LOOKUP
    if spec.is_bpd:
        return BLOCK_HEADS
    if spec.p_min is not None:
        return CONFIDENT
    return MODEL if spec.steer is None else STEERED
