"""Model sources on disk: absolute paths for path specs, and a fingerprint of their files.

A spec naming a directory or a ``.gguf`` file is stored with its absolute path, so that a plan
run from another working directory runs the same model; the fingerprint (config bytes, weight
file names, sizes and modification times) tells when the files changed since profiling.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hsd_runtime.models.files import read_input, stat_path
from hsd_runtime.models.packaged import PACKAGED
from hsd_runtime.terms.limits import MAX_CONFIG_BYTES
from hsd_runtime.terms.spec import BPD, ModelSpec, check_printable, parse_spec

from ..errors import StoreError
from ..prompts import PromptSet, trained_on

__all__ = ["absolute_spec", "absolute_specs", "check_source", "source_fingerprint", "trained_overlaps", "with_engine"]

_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def _local_path(spec: ModelSpec) -> Path | None:
    if spec.is_ngram or spec.name in PACKAGED:
        return None
    path = Path(spec.heads_dir if spec.is_bpd else spec.name).expanduser()
    return path if stat_path(path, "model") is not None else None  # a loop or an overlong name is one line


def _option_files(spec: ModelSpec) -> dict[str, Path]:
    """The options of ``spec`` that name files it reads: a steering directory, a vocab ranking,
    an n-gram corpus (by key; only those that exist)."""
    out = {}
    for key, value in spec.options:
        if key in ("steer", "corpus") or (key == "vocab" and not (value.isascii() and value.isdigit())):
            path = Path(value).expanduser()
            if stat_path(path, key) is not None:
                out[key] = path
    return out


def trained_overlaps(specs: list[str], prompts: PromptSet) -> list[tuple[str, int]]:
    """(spec, n) for each of ``specs`` that reads a trained folder (a student, heads or steering
    directory) whose record lists ``n`` > 0 of ``prompts`` as trained on."""
    out = []
    for text in specs:
        spec = parse_spec(text)
        folders = [p for p in (_local_path(spec), *_option_files(spec).values()) if p is not None and p.is_dir()]
        n = max((trained_on(p, prompts) for p in folders), default=0)
        if n:
            out.append((text, n))
    return out


def absolute_spec(text: str) -> str:
    """``text`` with a local model path and the files its options name (steering directory, vocab
    ranking, n-gram corpus) made absolute (other specs unchanged). The absolute form is checked for
    control characters as the typed one was: the working folder or a link may add them.

    >>> absolute_spec("ngram:n=4")
    'ngram:n=4'
    """
    spec = parse_spec(text)
    files = {key: str(path.resolve()) for key, path in _option_files(spec).items()}
    if files:
        spec = spec.model_copy(update={"options": tuple((k, files.get(k, v)) for k, v in spec.options)})
    path = _local_path(spec)
    if path is not None:
        name = str(path.resolve())
        spec = spec.model_copy(update={"name": f"{BPD}:{name}" if spec.is_bpd else name})
    check_printable(str(spec), f"model spec {text[:200]!r}, made absolute ({str(spec)[:200]!r}),")
    return str(spec)


def absolute_specs(texts: list[str] | tuple[str, ...]) -> list[str]:
    """:func:`absolute_spec` of each."""
    return [absolute_spec(t) for t in texts]


def with_engine(texts: list[str], engine: str) -> list[str]:
    """Model specs run on ``engine``: a model spec without ``engine=`` gets ``engine=ENGINE``
    appended where the engine is not torch (a model's profile, its acceptance included, is that
    engine's: llama.cpp runs the GGUF's quantized weights, torch their dequantized copy).

    >>> with_engine(["ngram", "smollm2-135m", "x.gguf:engine=torch"], "llamacpp")
    ['ngram', 'smollm2-135m:engine=llamacpp', 'x.gguf:engine=torch']
    """
    if engine == "torch":
        return list(texts)
    out = []
    for text in texts:
        spec = parse_spec(text)
        out.append(f"{text}:engine={engine}" if spec.is_model and spec.engine is None else text)
    return out


def source_fingerprint(spec_text: str) -> str | None:
    """A digest of a local model's (or heads directory's) config and weight files, and of the files
    its options name (None for ngram and packaged aliases that name none)."""
    spec = parse_spec(spec_text)
    paths = [p for p in (_local_path(spec), *_option_files(spec).values()) if p is not None]
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        files = [path] if path.is_file() else sorted(f for pattern in _WEIGHTS for f in path.glob(pattern))
        for config in ("config.json", "steering.json", "heads.json"):
            if path.is_dir() and (path / config).is_file():
                digest.update(read_input(path / config, f"{spec_text}:", MAX_CONFIG_BYTES))
        for f in files:
            st = f.stat()
            digest.update(f"{f.name}|{st.st_size}|{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def check_source(spec_text: str, stored: str | None) -> None:
    """Refuse a model whose files are gone or changed since they were profiled."""
    if stored is None:
        return
    spec = parse_spec(spec_text)
    if _local_path(spec) is None and not _option_files(spec):
        raise StoreError(f"model {spec.name} was profiled but no longer exists; profile the model you mean again")
    if source_fingerprint(spec_text) != stored:
        raise StoreError(f"model {spec.name} changed on disk since it was profiled (config or weights); profile it again")
