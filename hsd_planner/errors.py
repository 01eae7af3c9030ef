"""The one error hierarchy of hsd-plan, torch-free.

Every error a user can act on derives from :class:`HSDError`, defined in ``hsd_runtime.terms.errors``
(the runtime cannot import the planner) and re-exported here with the planner's own kinds. The CLI
turns any of them into one line ``Error: <message>`` and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from hsd_runtime.terms.errors import (
    ChainError,
    HSDError,
    ModelNotFoundError,
    ModelOutputError,
    ModelSpecError,
    PackageMissingError,
    PathError,
    PromptError,
    TokenizerMismatchError,
    first_line,
)

__all__ = [
    "BusyMachineError",
    "ChainError",
    "DistillError",
    "ExportError",
    "HSDError",
    "ModelNotFoundError",
    "ModelOutputError",
    "ModelSpecError",
    "PackageMissingError",
    "PathError",
    "PromptError",
    "SolverError",
    "StoreError",
    "TokenizerMismatchError",
    "first_line",
]


class SolverError(HSDError):
    """The candidates and profiles cannot produce a plan."""


class StoreError(HSDError):
    """The database cannot be opened or does not hold what was asked for."""


class DistillError(HSDError):
    """A distillation that cannot start or go on (bad input, no checkpoint, out of memory)."""


class ExportError(HSDError):
    """A plan that cannot be exported as asked: an unknown format or version, a bad model name
    map, a target the stack cannot load, or a file that may not be written."""


class BusyMachineError(HSDError):
    """Other work kept sharing the CPU while latencies were timed, past the re-measuring's patience."""
