"""A prompt in its model's chat template, rendered with bounds on time, memory and output.

A chat template (a model folder's ``chat_template.jinja`` or ``tokenizer_config.json``, a GGUF's
``tokenizer.chat_template``) is a program the model's author wrote. transformers runs it in
jinja2's sandbox, which keeps it from Python's internals but not from the machine: ``{{ 'x' *
10**10 }}`` builds a 10 GB string, two nested ``range(100000)`` loops run for hours, and a
template that raises or does not parse ends in a traceback. Here the template is compiled in
transformers' own environment (its filters, globals and extensions, in an overlay: the text is what
``apply_chat_template`` renders) and rendered under bounds, each refused in one line naming the file:

- time: :data:`RENDER_SECONDS` of wall clock, checked on every line the compiled template runs (a
  trace function on its frames alone), so no loop of it runs on;
- arithmetic that builds a huge value in one step (``*`` and ``**`` on strings, lists and
  integers) is refused before it runs: one such step could not be stopped midway;
- memory: while it renders, the process's address space may grow by :data:`RENDER_BYTES`
  (``RLIMIT_AS``, lowered for the render and restored, where Linux reports the current size):
  any other way to build a huge value (a filter's width, a string doubled in a loop) fails
  with a MemoryError instead of taking the machine;
- output: at most :data:`~hsd_planner.limits.MAX_RENDERED_CHARS` characters, streamed.
"""

from __future__ import annotations

import functools
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ..errors import PromptError, first_line
from ..limits import MAX_RENDERED_CHARS

__all__ = ["RENDER_BYTES", "RENDER_SECONDS", "render_chat"]

RENDER_SECONDS = 5.0  # a template renders in a millisecond or two
RENDER_BYTES = 1 << 30  # address space a render may add
_MAX_BITS = 1 << 16  # an integer built by * or ** (a template counts tokens and positions: 64 bits would do)
_TEMPLATE_FILE = "<template>"  # the file name of the code jinja2 compiles a template string to


class _Overrun(Exception):
    """The render ran past its time."""


def render_chat(tokenizer: Any, text: str) -> str:
    """``text`` as the user's message in ``tokenizer``'s chat template, with the assistant's turn
    opened, as ``tokenizer.apply_chat_template(..., add_generation_prompt=True, tokenize=False)``
    renders it; :class:`PromptError` in one line for a template that does not parse, raises, runs
    past :data:`RENDER_SECONDS`, needs more than :data:`RENDER_BYTES` or renders more than
    :data:`MAX_RENDERED_CHARS` characters."""
    import jinja2

    where = _template_file(tokenizer)
    variables = {
        **tokenizer.special_tokens_map,  # bos_token, eos_token, ...: what apply_chat_template passes beside the messages
        "messages": [{"role": "user", "content": text}],
        "tools": None,
        "documents": None,
        "add_generation_prompt": True,
    }
    pieces: list[str] = []
    size = 0
    try:
        with _time_bound(time.monotonic() + RENDER_SECONDS), _memory_bound(RENDER_BYTES):
            template = _compiled(tokenizer.get_chat_template())  # compiling folds constants: bounded too
            for piece in template.generate(**variables):
                size += len(piece)
                if size > MAX_RENDERED_CHARS:
                    raise PromptError(f"the chat template {where} renders more than {MAX_RENDERED_CHARS:,} characters for one prompt")
                pieces.append(piece)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"the chat template {where} does not parse: {' '.join(str(exc.message).split())} (line {exc.lineno})") from None
    except _Overrun:
        raise PromptError(f"the chat template {where} ran past {RENDER_SECONDS:g} s for one prompt; it was stopped") from None
    except MemoryError:
        raise PromptError(f"the chat template {where} needed more than {RENDER_BYTES >> 20:,} MiB for one prompt; it was stopped") from None
    except PromptError:
        raise
    except Exception as exc:  # raise_exception(...), an undefined name's use, a sandbox refusal, a RecursionError: any kind
        raise PromptError(f"the chat template {where} failed: {type(exc).__name__}: {first_line(exc)}") from None
    return "".join(pieces)


def _template_file(tokenizer: Any) -> str:
    """Where ``tokenizer``'s chat template was read from, as an error names it."""
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or "."))
    jinja = folder / "chat_template.jinja"
    return str(jinja if jinja.is_file() else folder / "tokenizer_config.json")


@functools.cache
def _environment() -> Any:
    """An overlay of transformers' chat-template environment (taken from an empty template's: a
    template's own compilation there would fold its constants, ``'x' * 10**10`` included, unbounded)
    whose ``*`` and ``**`` refuse to build a huge value: the sandbox routes the operators it
    intercepts through its ``binop_table``, and folds none of them at compile time."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    env = _compile_jinja_template("").environment.overlay()
    env.intercepted_binops = frozenset({"*", "**"})
    env.binop_table = {**env.binop_table, "*": _times, "**": _power}
    return env


@functools.lru_cache(maxsize=8)
def _compiled(source: str) -> Any:
    """The template ``source`` compiled in :func:`_environment` (once per template)."""
    return _environment().from_string(source)


def _times(left: Any, right: Any) -> Any:
    """``left * right``, refused where it would build a string or list past the output's bound or a huge integer."""
    from jinja2.exceptions import SecurityError

    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_RENDERED_CHARS:
            raise SecurityError(f"a {type(seq).__name__} of {len(seq):,} times {n:,} is past {MAX_RENDERED_CHARS:,} items")
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > _MAX_BITS:
        raise SecurityError(f"a product of more than {_MAX_BITS:,} bits")
    return left * right


def _power(left: Any, right: Any) -> Any:
    """``left ** right``, refused where it would build a huge integer."""
    from jinja2.exceptions import SecurityError

    if isinstance(left, int) and isinstance(right, int) and right > 0 and right * max(0, abs(left).bit_length() - 1) > _MAX_BITS:
        raise SecurityError(f"a power of more than {_MAX_BITS:,} bits")
    return left**right


@contextmanager
def _time_bound(deadline: float) -> Iterator[None]:
    """Raise :class:`_Overrun` in the template's code once ``deadline`` (``time.monotonic``) passes.

    A trace function is called on every line of the frames it traces: it traces the compiled
    template's frames (its body, macros and loops) and no other, so the rest runs as fast as ever.
    The trace function that was set before (a debugger's, coverage's) is set again after."""

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _Overrun
        return line

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename == _TEMPLATE_FILE else None

    before = sys.gettrace()
    sys.settrace(call)
    try:
        yield
    finally:
        sys.settrace(before)


@contextmanager
def _memory_bound(extra: int) -> Iterator[None]:
    """Let the address space grow by ``extra`` bytes at most while the block runs (``RLIMIT_AS``, a
    soft limit this process lowers and raises again); no bound where the current size is not
    known (``/proc/self/statm`` is Linux's) or a tighter limit is set already."""
    statm = Path("/proc/self/statm")
    if not statm.is_file():
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(statm.read_text().split()[0]) * resource.getpagesize() + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
