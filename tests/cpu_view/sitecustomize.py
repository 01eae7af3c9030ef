"""The AVX2 view for Python subprocesses that the tests start (the CLI run as a program).

``tests/conftest.py`` puts this folder first on ``PYTHONPATH`` when ``HSD_PLAN_TEST_CPU=avx2``, so
every Python process a test starts imports it at start-up. When (and only if) that process imports
torch, ``torch.cpu``'s capability probes answer as an AVX2-only CPU does, like the test process
itself: ``--dtype auto`` is fp32 there too, and a profile stored by a subprocess keys the same
machine as one stored in-process. Nothing is imported early (a process that never imports torch
still does not). oneDNN already refuses to pack bf16 in such a process (``ONEDNN_MAX_CPU_ISA=AVX2``
is inherited). Any other ``sitecustomize`` on the path still runs after this one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

PROBES = ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_vnni_supported")


class _AnswerAsAvx2(importlib.abc.MetaPathFinder):
    """Finds ``torch.cpu`` as usual and, once it has run, replaces its probes."""

    def find_spec(self, fullname: str, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            for probe in PROBES:
                setattr(module, probe, lambda: False)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("HSD_PLAN_TEST_CPU") == "avx2":
    sys.meta_path.insert(0, _AnswerAsAvx2())

_here = str(Path(__file__).resolve().parent)
_rest = [p for p in sys.path if p and str(Path(p).resolve()) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:  # the machine's own sitecustomize, shadowed by this one
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
