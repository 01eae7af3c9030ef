"""The torch engine: a transformers causal LM with a ``DynamicCache``.

:class:`TorchModel` puts a transformers module (a full model, or a truncated, trimmed, quantized or
steered view of one) behind the engine seam; :func:`engine_model` gives any chain member's model on
its engine, and is the one place that tells a bare module from a model of another engine.

Trees are fed with a 4-D additive attention mask and explicit position ids; a kept path's keys and
values are gathered into sequence order. With ``keep_hidden`` the pass runs the decoder and the
output layer apart, so that the final hidden state (or the inputs of chosen layers) of every row
kept stays readable (:attr:`TorchCache.captured`): what block-draft heads and steering read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from ..terms.tree import DraftTree
from .engine import EngineModel, TreeFeed
from .output import activation_dtype, additive_mask, apply_output_layer, cache_argument

if TYPE_CHECKING:
    from .torch_rows import RowsCache
from .packing import PackedLinear
from .quantize import Int8Linear

__all__ = ["TorchCache", "TorchModel", "engine_model", "tree_allowed"]


class TorchModel:
    """A transformers causal LM on the torch engine (:class:`~hsd_runtime.models.engine.EngineModel`).

    A thin view: it holds ``module`` and reads every answer from it when asked, so a view made of
    a module that changes (a steering attached, a head trimmed) answers for the module as it is.
    """

    engine: Literal["torch"] = "torch"
    allocates_cells = False  # a DynamicCache grows as it is fed

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    @property
    def n_vocab(self) -> int:
        # read from the layer's shape, never its weight: a packed or int8 head has no dense weight to read
        module: Any = self.module
        return int(module.get_output_embeddings().out_features)

    @property
    def context_limit(self) -> int | None:
        limit = getattr(getattr(self.module, "config", None), "max_position_embeddings", None)
        return limit if isinstance(limit, int) else None

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def n_params(self) -> int:
        dense = sum(p.numel() for p in self.module.parameters())
        return dense + sum(m.num_weights for m in self.module.modules() if isinstance(m, (Int8Linear, PackedLinear)))

    @property
    def num_layers(self) -> int:
        module: Any = self.module
        return int(module.config.num_hidden_layers)

    def open_cache(self, width: int, cells: int | None = None, keep_hidden: bool = False, layers: tuple[int, ...] = ()) -> TorchCache:
        """A fresh ``DynamicCache`` (``cells`` is ignored: it grows as it is fed)."""
        return TorchCache(self.module, width, keep_hidden, layers)

    def open_rows(self, width: int, rows: int) -> RowsCache:
        """A fresh cache over ``rows`` sequences in one ragged layout (:mod:`.torch_rows`)."""
        from .torch_rows import RowsCache

        return RowsCache(self.module, width, rows)

    def __repr__(self) -> str:
        return f"TorchModel({type(self.module).__name__})"


def engine_model(member: object) -> EngineModel:
    """``member``'s model on its engine: a transformers module behind :class:`TorchModel`, a model
    of another engine (it implements :class:`~hsd_runtime.models.engine.EngineModel`) as it is.

    Raises:
        TypeError: ``member`` is neither (a drafter without a model, say).
    """
    if isinstance(member, nn.Module):
        return TorchModel(member)
    if isinstance(member, EngineModel):  # TorchModel, StaticModel, GgufModel
        return member
    raise TypeError(f"{type(member).__name__} is no model of an engine")


class TorchCache:
    """A transformers causal LM's KV cache (:class:`~hsd_runtime.models.engine.EngineCache`).

    Args:
        model: a transformers causal LM (or a truncated, trimmed or quantized view of one).
        width: logits are sliced to this many columns.
        keep_hidden: run the decoder and the output layer apart and keep, in :attr:`captured`,
            the final hidden state of every row whose logits a pass returns.
        layers: with ``keep_hidden``, keep instead the inputs of these decoder layers, side by side.
    """

    def __init__(self, model: nn.Module, width: int, keep_hidden: bool = False, layers: tuple[int, ...] = ()) -> None:
        self.model = model
        self.width = width
        self.keep_hidden = keep_hidden
        self.layers = layers
        self.device = next(model.parameters()).device
        # the activations' dtype, for the additive tree mask (an int8 copy computes in fp32 like its embeddings)
        self.dtype = activation_dtype(model)
        self.captured: torch.Tensor | None = None  # [keep, d] (or [keep, len(layers) d]) of the latest pass
        self.clear()

    def clear(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache()

    def crop(self, keep: int, held: int) -> None:
        # a negative count removes that many positions in every transformers version
        self._cache.crop(keep - held)

    def drop_tree(self, fed: int) -> None:
        self._cache.crop(-fed)

    def prepare(self, widest: int) -> None:
        pass  # a transformers forward needs no setup per pass shape

    def keep_path(self, held: int, path: list[int], fed: int) -> bool:
        layers = getattr(self._cache, "layers", None)
        if layers is None or not all(type(layer).__name__ == "DynamicLayer" for layer in layers):
            return False  # a cache layout without plain layers: the caller drops the nodes
        keep = torch.cat([torch.arange(held), held + torch.tensor(path)]).to(self.device)
        for layer in layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, keep)
                layer.values = layer.values.index_select(-2, keep)
        return True

    @torch.inference_mode()
    def feed(self, tokens: list[int], start: int, keep: int, tree: TreeFeed | None = None) -> torch.Tensor:
        extra: dict[str, torch.Tensor] = {}
        if tree is not None:
            tail = len(tokens) - (len(tree.tree) - tree.first)
            positions = list(range(start, start + tail)) + tree_positions(tree.tree, tree.linear)[tree.first :]
            extra["attention_mask"] = tree_mask(tree.tree, tree.linear, tail, tree.first, self.dtype, self.device)
            extra["position_ids"] = torch.tensor([positions], device=self.device)
        ids = torch.tensor([tokens], device=self.device)  # [1, new tokens]
        if self.keep_hidden:  # the decoder, then the output layer on the rows kept: the hidden rows stay
            decoder: Any = getattr(self.model, str(self.model.base_model_prefix))
            out = decoder(
                input_ids=ids, **cache_argument(decoder, self._cache), use_cache=True, output_hidden_states=bool(self.layers), **extra
            )
            hidden = out.last_hidden_state[0, -keep:]  # [keep, d]
            # hidden_states[l] is the input of layer l (hidden_states[0] the embeddings): [keep, len(layers) d]
            self.captured = torch.cat([out.hidden_states[i][0, -keep:] for i in self.layers], -1) if self.layers else hidden
            logits = apply_output_layer(self.model, hidden, self.width)
        else:
            out = self.model(input_ids=ids, **cache_argument(self.model, self._cache), use_cache=True, logits_to_keep=keep, **extra)
            logits = out.logits[0, :, : self.width]  # [keep, V]
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
        return logits


def tree_positions(tree: DraftTree, start: int) -> list[int]:
    """Position ids of the nodes when the root's children sit at position ``start``."""
    return [start + d - 1 for d in tree.depths]


