"""Model names as the server knows them: ``--model-map spec=served-name``.

A plan names models by hsd-plan spec (a packaged alias, an absolute path); a server knows them by
its own names (a Hugging Face id, a GGUF path). Without a map, the spec is the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from hsd_runtime.terms.spec import check_printable, parse_spec

from ..errors import ExportError, ModelSpecError
from ..profiling.sources import absolute_spec

__all__ = ["check_mapped", "gguf_names", "parse_model_map"]


def parse_model_map(entries: Iterable[str]) -> dict[str, str]:
    """``["qwen2.5-coder-0.5b=Qwen/Qwen2.5-Coder-0.5B-Instruct"]`` -> ``{spec: served name}``.

    A spec holds ``=`` in its options (``m:dtype=bf16``), a served name does not: the last ``=``
    splits them. Path specs are made absolute, as they are stored.

    >>> parse_model_map(["m:dtype=bf16=org/m"])
    {'m:dtype=bf16': 'org/m'}
    """
    out: dict[str, str] = {}
    for entry in entries:
        spec, sep, name = entry.rpartition("=")
        if not sep or not spec.strip() or not name.strip():
            raise ExportError(f"--model-map {entry!r} is not spec=served-name")
        try:
            key = absolute_spec(spec)
            check_printable(name, f"the served name {name.strip()[:200]!r}")  # it goes into the export's commands and code
        except ModelSpecError as exc:
            raise ExportError(f"--model-map {entry!r}: {exc}") from None
        if key in out:
            raise ExportError(f"--model-map names {key} twice")
        out[key] = name.strip()
    return out


def check_mapped(model_map: dict[str, str], chains: Sequence[Sequence[str]]) -> None:
    """Every mapped spec is a model of one of ``chains`` (the pick or the plan exported): a map
    for another model is a typo that would otherwise pass unnoticed."""
    known = {form for chain in chains for name in chain for form in (name, str(parse_spec(name).loads))}
    for spec in model_map:
        if spec not in known:
            raise ExportError(f"--model-map names {spec}, which is not in the plan ({', '.join(sorted(known))})")


def gguf_names(chains: Sequence[Sequence[str]]) -> dict[str, str]:
    """The GGUF file of each model of ``chains`` that a llama.cpp server can load as it is: a
    packaged alias's file, a ``.gguf`` path, and llama.cpp's re-quantized copy of either (``quant=``,
    once hsd-plan has made it into the cache). Others are left to ``--model-map``."""
    from hsd_runtime.models.packaged import PACKAGED, packaged_gguf, quantized_path
    from hsd_runtime.terms.choices import GGUF_QUANTS
    from hsd_runtime.terms.errors import HSDError

    out: dict[str, str] = {}
    for name in {n for chain in chains for n in chain}:
        spec = parse_spec(name).loads  # a pmin= drafter loads its model's file
        if not spec.is_model or any(spec.get(k) is not None for k in ("layers", "vocab", "steer")):
            continue
        try:
            gguf = packaged_gguf(spec.name) if spec.name in PACKAGED else Path(spec.name) if spec.name.endswith(".gguf") else None
        except HSDError:  # a package not installed here: the spec stays the name
            gguf = None
        if gguf is None:
            continue
        if spec.quant in GGUF_QUANTS:
            gguf = quantized_path(gguf, spec.quant)
            if not gguf.is_file():
                continue
        elif spec.quant is not None:
            continue
        out[name] = str(gguf)
    return out
