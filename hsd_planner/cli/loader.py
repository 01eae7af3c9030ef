"""The model loader of a command that runs models: ``--dtype auto`` resolved, a refused CPU packing said once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

__all__ = ["make_loader", "resolve_dtype_choice"]

if TYPE_CHECKING:
    from hsd_runtime import ModelLoader


def resolve_dtype_choice(dtype: str, device: str) -> str:
    """The concrete dtype for ``--dtype`` (``auto`` resolved for ``device``).

    Every report names the dtype it ran in (and profiles the CPU capability behind the choice),
    so the choice is not announced apart: an error stays one line.
    """
    if dtype != "auto":
        return dtype
    from hsd_runtime import auto_dtype, resolve_device

    return auto_dtype(resolve_device(device))


# the torch engine on a GPU, measured on an H200 (docs/benchmarks/gpu.md): a transformers pass is
# bound by its kernel launches, 16 ms for a 0.5B and 19 ms for a 7B
LAUNCH_BOUND = (
    "on a GPU the torch engine is bound by kernel launches (a pass of a 0.5B costs about what a 7B's does, so model drafters "
    "rarely pay); --engine static runs Llama and Qwen2 models over static caches with CUDA graphs"
)


def make_loader(device: str, dtype: str, prepack: bool = True, engine: str = "torch", advise: bool = True) -> ModelLoader:
    """The loader of a command that runs models (``dtype`` already concrete), saying once on stderr
    when prepacking was asked for and this CPU cannot pack ``dtype``: those models then run torch's
    plain kernels, and profiles taken with them are stored as plain. With ``advise`` (the command's
    ``--engine`` chose the engine), a torch engine on a GPU is told of the static engine."""
    from hsd_runtime import ModelLoader

    loader = ModelLoader(device=device, dtype=dtype, prepack=prepack, engine=engine)
    if engine == "torch" and loader.prepack_refusal is not None:
        click.echo(f"note: {loader.prepack_refusal}; {dtype} models run torch's plain kernels", err=True)
    if advise and engine == "torch" and loader.device.type == "cuda":
        click.echo(f"note: {LAUNCH_BOUND}", err=True)
    return loader