def tree_allowed(tree: DraftTree, linear: int, tail: int, first: int) -> torch.Tensor:
    """Where each row of a pass may attend, ``[tail + M, linear + N']`` booleans (see :func:`tree_mask`)."""
    n = len(tree)
    q, kv = tail + n - first, linear + n
    allowed = torch.zeros(q, kv, dtype=torch.bool)
    past = linear - tail
    for j in range(tail):  # linear text: causal
        allowed[j, : past + j + 1] = True
    allowed[tail:, :linear] = True  # every node sees all linear text
    for row, i in enumerate(range(first, n), start=tail):
        node = i
        while node >= 0:  # itself and its ancestors
            allowed[row, linear + node] = True
            node = tree.parents[node]
    return allowed


def tree_mask(tree: DraftTree, linear: int, tail: int, first: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive 4-D attention mask ``[1, 1, tail + M, linear + N']`` of one pass.

    Key positions: ``linear`` positions of linear text (the last ``tail`` of them fed by this
    pass, causally), then tree nodes 0..N'-1 with N' = ``len(tree)``: nodes before ``first`` are
    already in the cache, nodes ``first..`` (M of them) are fed by this pass after the tail. A node
    sees all linear text, its ancestors and itself. 0 where attention is allowed, the dtype's
    minimum elsewhere (added to the scores by eager and SDPA attention alike).
    """
    return additive_mask(tree_allowed(tree, linear, tail, first), dtype).to(device)[None, None]
