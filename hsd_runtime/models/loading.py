"""Load the models named by specs: packaged aliases, Hugging Face directories, GGUF files.

A :class:`ModelLoader` keeps every full model it loaded, per (source, dtype), so that the views
``m:layers=2``, ``m:layers=8`` and ``m`` of one chain share one set of weights: a view holds the
parent's own embedding, first K decoder layers, final norm and head, never a copy. A quantized
copy (``quant=int8``) is a separate model object made once from the fp32 parent and kept per
(source, "fp32", quant); its ``layers=K`` views share its int8 weights (see :mod:`.quantize`).
"""

from __future__ import annotations

import copy
import hashlib
import io
import itertools
import json
import os
import shutil
import stat
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from ..terms.errors import ModelNotFoundError, ModelSpecError, TokenizerMismatchError, first_line
from ..terms.json_text import JSONTextError, parse_json
from ..terms.limits import MAX_CONFIG_BYTES, MAX_DIR_ENTRIES, MAX_GGUF_BYTES
from ..terms.spec import ModelSpec, check_engine, parse_spec
from .cache import cache_lock, write_entry
from .device import resolve_device, resolve_dtype
from .engine import ENGINES, LLAMA_CPP_PYTHON
from .files import describe_mode, read_input, stat_input, stat_path
from .gguf_file import check_gguf
from .llamacpp import GgufModel
from .packaged import PACKAGED, converted_dir, packaged_gguf
from .packing import PackedLinear, can_prepack, prepack
from .quantize import Int8Linear, quantized_copy
from .static_engine import StaticModel, static_kernels
from .trim import TrimmedHead, kept_tokens, read_ranking

__all__ = [
    "LoadedModel",
    "ModelLoader",
    "check_same_tokenizer",
    "context_limit",
    "decoder_of",
    "head_rows",
    "shallow_module",
    "trimmed_by_id",
    "trimmed_model",
    "truncated_config",
    "truncated_view",
]


@dataclass
class LoadedModel:
    """A model ready to run, with what a chain needs to know about it."""

    spec: ModelSpec
    model: Any  # a transformers *ForCausalLM in eval mode, a GgufModel on llama.cpp, a StaticModel on the static engine
    tokenizer: object  # transformers PreTrainedTokenizerBase
    num_layers: int
    # the columns its logits are compared over: the tokenizer's vocabulary, where the output layer
    # is padded past it (Qwen2.5: 151,936 rows for the 0.5B and 1.5B, 152,064 for the 7B, one tokenizer)
    logits_width: int
    fingerprint: str  # digest of the tokenizer's vocabulary and special tokens
    eos_token_ids: tuple[int, ...] = field(default=())

    @property
    def num_parameters(self) -> int:
        """Weights of the model; the int8 layers of a quantized copy count (it has its parent's)."""
        if not isinstance(self.model, nn.Module):  # a GGUF on llama.cpp
            return int(self.model.n_params)
        dense = sum(p.numel() for p in self.model.parameters())
        return dense + sum(m.num_weights for m in self.model.modules() if isinstance(m, (Int8Linear, PackedLinear)))


def tokenizer_fingerprint(tokenizer) -> str:
    """A digest of the vocabulary and special tokens: equal digests mean interchangeable token ids."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id]
    blob = json.dumps([vocab, special], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def head_rows(model: Any) -> int:
    """Rows of the output layer: the logits width, which may exceed the tokenizer by padding.

    Read from the layer's shape, never its weight: a packed or int8 head has no dense weight to read.
    A model that opens its own caches (a GGUF on llama.cpp, a static-engine model) says how many it scores.
    """
    if not isinstance(model, nn.Module):  # a model that opens its own caches (llama.cpp, static)
        return int(model.n_vocab)
    return int(cast(Any, model).get_output_embeddings().out_features)


def vocabulary_width(model: Any, tokenizer: Any) -> int:
    """The logits columns of ``model`` that name its tokenizer's tokens: its output layer's rows,
    cut to the tokenizer's size where the layer is padded past it.

    Models of one tokenizer may pad their output layers to different sizes, and a padded row is
    no token: random or untrained, it can win the argmax, and its id is one a smaller model of the
    family cannot embed. Every level, the target decoding alone included, compares and samples
    over the tokenizer's columns only, so a chain's levels agree on what a token is.
    """
    return min(head_rows(model), len(tokenizer))


def context_limit(model: Any) -> int | None:
    """The positions ``model`` attends over: its config's ``max_position_embeddings``, a llama.cpp
    GGUF's context cells; None where it declares none."""
    if not isinstance(model, nn.Module):  # a model that opens its own caches (llama.cpp, static)
        return int(model.n_ctx)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return limit if isinstance(limit, int) else None


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
    rows = head_rows(model)
    return trimmed_model(model, kept_tokens(range(rows), n, eos_ids, rows))


