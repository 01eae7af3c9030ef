"""A directory of trained weights with a JSON card beside them (block-draft heads, steering).

Files are written into a private folder inside the directory first, given the mode the umask
allows (what a card gets: a team can load a shared directory) and renamed into place one by one,
so each is whole or untouched and nothing half-written stays behind (:func:`write_files`).
Reading refuses, with one line that says what to do, a directory without its card, a card that
is not valid JSON of the expected kind or of another format, and weights that do not fit the
module the card describes; every file is checked a regular file of bounded size before it is
opened, so a FIFO or a device in its place never blocks the read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from torch import nn

from ..models.cache import shareable
from ..models.files import open_input, read_input, staging_folder, stat_path
from ..terms.errors import ModelSpecError, PathError, first_line
from ..terms.json_text import JSONTextError, parse_json
from ..terms.limits import MAX_CONFIG_BYTES

__all__ = ["load_weights", "read_card_file", "save_trained", "write_files"]

C = TypeVar("C", bound=BaseModel)
# room for a safetensors file's JSON header beside the fp32 tensors the card describes
HEADER_BYTES = MAX_CONFIG_BYTES


def write_files(folder: Path, what: str, write: Callable[[Path], None], last: Sequence[str] = ()) -> None:
    """Call ``write(stage)`` on a new private folder inside ``folder`` (made, with its parents,
    when missing), then give every file written there the mode the umask allows and rename it
    over its name in ``folder`` (the names in ``last`` last, in that order: a card after the
    weights it describes; a subfolder's files into that subfolder).

    Any failure (no space, no permission, a folder that vanished) is one line naming ``what`` and
    ``folder``; the stage is removed whatever happens.
    """
    try:
        with staging_folder(folder) as stage:
            write(stage)
            shareable(stage)  # mkdtemp and safetensors' own temporary files start private (0700, 0600)
            _move_into(stage, folder, last)
    except Exception as exc:
        if not _write_failure(exc):
            raise
        raise PathError(f"cannot write {what} into {folder}: {getattr(exc, 'strerror', None) or first_line(exc)}") from None


def _write_failure(exc: Exception) -> bool:
    """Whether ``exc`` is a failed write: an OSError, torch's zip writer's RuntimeError, or
    safetensors' own error (which wraps the OS's)."""
    return isinstance(exc, (OSError, RuntimeError)) or type(exc).__name__ == "SafetensorError"


def _move_into(stage: Path, folder: Path, last: Sequence[str]) -> None:
    """Rename every file of ``stage`` over its name in ``folder`` (subfolders merged), ``last`` last."""
    order = {name: i + 1 for i, name in enumerate(last)}
    for entry in sorted(stage.iterdir(), key=lambda p: (order.get(p.name, 0), p.name)):
        if entry.is_dir() and not entry.is_symlink():
            (folder / entry.name).mkdir(exist_ok=True)
            _move_into(entry, folder / entry.name, ())
        else:
            os.replace(entry, folder / entry.name)


def save_trained(folder: Path, weights: str, module: nn.Module, card_file: str, card: BaseModel) -> None:
    """Write ``module``'s state (fp32, CPU) as ``folder/weights`` and ``card`` as ``folder/card_file``
    (:func:`write_files`: both shareable, each whole or untouched, the card last)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().float().contiguous().cpu() for k, v in module.state_dict().items()}

    def write(stage: Path) -> None:
        save_file(tensors, str(stage / weights))
        (stage / card_file).write_text(card.model_dump_json(indent=1))

    write_files(folder, f"{card_file} and {weights}", write, last=(card_file,))


def read_card_file(folder: Path, card_file: str, kind: type[C], fmt: int, what: str, remedy: str) -> C:
    """The card ``folder/card_file`` as ``kind`` (whose ``format`` must be ``fmt``).

    ``what`` names the directory's kind (``a heads directory``) and ``remedy`` the command that
    makes one, for the one-line errors. A FIFO, device or folder in the card's place is refused
    before it is opened; text :func:`~hsd_runtime.terms.json_text.parse_json` refuses (malformed,
    nested too deep, an overlong number) is refused as invalid.
    """
    path = folder / card_file
    if stat_path(path, f"card of {what}") is None:
        raise ModelSpecError(f"{folder} is not {what} (no {card_file}); make one with {remedy}")
    data = read_input(path, "card", MAX_CONFIG_BYTES)
    try:
        card = kind.model_validate(parse_json(data))
    except JSONTextError as exc:
        raise ModelSpecError(f"{path} is not a valid card: it {exc}; run {remedy} again") from None
    except (ValueError, ValidationError) as exc:
        raise ModelSpecError(f"{path} is not a valid card ({type(exc).__name__}); run {remedy} again") from None
    if getattr(card, "format", None) != fmt:
        raise ModelSpecError(f"{path} has format {getattr(card, 'format', None)}, this hsd-plan reads {fmt}; run {remedy} again")
    return card


def load_weights(path: Path, module: nn.Module, remedy: str) -> None:
    """Load the safetensors file ``path`` into ``module``; one line when it cannot be.

    The file must be a regular file no larger than ``module``'s fp32 tensors and a header: checked
    before it is opened, and again on the open descriptor, which safetensors then reads (never the
    name, which could have been swapped for a FIFO meanwhile).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    limit = sum(t.numel() * 4 for t in module.state_dict().values()) + HEADER_BYTES
    with open_input(path, "weights file", limit) as fh:
        try:
            module.load_state_dict(load_file(_descriptor_path(fh.fileno(), path)))
        except (OSError, SafetensorError, RuntimeError) as exc:
            raise ModelSpecError(
                f"{path} cannot be read as the weights its card describes ({type(exc).__name__}); run {remedy} again"
            ) from None


def _descriptor_path(fd: int, path: Path) -> str:
    """A name that opens the very file of the open descriptor ``fd`` (``/proc/self/fd/N`` or
    ``/dev/fd/N``), for readers that take a name only; ``path`` itself where there is none."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        name = f"{folder}/{fd}"
        if os.path.exists(name):
            return name
    return str(path)
