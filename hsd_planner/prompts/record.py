"""Which prompts a trained drafter was trained on: a record written beside it, read by ``profile``.

A drafter's acceptance measured on prompts it was trained on is its training acceptance, and the
plans it is in would be predicted faster than they run on new prompts. The trainers write the
digests of their training prompts into ``trained_prompts.json`` in their output folder (a student,
a heads or a steering directory); ``profile`` counts how many of its prompts a candidate's folders
list and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from hsd_runtime.models.files import read_input
from hsd_runtime.terms.json_text import parse_json

from ..limits import MAX_RECORD_BYTES
from .sets import PromptSet, prompt_digest

__all__ = ["TRAINED_PROMPTS", "trained_digests", "trained_on", "write_trained_prompts"]

TRAINED_PROMPTS = "trained_prompts.json"


def write_trained_prompts(folder: Path, prompts: PromptSet, reserve: int) -> None:
    """Record in ``folder`` the digests of ``prompts`` (a trainer's training split) and the reserve it left."""
    record = {"prompts": prompts.name, "reserve": reserve, "digests": sorted({prompt_digest(p) for p in prompts.prompts})}
    (folder / TRAINED_PROMPTS).write_text(json.dumps(record))


def trained_digests(folder: Path) -> set[str]:
    """The digests of the prompts the drafter in ``folder`` was trained on (empty without a readable record)."""
    path = folder / TRAINED_PROMPTS
    if not path.is_file():
        return set()
    try:
        return {str(d) for d in parse_json(read_input(path, "trained-prompts record", MAX_RECORD_BYTES))["digests"]}
    except (ValueError, KeyError, TypeError):
        return set()  # a damaged record says nothing; the drafter itself is checked where it is loaded


def trained_on(folder: Path, prompts: PromptSet) -> int:
    """How many of ``prompts`` the drafter in ``folder`` was trained on (0 without a readable record)."""
    digests = trained_digests(folder)
    return sum(prompt_digest(p) in digests for p in prompts.prompts)