def shallow_module(module: Any) -> Any:
    """A copy of ``module`` sharing its parameters but not its dicts of children, hooks, buffers."""
    clone = copy.copy(module)
    for name, value in vars(module).items():
        if isinstance(value, dict):
            setattr(clone, name, copy.copy(value))
    return clone


def _silence_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _random_model(source: Path, dtype: str, device: torch.device) -> Any:
    """The model of ``source``'s config with random weights (``weights=random``), made on ``device``
    (a 7B is initialised in seconds on a GPU, minutes on a CPU): no weight file is read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(source), trust_remote_code=False)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=resolve_dtype(dtype), trust_remote_code=False)


def _check_model_dir(source: Path, spec: ModelSpec) -> None:
    """Refuse a model directory whose configs are not JSON objects, or map to the model's own
    Python code (``auto_map``), which loading would run, or that holds a FIFO, device or socket
    (transformers opens the weights and tokenizer files it finds by name: a FIFO would block it)."""
    with os.scandir(source) as entries:
        for entry in itertools.islice(entries, MAX_DIR_ENTRIES):
            st = stat_path(Path(entry.path), f"{spec.name}:")
            if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise ModelNotFoundError(f"{spec.name}: {entry.name} is {describe_mode(st.st_mode)}, not a file of a model directory")
    for name in ("config.json", "tokenizer_config.json"):
        path = source / name
        if name != "config.json" and stat_path(path, f"{spec.name}:") is None:
            continue  # a tokenizer config is optional (one that is there is checked: a FIFO would block transformers)
        data = read_input(path, f"{spec.name}:", MAX_CONFIG_BYTES)
        try:
            config = parse_json(data)
        except JSONTextError as exc:
            raise ModelNotFoundError(f"{spec.name}: {name} {exc}; it is not a Hugging Face model directory") from None
        if not isinstance(config, dict):
            raise ModelNotFoundError(f"{spec.name}: {name} holds a JSON {type(config).__name__}, not an object of settings")
        if "auto_map" in config:
            raise ModelNotFoundError(
                f"{spec.name} ships its own model code ({name} has auto_map); hsd-plan never runs code from a model directory"
            )


_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")  # what a fast tokenizer is loaded from
_CONVERTED_FILES = ("config.json", *_TOKENIZER_FILES)
_WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json")  # one file, or the index of its shards


def _whole(entry: Path, names: Sequence[str], weights: bool = False) -> bool:
    """Whether the cache entry ``entry`` holds the files ``names`` (and, with ``weights``, its weights).
    Entries appear whole, by a rename: one that lacks a file was damaged since (a file deleted by
    hand) and is made again."""
    files = all((entry / name).is_file() for name in names)
    return files and (not weights or any((entry / name).is_file() for name in _WEIGHTS_FILES))


def _convert_gguf(gguf: Path) -> Path:
    """Dequantize ``gguf`` once into a Hugging Face directory in the cache; return that directory.

    The conversion runs under the entry's :func:`cache_lock`: a second process that needs it at
    the same time waits and then loads the finished directory.
    """
    out = converted_dir(gguf)
    if _whole(out, _CONVERTED_FILES, weights=True):
        return out
    check_gguf(gguf)  # before the cache entry's folder and lock exist
    with cache_lock(out):
        if not _whole(out, _CONVERTED_FILES, weights=True):  # not converted by another process while this one waited
            if out.exists():  # only finished directories are renamed in: this one was damaged since
                shutil.rmtree(out)
            _convert_into(gguf, out)
    return out


def _causal_lm(source: Path, name: str, **options: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(source, **options)``, refusing in one line a checkpoint
    that lacks weights its config declares (a GGUF without one block's tensors, a directory with a
    shard left out): transformers would leave them as initialised, at random, and the model would run,
    wrong and without a word."""
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(str(source), output_loading_info=True, **options)
    model, info = loaded  # the model, and what the checkpoint lacked, held extra or held in another shape
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelNotFoundError(f"{name} lacks weights its config declares ({missing[0]}{more}); is it complete?")
    return model


@contextmanager
def _bar_on_terminal_only() -> Iterator[None]:
    """transformers draws the dequantization's progress bar (tqdm, on ``sys.stderr`` as each bar
    starts) whatever stderr is: it is shown on a terminal only, as the CLI's own bars are, so that
    a refusal read by a program or a log is its one line."""
    if sys.stderr.isatty():
        yield
        return
    with redirect_stderr(io.StringIO()):
        yield


