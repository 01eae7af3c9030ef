"""Load the models named by specs onto their engines, and what a chain asks of what was loaded.

A :class:`ModelLoader` keeps every full model it loaded, per (source, dtype), so that the views
``m:layers=2``, ``m:layers=8`` and ``m`` of one chain share one set of weights: a view holds the
parent's own embedding, first K decoder layers, final norm and head, never a copy (:mod:`.views`).
A quantized copy (``quant=int8``) is a separate model object made once from the fp32 parent and
kept per (source, "fp32", quant); its ``layers=K`` views share its int8 weights (see
:mod:`.quantize`). Where the weights come from is :mod:`.sources`' concern.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..terms.choices import Engine
from ..terms.errors import ModelNotFoundError, ModelSpecError, TokenizerMismatchError, first_line
from ..terms.spec import ModelSpec, check_engine, parse_spec
from .device import resolve_device, resolve_dtype
from .engine import ENGINES, LLAMA_CPP_PYTHON
from .gguf_file import check_gguf
from .llamacpp import GgufModel
from .packaged import PACKAGED
from .packing import can_prepack, prepack
from .quantize import quantized_copy
from .sources import causal_lm, check_model_dir, gguf_of, gguf_tokenizer, random_model, silence_transformers, source_dir
from .static_engine import StaticModel, static_kernels
from .torch_engine import engine_model
from .trim import kept_tokens, read_ranking
from .views import trimmed_model, truncated_view

__all__ = ["LoadedModel", "ModelLoader", "check_same_tokenizer", "context_limit", "head_rows"]


@dataclass
class LoadedModel:
    """A model ready to run, with what a chain needs to know about it."""

    spec: ModelSpec
    # a transformers *ForCausalLM in eval mode (torch), a StaticModel (static) or a GgufModel
    # (llama.cpp): what every executor takes as a chain member (engine_model puts it behind the seam)
    model: Any
    tokenizer: object  # transformers PreTrainedTokenizerBase
    num_layers: int
    # the columns its logits are compared over: the tokenizer's vocabulary, where the output layer
    # is padded past it (Qwen2.5: 151,936 rows for the 0.5B and 1.5B, 152,064 for the 7B, one tokenizer)
    logits_width: int
    fingerprint: str  # digest of the tokenizer's vocabulary and special tokens
    eos_token_ids: tuple[int, ...] = field(default=())

    @property
    def engine(self) -> Engine:
        """The engine that runs it."""
        return engine_model(self.model).engine

    @property
    def num_parameters(self) -> int:
        """Weights of the model; the int8 layers of a quantized copy count (it has its parent's)."""
        return engine_model(self.model).n_params


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of the vocabulary and special tokens: equal digests mean interchangeable token ids."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id]
    blob = json.dumps([vocab, special], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def head_rows(model: object) -> int:
    """Rows of ``model``'s output layer, on any engine: the logits width, which may exceed the
    tokenizer by padding (:attr:`~.engine.EngineModel.n_vocab`)."""
    return engine_model(model).n_vocab


def context_limit(model: object) -> int | None:
    """The positions ``model`` attends over, on any engine; None where it declares none
    (:attr:`~.engine.EngineModel.context_limit`)."""
    return engine_model(model).context_limit


def vocabulary_width(model: object, tokenizer: Any) -> int:
    """The logits columns of ``model`` that name its tokenizer's tokens: its output layer's rows,
    cut to the tokenizer's size where the layer is padded past it.

    Models of one tokenizer may pad their output layers to different sizes, and a padded row is
    no token: random or untrained, it can win the argmax, and its id is one a smaller model of the
    family cannot embed. Every level, the target decoding alone included, compares and samples
    over the tokenizer's columns only, so a chain's levels agree on what a token is.
    """
    return min(head_rows(model), len(tokenizer))


class ModelLoader:
    """Loads specs onto one device; full models are loaded once and shared by their views.

    Args:
        device: ``cpu``, ``cuda``, ``cuda:N`` (None: CUDA when present).
        dtype: the dtype of models whose spec names none.
        prepack: on the CPU, multiply by weights packed once at load (:mod:`.packing`); off runs
            torch's default kernels. Ignored on other devices.
    """

    def __init__(
        self, device: str | None = None, dtype: str = "fp32", prepack: bool = True, engine: str = "torch", threads: int | None = None
    ) -> None:
        if engine not in ENGINES:
            raise ModelSpecError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
        self.device = resolve_device(device)
        self.default_dtype = dtype
        self.prepack = prepack
        self.engine = engine
        self.threads = threads or torch.get_num_threads()
        resolve_dtype(dtype)
        if engine == "llamacpp" and self.device.type != "cpu":
            raise ModelSpecError(f"the llama.cpp engine runs on the CPU here; drop --device {self.device} or use --engine torch")
        self._full: dict[tuple[str, str, bool], LoadedModel] = {}  # (name, dtype, random weights)
        self._quantized: dict[tuple[str, str, str, bool], LoadedModel] = {}
        self._gguf: dict[tuple[str, int, str], LoadedModel] = {}  # (name, layers or 0, quant or "")
        self._static: dict[str, StaticModel] = {}

    @property
    def kernels(self) -> str:
        """``prepacked``, ``plain`` or ``llamacpp-VERSION``: which kernels this loader's models run (part of a profile's hardware key).

        Prepacked only where asked for, on the CPU, and where this CPU packs the loader's dtype
        (an AVX2-only CPU packs fp32 but not bf16: bf16 models then run the plain kernels, and a
        profile taken with them is stored as plain). A model whose own ``dtype=`` cannot be packed
        runs plain inside a prepacked loader. A loader whose engine is llama.cpp runs llama.cpp's
        kernels: ``llamacpp-VERSION``, the binding's version. The static engine's name its graphs
        and attention backend (:func:`~.static_engine.static_kernels`) for the loader's dtype; a
        model whose own ``dtype=`` differs may run another backend inside it, as an unpackable
        dtype runs plain inside a prepacked loader.
        """
        if self.engine == "llamacpp":
            return f"llamacpp-{LLAMA_CPP_PYTHON}"
        if self.engine == "static":
            return static_kernels(self.device, self.packs, resolve_dtype(self.default_dtype))
        return "prepacked" if self.packs else "plain"

    @property
    def packs(self) -> bool:
        """Whether this loader's torch models multiply by weights packed once at load (the CPU only)."""
        return self.prepack and self.device.type == "cpu" and self.prepack_refusal is None

    @property
    def prepack_refusal(self) -> str | None:
        """Why prepacking was asked for and cannot be had for this loader's dtype here, else None."""
        if not self.prepack or self.device.type != "cpu":
            return None
        return can_prepack(self.device, resolve_dtype(self.default_dtype))

    def with_kernels(self, kernels: str) -> ModelLoader:
        """This loader when it runs ``kernels`` already, else a new one on the same device and dtype that does."""
        if kernels == self.kernels:
            return self
        if kernels.startswith("llamacpp-"):
            if kernels != f"llamacpp-{LLAMA_CPP_PYTHON}":
                raise ModelSpecError(
                    f"profiled with llama.cpp's binding {kernels.removeprefix('llamacpp-')}; this install has {LLAMA_CPP_PYTHON}: profile again"
                )
            return ModelLoader(str(self.device), self.default_dtype, engine="llamacpp", threads=self.threads)
        if kernels.startswith("static-"):
            loader = ModelLoader(
                str(self.device), self.default_dtype, prepack=kernels.endswith("-prepacked"), engine="static", threads=self.threads
            )
            if loader.kernels != kernels:
                raise ModelSpecError(
                    f"profiled with the static engine's {kernels} kernels; this device runs {loader.kernels}: profile again"
                )
            return loader
        return ModelLoader(str(self.device), self.default_dtype, prepack=kernels == "prepacked", threads=self.threads)

    def run_dtype(self, spec: ModelSpec) -> str:
        """What ``spec``'s weights compute in on this loader: its dtype on torch (see
        :meth:`ModelSpec.run_dtype`), the GGUF's own types (``gguf``, or its ``quant=``) on llama.cpp."""
        if (spec.engine or self.engine) == "llamacpp" and spec.is_model:
            return spec.quant or "gguf"
        return spec.run_dtype(self.default_dtype)

    def release(self) -> None:
        """Forget every model this loader holds; their memory is freed once nothing else refers to them."""
        self._full.clear()
        self._quantized.clear()
        self._gguf.clear()
        self._static.clear()

    def load(self, spec: ModelSpec | str) -> LoadedModel:
        """Load one model spec (not ``ngram``)."""
        spec = (parse_spec(spec) if isinstance(spec, str) else spec).loads  # pmin= is how it drafts, not what loads
        if not spec.is_model:
            raise ModelSpecError(f"{spec} is a drafter, not a model to load")
        engine = spec.engine or self.engine
        check_engine(spec, engine)
        if engine == "llamacpp":
            return self._load_gguf(spec)
        # int8 kernels take fp32 activations: a quantized copy is made from the fp32 parent
        dtype = spec.run_dtype(self.default_dtype)
        key = (spec.name, dtype, spec.random_weights)
        if spec.quant:
            qkey = (spec.name, dtype, spec.quant, spec.random_weights)
            if qkey not in self._quantized:
                self._quantized[qkey] = self._quantize(spec, dtype)
            full = self._quantized[qkey]
        else:
            if key not in self._full:
                self._full[key] = self._load_full(spec.base, dtype)
            full = self._full[key]
        k = spec.layers
        model, layers = full.model, full.num_layers
        if k is not None and k != full.num_layers:
            if not 1 <= k <= full.num_layers:
                raise ModelSpecError(
                    f"layers={k} is out of range for {spec.name}: it has {full.num_layers} decoder layers (use 1..{full.num_layers})"
                )
            model, layers = truncated_view(full.model, k), k
        if spec.vocab is not None:
            model = self._trimmed(spec, full, model)
        if engine == "static":  # one static model per spec: its cache buffers and graphs are shared by every level naming it
            if str(spec) not in self._static:
                self._static[str(spec)] = StaticModel(model, str(spec))
            model = self._static[str(spec)]
        return LoadedModel(**{**full.__dict__, "spec": spec, "model": model, "num_layers": layers})

    def _trimmed(self, spec: ModelSpec, full: LoadedModel, model: Any) -> Any:
        """``model`` (the full model or a view) with its output layer trimmed as ``vocab=`` asks
        (:func:`trimmed_model`), the kept tokens read from the spec or its ranking file."""
        vocab = spec.vocab
        ranking: Sequence[int]
        if isinstance(vocab, int):
            n, ranking = vocab, range(full.logits_width)
        else:
            ranking, fingerprint = read_ranking(Path(str(vocab)).expanduser())
            if fingerprint is not None and fingerprint != full.fingerprint:
                raise TokenizerMismatchError(f"{spec}: the vocab ranking {vocab} was counted with another tokenizer than {spec.name}'s")
            n = len(ranking)
        return trimmed_model(model, kept_tokens(ranking, n, full.eos_token_ids, full.logits_width))

    def load_chain(self, specs: Sequence[ModelSpec]) -> list[LoadedModel | None]:
        """Load every spec (None for ``ngram`` and ``bpd:``), checking on the way that they share one tokenizer.

        Models are loaded one at a time, so a mismatch stops before the rest load, and parents
        before quantized copies, so a copy shares the embeddings of a parent that is listed too.
        """
        loaded: dict[int, LoadedModel] = {}
        for i in sorted(range(len(specs)), key=lambda i: specs[i].quant is not None):  # stable: parents first
            if specs[i].is_model:
                loaded[i] = self.load(specs[i])
                check_same_tokenizer(list(loaded.values()))
        return [loaded.get(i) for i in range(len(specs))]

    def _load_gguf(self, spec: ModelSpec) -> LoadedModel:
        """``spec`` on the llama.cpp engine: its GGUF file (its first layers only where ``layers=``
        asks, then re-quantized where ``quant=`` does; each copy made once into the cache), loaded
        once per (file, layers, quant) and shared by every level that names it."""
        from .llamacpp import pruned_gguf, quantized_gguf

        key = (spec.name, spec.layers or 0, spec.quant or "")
        if key not in self._gguf:
            gguf = gguf_of(spec)
            check_gguf(gguf)  # its layout, before anything is made from it
            # the copies (each checked by llama.cpp before it enters the cache) and the model load
            # refuse what llama.cpp cannot run before the tokenizer's cache entry is written
            path = pruned_gguf(gguf, spec.layers) if spec.layers else gguf
            path = quantized_gguf(path, spec.quant, self.threads) if spec.quant else path
            model = GgufModel(path, str(spec), self.threads)
            # a pruned or quantized copy reads its source's tokenizer: one object for all (about 0.1 GB for Qwen's)
            sibling = next((m for k, m in self._gguf.items() if k[0] == spec.name), None)
            tokenizer: Any = sibling.tokenizer if sibling is not None else gguf_tokenizer(gguf)
            vocab = tokenizer.get_vocab()
            eos_ids = {tokenizer.eos_token_id} - {None}
            if spec.name in PACKAGED:
                eos_ids.update(vocab[t] for t in PACKAGED[spec.name].extra_eos if t in vocab)
            self._gguf[key] = LoadedModel(
                spec=spec,
                model=model,
                tokenizer=tokenizer,
                num_layers=model.num_layers,
                logits_width=vocabulary_width(model, tokenizer),
                fingerprint=tokenizer_fingerprint(tokenizer),
                eos_token_ids=tuple(sorted(eos_ids)),
            )
        return replace(self._gguf[key], spec=spec)

    def _quantize(self, spec: ModelSpec, dtype: str) -> LoadedModel:
        """The quantized copy of ``spec``'s model, made from its fp32 parent.

        A parent loaded in its own right is shared: the copy uses its embeddings and norms
        (load_chain loads parents first for that). Otherwise the parent is read for its weights and
        dropped, unpacked (it runs no pass) and uncached: its Linear weights are of no use to the
        copy, 6.2 GB for the fp32 1.5B beside a bf16 target. The copy then owns what it shares, so
        the parent's memory-mapped checkpoint is closed.
        """
        key = (spec.name, dtype, spec.random_weights)
        if key in self._full:
            parent = self._full[key]
            return replace(parent, model=quantized_copy(parent.model, spec.quant or ""))
        parent = self._load_full(spec.base, dtype, pack=False)
        copy = quantized_copy(parent.model, spec.quant or "")
        _own_unpacked_tensors(copy)
        return replace(parent, model=copy)

    def _load_full(self, spec: ModelSpec, dtype: str, pack: bool = True) -> LoadedModel:
        from transformers import AutoTokenizer

        silence_transformers()
        source = source_dir(spec)
        check_model_dir(source, spec)
        try:
            with warnings.catch_warnings():  # torch's remarks on a refused pickle would break the one-line error
                warnings.simplefilter("ignore", UserWarning)
                tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=False)
                model: Any = (
                    random_model(source, dtype, self.device)
                    if spec.random_weights
                    else causal_lm(source, spec.name, dtype=resolve_dtype(dtype), trust_remote_code=False)
                )
        except ModelNotFoundError:
            raise
        except Exception as exc:  # a damaged directory fails anywhere in transformers, with any kind of error
            # (an unexpected config shape, weights that weights-only unpickling refuses): a user acts on the file, not the type
            raise ModelNotFoundError(f"cannot load {spec.name!r}: {type(exc).__name__}: {first_line(exc)}") from None
        model.to(self.device).eval()
        logits_width = vocabulary_width(model, tokenizer)
        if pack and self.packs and prepack(model):  # in place, before any view or quantized copy is taken of it
            _own_unpacked_tensors(model)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        if spec.name in PACKAGED:  # end tokens the GGUF metadata lost (Qwen: <|endoftext|>)
            vocab = tokenizer.get_vocab()
            eos_ids.update(vocab[t] for t in PACKAGED[spec.name].extra_eos if t in vocab)
        return LoadedModel(
            spec=spec,
            model=model,
            tokenizer=tokenizer,
            num_layers=model.config.num_hidden_layers,
            logits_width=logits_width,
            fingerprint=tokenizer_fingerprint(tokenizer),
            eos_token_ids=tuple(sorted(eos_ids)),
        )


def _own_unpacked_tensors(model: nn.Module) -> None:
    """Copy the tensors that packing or quantizing left (embeddings, norms, rotary tables) out of the checkpoint's memory map.

    transformers memory-maps a safetensors checkpoint and its tensors view that one mapping. Packing
    drops the Linear weights read from it, but any tensor still viewing it keeps the whole file
    mapped and resident: 6.2 GB beside the packed copy for the fp32 Qwen 1.5B, so the demo's process
    held 19.8 GB for 12 GB of models. Once nothing views the mapping it is closed, and the process
    holds what its models need. (Plain kernels compute on the mapped weights themselves: nothing to copy.)
    """
    with torch.no_grad():
        for module in model.modules():
            for param in module.parameters(recurse=False):
                param.data = param.data.clone()
            for name, buffer in module.named_buffers(recurse=False):
                if buffer is not None:
                    module._buffers[name] = buffer.clone()


def check_same_tokenizer(models: list[LoadedModel]) -> int:
    """Raise unless all ``models`` share one tokenizer; return the shared logits width.

    Models of one family may pad their output layer differently; each one's width is already cut
    to the tokenizer's vocabulary (:func:`vocabulary_width`), and the smallest is taken.
    """
    if not models:
        raise TokenizerMismatchError("no model to take the tokenizer from: a chain needs a model besides ngram")
    first = models[0]
    for other in models[1:]:
        if other.fingerprint != first.fingerprint:
            raise TokenizerMismatchError(
                f"{other.spec} and {first.spec} have different tokenizers; every model of a chain must share the target's tokenizer"
            )
    return min(m.logits_width for m in models)
