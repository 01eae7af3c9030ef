"""Views of a loaded transformers causal LM that share its weights: its first K decoder layers
(``layers=K``) and its output layer trimmed to chosen tokens (``vocab=``).

A view is a shallow copy of the modules it changes; every parameter is the parent's own (or, for a
trimmed head, a copy of its kept rows), so the views of one chain cost no second set of weights.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ..terms.errors import ModelSpecError
from .packing import PackedLinear
from .quantize import Int8Linear
from .trim import TrimmedHead, kept_tokens

__all__ = ["decoder_of", "shallow_module", "trimmed_by_id", "trimmed_model", "truncated_config", "truncated_view"]


def decoder_of(model: Any) -> Any:
    """The decoder body of a transformers causal LM (its layers and final norm, without the head)."""
    return getattr(model, model.base_model_prefix)


def truncated_config(config: Any, k: int) -> Any:
    """A copy of a transformers decoder ``config`` with its first ``k`` layers only."""
    cfg = copy.deepcopy(config)
    cfg.num_hidden_layers = k
    if getattr(cfg, "layer_types", None) is not None:  # per-layer attention kinds (Gemma 3, Qwen)
        cfg.layer_types = list(cfg.layer_types[:k])
    return cfg


def truncated_view(model: Any, k: int) -> Any:
    """The first ``k`` decoder layers of ``model`` plus its final norm and head, sharing weights.

    The two outer modules are shallow copies with their own containers (children, hooks,
    generation config), so changing the view touches neither the parent nor its parameters.
    """
    cfg = truncated_config(model.config, k)
    inner = shallow_module(decoder_of(model))
    inner.layers = nn.ModuleList(list(decoder_of(model).layers)[:k])
    inner.config = cfg
    outer = shallow_module(model)
    setattr(outer, model.base_model_prefix, inner)
    outer.config = cfg
    if getattr(model, "generation_config", None) is not None:
        outer.generation_config = copy.deepcopy(model.generation_config)
    return outer


def trimmed_model(model: Any, keep: torch.Tensor) -> Any:
    """A shallow copy of the causal LM ``model`` whose output layer scores the tokens ``keep`` ``[N]`` only.

    The decoder is shared with ``model``; the head holds the kept rows, packed or int8 where the
    full head was (:class:`~hsd_runtime.models.trim.TrimmedHead`), and its logits keep their full width.
    Refused for a model that soft-caps its logits: tanh(-inf) is finite, so the tokens left out
    would keep a probability.
    """
    if getattr(model.config, "final_logit_softcapping", None):
        raise ModelSpecError(
            f"vocab= cannot trim {type(model).__name__}: it soft-caps its logits (the tokens left out would keep a probability)"
        )
    head = model.get_output_embeddings()
    trimmed = TrimmedHead(head, keep, int(head.out_features))
    dense = trimmed.rows
    assert isinstance(dense, nn.Linear)
    if isinstance(head, PackedLinear):  # the kept rows run the kernels the full head ran
        trimmed.rows = PackedLinear(dense)
    elif isinstance(head, Int8Linear):
        trimmed.rows = Int8Linear(dense)
    outer = shallow_module(model)
    outer.set_output_embeddings(trimmed)
    return outer


def trimmed_by_id(model: Any, n: int) -> Any:
    """``model`` with its output layer trimmed to its ``n`` lowest token ids, the end-of-sequence
    ids of its config first (:func:`trimmed_model`): the layer that ``vocab=N`` of block-draft
    heads reads, at training and at drafting alike."""
    eos = getattr(model.config, "eos_token_id", None)
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    rows = int(model.get_output_embeddings().out_features)  # the layer's shape: a packed or int8 head has no dense weight
    return trimmed_model(model, kept_tokens(range(rows), n, eos_ids, rows))


def shallow_module(module: Any) -> Any:
    """A copy of ``module`` sharing its parameters but not its dicts of children, hooks, buffers."""
    clone = copy.copy(module)
    for name, value in vars(module).items():
        if isinstance(value, dict):
            setattr(clone, name, copy.copy(value))
    return clone
