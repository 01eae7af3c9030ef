"""Model names as the server knows them: ``--model-map spec=served-name``.

A plan names models by hsd-plan spec (a packaged alias, an absolute path); a server knows them by
its own names (a Hugging Face id, a GGUF path). Without a map, the spec is the name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import ExportError, ModelSpecError
from ..profiling.sources import absolute_spec

__all__ = ["check_mapped", "parse_model_map"]


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
        except ModelSpecError as exc:
            raise ExportError(f"--model-map {entry!r}: {exc}") from None
        if key in out:
            raise ExportError(f"--model-map names {key} twice")
        out[key] = name.strip()
    return out


def check_mapped(model_map: dict[str, str], chains: Sequence[Sequence[str]]) -> None:
    """Every mapped spec is a model of one of ``chains`` (the pick or the plan exported): a map
    for another model is a typo that would otherwise pass unnoticed."""
    known = {name for chain in chains for name in chain}
    for spec in model_map:
        if spec not in known:
            raise ExportError(f"--model-map names {spec}, which is not in the plan ({', '.join(sorted(known))})")
