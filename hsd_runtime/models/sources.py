"""Where a spec's weights come from: packaged aliases, Hugging Face directories and GGUF files.

A GGUF file the torch engine runs is dequantized once into a Hugging Face directory in the model
cache (:func:`convert_gguf`), and its tokenizer is kept there too (:func:`gguf_tokenizer`); a
directory is checked before transformers reads it (:func:`check_model_dir`).
"""

from __future__ import annotations

import io
import itertools
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

import torch

from ..terms.errors import ModelNotFoundError, first_line
from ..terms.json_text import JSONTextError, parse_json
from ..terms.limits import MAX_CONFIG_BYTES, MAX_DIR_ENTRIES, MAX_GGUF_BYTES
from ..terms.spec import ModelSpec
from .cache import cache_lock, write_entry
from .device import resolve_dtype
from .files import describe_mode, read_input, stat_input, stat_path
from .gguf_file import check_gguf
from .packaged import PACKAGED, converted_dir, packaged_gguf

__all__ = [
    "causal_lm",
    "check_model_dir",
    "convert_gguf",
    "gguf_of",
    "gguf_tokenizer",
    "random_model",
    "silence_transformers",
    "source_dir",
]


def silence_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def random_model(source: Path, dtype: str, device: torch.device) -> Any:
    """The model of ``source``'s config with random weights (``weights=random``), made on ``device``
    (a 7B is initialised in seconds on a GPU, minutes on a CPU): no weight file is read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(source), trust_remote_code=False)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=resolve_dtype(dtype), trust_remote_code=False)


def check_model_dir(source: Path, spec: ModelSpec) -> None:
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


def convert_gguf(gguf: Path) -> Path:
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


def causal_lm(source: Path, name: str, **options: Any) -> Any:
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
            model: Any = causal_lm(gguf.parent, str(gguf), gguf_file=gguf.name, dtype=torch.float32)
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


def gguf_of(spec: ModelSpec) -> Path:
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

    silence_transformers()
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


def source_dir(spec: ModelSpec) -> Path:
    """The Hugging Face directory that holds the weights named by ``spec``."""
    name = spec.name
    if name in PACKAGED:
        return convert_gguf(packaged_gguf(name))
    path = Path(name).expanduser()
    st = stat_path(path, "model")  # a symbolic link loop or a name too long is one line too
    if path.suffix == ".gguf":
        if st is None:
            raise ModelNotFoundError(f"GGUF file {name!r} does not exist")
        stat_input(path, "GGUF file", MAX_GGUF_BYTES)  # a FIFO would block the read of its magic bytes
        return convert_gguf(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        if stat_path(path / "config.json", "model") is None:
            raise ModelNotFoundError(f"directory {name!r} has no config.json; it is not a Hugging Face model directory")
        return path
    known = ", ".join(sorted(PACKAGED))
    raise ModelNotFoundError(f"unknown model {name!r}: not a packaged alias ({known}), 'ngram', a model directory or a .gguf file")
