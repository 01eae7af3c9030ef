"""Steering a drafter with the hidden states of the level above it (SD²: Berdoz, Rheinboldt and
Wattenhofer, "Steering Pretrained Drafters during Speculative Decoding", 2025).

After every verification, the verifier's hidden states entering a few of its decoder layers at the
last position it computed along the accepted text (``taps``, e.g. layers 3, L/2 and L - 3) are
projected into one vector per drafter layer, which the drafter adds inside each layer's SwiGLU
until the next verification::

    g = W_hml [h_a ; h_b ; h_c] + b_hml                   # [d_V]; W_hml = [I I I], b = 0 at init
    [delta_1 .. delta_L] = reshape(W_g LayerNorm(g))      # one d_ff vector per drafter layer
    MLP_l(x) = W_down(SiLU(W_gate x) * (W_up x + delta_l))

``W_g`` starts at zero, so untrained steering leaves the drafter's logits bit-identical. Forms of
``W_g``: ``full`` (``L d_ff x d_V``), ``lowrank`` (``B A``, A ``r x d_V`` random, B
``L d_ff x r`` zero at init: far less to read per verification when ``L d_ff`` is large) and
``simple`` (one vector of the drafter's hidden size per layer, added after its MLP).

Verification is unchanged and the steered drafter reports the distributions it drew from, so
output stays exact; the vector depends only on text already accepted. A steering directory
(``steering.safetensors`` + ``steering.json``) names the drafter and the verifier it was trained
for; the spec option ``steer=DIR`` on the drafter loads it, and the chain must put that verifier
directly above the drafter.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from ..decoding.cache import CachedModel
from ..decoding.drafters import DraftContext, ModelDrafter, Proposal, VerifierLevel
from ..models.loading import LoadedModel
from ..models.output import activation_dtype
from ..models.views import decoder_of, shallow_module
from ..terms.errors import ChainError, ModelSpecError
from ..terms.shape import TreeShape
from ..terms.spec import ModelSpec, parse_spec, same_model
from ..terms.tree import DraftTree
from .trained import load_weights, read_card_file, save_trained

__all__ = [
    "STEER_CARD",
    "STEER_FILE",
    "SteeredDrafter",
    "Steerer",
    "SteeringCard",
    "SteeringForm",
    "SteeringProjection",
    "check_verifier",
    "default_taps",
    "layer_inputs",
    "load_steering",
    "read_steering_card",
    "save_steering",
    "stale_sources",
    "steer_model",
    "steered_model",
    "steering_delta",
]

STEER_CARD = "steering.json"
STEER_FILE = "steering.safetensors"
FORMAT = 1  # of a steering directory; another format is refused
SteeringForm = Literal["lowrank", "full", "simple"]
_REMEDY = "hsd-plan steer train"


class SteeringCard(BaseModel):
    """What a steering directory was trained for (the runtime reads all but ``training`` and
    ``acceptance``, which are for people and the planner)."""

    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    drafter: str  # the spec of the steered model (name and layers)
    verifier: str  # the spec of the model whose hidden states steer it
    taps: list[int]  # the verifier layers whose inputs are read
    verifier_hidden: int
    drafter_layers: int
    width: int  # of each vector: the drafter's d_ff (lowrank, full) or hidden size (simple)
    form: SteeringForm
    rank: int = 0  # lowrank only
    training: dict[str, Any] = {}
    acceptance: dict[str, Any] = {}


def default_taps(layers: int) -> list[int]:
    """The verifier layers read: 3, L / 2 and L - 3 (the paper's choice), kept inside 0..L - 1.

    >>> default_taps(30), default_taps(2)
    ([3, 15, 27], [0, 1])
    """
    return sorted({min(3, layers - 1), layers // 2, max(layers - 3, 0)})


class SteeringProjection(nn.Module):
    """Verifier taps ``[..., len(taps) d_V]`` -> steering vectors ``[L, ..., width]``.

    Args:
        card: the shapes (hidden size, taps, drafter layers, width, form, rank).
    """

    def __init__(self, card: SteeringCard) -> None:
        super().__init__()
        d, n = card.verifier_hidden, len(card.taps)
        self.layers, self.width = card.drafter_layers, card.width
        self.hml = nn.Linear(n * d, d)
        with torch.no_grad():  # [I I I]: g starts as the sum of the taps
            self.hml.weight.copy_(torch.eye(d).repeat(1, n))
            self.hml.bias.zero_()
        self.norm = nn.LayerNorm(d)
        self.down = nn.Linear(d, card.rank, bias=False) if card.form == "lowrank" else None
        self.up = nn.Linear(card.rank if self.down is not None else d, self.layers * self.width, bias=False)
        nn.init.zeros_(self.up.weight)  # W_g = 0: steering starts as a no-op

    def forward(self, taps: torch.Tensor) -> torch.Tensor:
        g = self.norm(self.hml(taps))  # [..., d_V]
        if self.down is not None:
            g = self.down(g)  # [..., r]
        return self.up(g).unflatten(-1, (self.layers, self.width)).movedim(-2, 0)  # [L, ..., width]


class Steerer:
    """The steering vectors a steered model reads while it runs (``delta``, ``[L, ..., width]`` or
    None for none), and the projection that makes them from the verifier's taps.

    Args:
        projection: the trained projection (its dtype and device are what :meth:`steer` computes in).
        card: its card.
    """

    def __init__(self, projection: SteeringProjection, card: SteeringCard) -> None:
        self.projection = projection
        self.card = card
        self.delta: torch.Tensor | None = None

    @torch.inference_mode()
    def steer(self, taps: torch.Tensor) -> None:
        """Set the vectors from the verifier's taps ``[1, len(taps) d_V]`` at one position."""
        dtype = self.projection.up.weight.dtype
        self.delta = self.projection(taps.to(dtype))[:, 0]  # [L, width]

    def clear(self) -> None:
        """No steering (a new sequence, before its first verification)."""
        self.delta = None

    @property
    def taps(self) -> tuple[int, ...]:
        """The verifier layers whose inputs steer this model."""
        return tuple(self.card.taps)

    def wrap(self, level: ModelDrafter | VerifierLevel) -> SteeredDrafter:
        """``level`` (this model's own) steered by this steerer."""
        return SteeredDrafter(level, self)


class _Steered(nn.Module):
    """``inner(x) + delta_l`` (``inner`` a SwiGLU's up projection, or a whole MLP for ``simple``)."""

    def __init__(self, inner: nn.Module, steerer: Steerer, layer: int) -> None:
        super().__init__()
        self.inner = inner
        self.layer = layer
        self.__dict__["_steerer"] = steerer  # not a submodule: its projection runs apart from the model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        steerer: Steerer = self.__dict__["_steerer"]
        delta = steerer.delta
        return y if delta is None else y + delta[self.layer].to(y.dtype)


def steered_model(model: Any, steerer: Steerer) -> Any:
    """A shallow copy of the causal LM ``model`` whose layers add ``steerer``'s vectors.

    The weights stay shared with ``model`` and ``model`` itself is untouched (a view of the target
    stays unsteered inside the target). The copy carries ``steerer`` as its ``steerer``.
    """
    card = steerer.card
    decoder = decoder_of(model)
    layers = list(decoder.layers)
    if len(layers) != card.drafter_layers:
        raise ModelSpecError(f"steering for a drafter of {card.drafter_layers} layers cannot steer one of {len(layers)}")
    steered = []
    for index, layer in enumerate(layers):
        copy = shallow_module(layer)
        mlp = layer.mlp
        if card.form == "simple":
            copy.mlp = _Steered(mlp, steerer, index)
        else:
            if not hasattr(mlp, "up_proj") or int(mlp.up_proj.out_features) != card.width:
                raise ModelSpecError(f"steering adds {card.width}-wide vectors inside a SwiGLU; {type(mlp).__name__} does not fit")
            inner = shallow_module(mlp)
            inner.up_proj = _Steered(mlp.up_proj, steerer, index)
            copy.mlp = inner
        steered.append(copy)
    body = shallow_module(decoder)
    body.layers = nn.ModuleList(steered)
    outer = shallow_module(model)
    setattr(outer, model.base_model_prefix, body)
    outer.__dict__["steerer"] = steerer
    return outer


def layer_inputs(model: Any, input_ids: torch.Tensor, layers: list[int], attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The inputs of decoder ``layers`` of ``model`` at every position, side by side:
    ``[B, S, len(layers) d]`` from one pass over ``input_ids`` ``[B, S]`` (no cache)."""
    out = decoder_of(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_hidden_states=True)
    return torch.cat([out.hidden_states[i] for i in layers], -1)  # hidden_states[l]: the input of layer l


def stale_sources(length: int, offset: int) -> torch.Tensor:
    """For the ``length`` rows of a continuation (row t predicts its token t, row 0 sits on the
    prompt's last token), the row whose taps steer each when the last verification is ``offset``
    positions back: ``max(t - offset, 0)``, and -1 (unsteered) for row 0, which the drafter read
    with the prompt, before any verification. ``[length]``, long.

    >>> stale_sources(5, 2).tolist()
    [-1, 0, 0, 1, 2]
    """
    rows = (torch.arange(length) - offset).clamp_min(0)
    if length:
        rows[0] = -1
    return rows


def steering_delta(
    projection: SteeringProjection, taps: torch.Tensor, where: tuple[torch.Tensor, torch.Tensor], shape: tuple[int, int]
) -> torch.Tensor:
    """Per-position vectors ``[L, B, S, width]`` for a teacher-forced pass of a steered drafter.

    ``taps`` ``[N, len(taps) d]`` are the verifier's taps steering N positions, ``where`` their
    (sequence, position) indices ``[N]`` each, ``shape`` (B, S); every other position is unsteered (0).
    """
    vectors = projection(taps)  # [L, N, width]
    zeros = vectors.new_zeros((vectors.shape[0], shape[0] * shape[1], vectors.shape[-1]))  # [L, B S, width]
    index = (where[0] * shape[1] + where[1]).to(vectors.device)  # [N]: flat (sequence, position)
    return zeros.index_copy(1, index, vectors).unflatten(1, shape)  # out of place: gradients reach the projection


def save_steering(folder: Path, projection: SteeringProjection, card: SteeringCard) -> None:
    """Write ``projection`` and ``card`` into ``folder`` (created), each file replaced atomically."""
    save_trained(folder, STEER_FILE, projection, STEER_CARD, card)


def read_steering_card(folder: Path) -> SteeringCard:
    """The card of a steering directory; a missing, unreadable or foreign one is one line."""
    return read_card_file(folder, STEER_CARD, SteeringCard, FORMAT, "a steering directory", _REMEDY)


def load_steering(folder: Path, dtype: torch.dtype, device: torch.device | str = "cpu") -> Steerer:
    """The steerer of ``folder`` (its projection in ``dtype`` on ``device``, frozen); one line when damaged."""
    card = read_steering_card(folder)
    projection = SteeringProjection(card)
    load_weights(folder / STEER_FILE, projection, _REMEDY)
    return Steerer(projection.to(device=device, dtype=dtype).eval().requires_grad_(False), card)


def steer_model(loaded: LoadedModel) -> LoadedModel:
    """``loaded`` with the steering its spec's ``steer=DIR`` names (unchanged without one).

    Refused with one line: a directory trained for another drafter (model and depth).
    """
    spec = loaded.spec
    if spec.steer is None:
        return loaded
    model: Any = loaded.model
    dtype = activation_dtype(model)
    steerer = load_steering(Path(spec.steer).expanduser(), dtype, next(model.parameters()).device)
    if not same_model(parse_spec(steerer.card.drafter), spec):
        raise ModelSpecError(f"{spec}: the steering in {spec.steer} was trained for the drafter {steerer.card.drafter}, not {spec.base}")
    return LoadedModel(**{**loaded.__dict__, "model": steered_model(model, steerer)})


def check_verifier(spec: ModelSpec, steerer: Steerer, above: ModelSpec | None) -> None:
    """Refuse, with one line, a steered ``spec`` whose next member is not the verifier it was trained with."""
    trained = parse_spec(steerer.card.verifier)
    if above is None or not above.is_model:
        raise ChainError(f"{spec} is steered by {trained} and must be directly below it in the chain (not {above or 'nothing'})")
    if not same_model(trained, above):
        raise ChainError(f"{spec} is steered by {trained}, not by {above}: put it directly below {trained}, or train steering for {above}")


class SteeredDrafter:
    """A model level steered by the verifier directly above it.

    Before each proposal (once per round of the verifier, right after its verification pass, or
    after the prefill) the steering vectors are set from the verifier's taps at the newest
    position it computed along the context; they stay until the next proposal.

    Args:
        inner: the level's own drafter (a model at level 0, or a middle level).
        steerer: the steerer its model reads (``model.steerer``).
    """

    def __init__(self, inner: ModelDrafter | VerifierLevel, steerer: Steerer) -> None:
        self.inner = inner
        self.steerer = steerer
        self.stats = inner.stats
        self.verifier: CachedModel | None = None

    def attach(self, verifier: CachedModel) -> None:
        """Read the steering off ``verifier``'s passes (it must keep the card's taps)."""
        card = self.steerer.card
        if tuple(verifier.layers) != tuple(card.taps):
            raise ChainError(f"{self.stats.model}: its verifier does not keep the inputs of layers {card.taps}")
        model: Any = verifier.model
        size = int(model.config.hidden_size)
        if size != card.verifier_hidden:
            raise ChainError(f"{self.stats.model}: steering for a verifier of hidden size {card.verifier_hidden} cannot read one of {size}")
        self.verifier = verifier

    def prefill(self, prompts: list[list[int]]) -> None:
        self.steerer.clear()  # the prompt is read unsteered, as in training
        self.inner.prefill(prompts)

    def _steer(self, tokens: list[int]) -> None:
        assert self.verifier is not None, "a steered drafter runs under its verifier"
        found = self.verifier.hidden_at(tokens)
        if found is None:  # no row along the context (none is left after a prefill, by construction): keep the last vectors
            return
        t0 = time.perf_counter()
        self.steerer.steer(found[0])
        if self.steerer.delta is not None and self.steerer.delta.device.type == "cuda":
            torch.cuda.synchronize(self.steerer.delta.device)
        self.stats.steers += 1
        self.stats.steer_s += time.perf_counter() - t0

    def propose(self, ctx: DraftContext, n: int) -> list[Proposal | None]:
        """The inner level's proposal for the one row, steered by the verifier's newest taps."""
        self._steer(ctx.tokens)
        return self.inner.propose(ctx, n)

    def propose_tree(self, ctx: DraftContext, shape: TreeShape) -> DraftTree:
        """The inner level's tree (a model at level 0), steered by the verifier's newest taps."""
        if not isinstance(self.inner, ModelDrafter):
            raise ChainError(f"{self.stats.model}: only level 0 drafts trees")
        self._steer(ctx.tokens)
        return self.inner.propose_tree(ctx, shape)
