"""A directory of trained weights with a JSON card beside them (block-draft heads, steering).

Both files are replaced atomically on save; reading refuses, with one line that says what to do,
a directory without its card, a card that is not valid JSON of the expected kind or of another
format, and weights that do not fit the module the card describes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from torch import nn

from .errors import ModelSpecError
from .files import MAX_CONFIG_BYTES, read_input

__all__ = ["load_weights", "read_card_file", "save_trained"]

C = TypeVar("C", bound=BaseModel)


def save_trained(folder: Path, weights: str, module: nn.Module, card_file: str, card: BaseModel) -> None:
    """Write ``module``'s state (fp32, CPU) as ``folder/weights`` and ``card`` as ``folder/card_file``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().float().contiguous().cpu() for k, v in module.state_dict().items()}
    save_file(tensors, str(folder / (weights + ".tmp")))
    (folder / (weights + ".tmp")).replace(folder / weights)
    (folder / (card_file + ".tmp")).write_text(card.model_dump_json(indent=1))
    (folder / (card_file + ".tmp")).replace(folder / card_file)


def read_card_file(folder: Path, card_file: str, kind: type[C], fmt: int, what: str, remedy: str) -> C:
    """The card ``folder/card_file`` as ``kind`` (whose ``format`` must be ``fmt``).

    ``what`` names the directory's kind (``a heads directory``) and ``remedy`` the command that
    makes one, for the one-line errors.
    """
    path = folder / card_file
    if not path.is_file():
        raise ModelSpecError(f"{folder} is not {what} (no {card_file}); make one with {remedy}")
    try:
        card = kind.model_validate(json.loads(read_input(path, f"card {path}", MAX_CONFIG_BYTES)))
    except (ValueError, ValidationError) as exc:
        raise ModelSpecError(f"{path} is not a valid card ({type(exc).__name__}); run {remedy} again") from None
    if getattr(card, "format", None) != fmt:
        raise ModelSpecError(f"{path} has format {getattr(card, 'format', None)}, this hsd-plan reads {fmt}; run {remedy} again")
    return card


def load_weights(path: Path, module: nn.Module, remedy: str) -> None:
    """Load the safetensors file ``path`` into ``module``; one line when it cannot be."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        module.load_state_dict(load_file(str(path)))
    except (OSError, SafetensorError, RuntimeError) as exc:
        raise ModelSpecError(
            f"{path} cannot be read as the weights its card describes ({type(exc).__name__}); run {remedy} again"
        ) from None