def _convert_into(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` and save it as the Hugging Face directory ``out`` (atomic rename)."""
    from transformers import AutoTokenizer

    try:
        with _bar_on_terminal_only():
            model: Any = _causal_lm(gguf.parent, str(gguf), gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except ModelNotFoundError:
        raise
    except Exception as exc:  # a truncated or foreign GGUF fails in the reader with any kind of error
        raise ModelNotFoundError(f"cannot read GGUF file {gguf} ({type(exc).__name__}: {first_line(exc)}); is it complete?") from None
    # The weights are plain fp32 tensors after dequantization; drop the marker that forbids saving.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def write(path: Path) -> None:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)

    write_entry(out, write)


def _gguf_file(spec: ModelSpec) -> Path:
    """The GGUF file a llama.cpp level runs: a packaged alias's, or a ``.gguf`` path."""
    if spec.name in PACKAGED:
        return packaged_gguf(spec.name)
    path = Path(spec.name).expanduser()
    st = stat_path(path, "model")
    if path.suffix != ".gguf" or st is None or not stat.S_ISREG(st.st_mode):
        what = "does not exist" if st is None else "is not a .gguf file"
        raise ModelNotFoundError(f"{spec.name!r} {what}; the llama.cpp engine runs a packaged alias or a .gguf file")
    stat_input(path, "GGUF file", MAX_GGUF_BYTES)
    return path  # its layout is walked by the load, before any cache entry


def gguf_tokenizer(gguf: Path) -> Any:
    """The transformers tokenizer a GGUF file holds, read once and kept in the cache (reading it
    out of a GGUF's metadata takes seconds; loading the saved one, a fraction of that)."""
    from transformers import AutoTokenizer

    _silence_transformers()
    converted = converted_dir(gguf)
    out = converted.with_name(converted.name + "-tokenizer")
    if not _whole(out, _TOKENIZER_FILES):
        check_gguf(gguf)
        try:  # read before the cache entry's folder and lock exist: a file it fails on leaves nothing
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except Exception as exc:  # a truncated or foreign GGUF fails in the reader with any kind of error
            raise ModelNotFoundError(f"cannot read the tokenizer of {gguf} ({type(exc).__name__}: {first_line(exc)})") from None
        with cache_lock(out):
            if not _whole(out, _TOKENIZER_FILES):  # not saved by another process while this one waited
                if out.exists():  # damaged since it was renamed in whole
                    shutil.rmtree(out)
                write_entry(out, tokenizer.save_pretrained)
    try:
        return AutoTokenizer.from_pretrained(str(out))
    except Exception as exc:  # its files are there, but damaged: transformers fails with any kind of error
        raise ModelNotFoundError(
            f"cannot read the cached tokenizer {out} ({type(exc).__name__}: {first_line(exc)}); delete that folder to have it made again"
        ) from None


def _source_dir(spec: ModelSpec) -> Path:
    """The Hugging Face directory that holds the weights named by ``spec``."""
    name = spec.name
    if name in PACKAGED:
        return _convert_gguf(packaged_gguf(name))
    path = Path(name).expanduser()
    st = stat_path(path, "model")  # a symbolic link loop or a name too long is one line too
    if path.suffix == ".gguf":
        if st is None:
            raise ModelNotFoundError(f"GGUF file {name!r} does not exist")
        stat_input(path, "GGUF file", MAX_GGUF_BYTES)  # a FIFO would block the read of its magic bytes
        return _convert_gguf(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        if stat_path(path / "config.json", "model") is None:
            raise ModelNotFoundError(f"directory {name!r} has no config.json; it is not a Hugging Face model directory")
        return path
    known = ", ".join(sorted(PACKAGED))
    raise ModelNotFoundError(f"unknown model {name!r}: not a packaged alias ({known}), 'ngram', a model directory or a .gguf file")


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
        and attention backend (:func:`~.static_engine.static_kernels`).
        """
        if self.engine == "llamacpp":
            return f"llamacpp-{LLAMA_CPP_PYTHON}"
        if self.engine == "static":
            return static_kernels(self.device, self.packs)
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
        spec = parse_spec(spec) if isinstance(spec, str) else spec
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
            gguf = _gguf_file(spec)
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

        _silence_transformers()
        source = _source_dir(spec)
        _check_model_dir(source, spec)
        try:
            with warnings.catch_warnings():  # torch's remarks on a refused pickle would break the one-line error
                warnings.simplefilter("ignore", UserWarning)
                tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=False)
                model: Any = (
                    _random_model(source, dtype, self.device)
                    if spec.random_weights
                    else _causal_lm(source, spec.name, dtype=resolve_dtype(dtype), trust_remote_code=False)
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
