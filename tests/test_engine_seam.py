"""The engine seam, read from the source and run: only the engine modules tell engines apart by an
object's type or attributes, and every engine's model answers the seam's questions.

Everything else asks :func:`~hsd_runtime.models.torch_engine.engine_model` for a member's
:class:`~hsd_runtime.models.engine.EngineModel` (``.engine``, ``.n_vocab``, ``.open_cache`` ...)
instead of guessing its engine from ``isinstance(model, nn.Module)`` or ``hasattr(model, "open_cache")``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch

from hsd_runtime import ChainError, EngineModel, engine_model
from hsd_runtime.models.engine import ENGINES
from hsd_runtime.models.static_engine import StaticModel
from hsd_runtime.models.torch_engine import TorchModel
from tests.tiny import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hsd_runtime", "hsd_planner")

# the modules that hold the engines: the only ones that may look at a model's type
ENGINE_MODULES = {f"hsd_runtime.models.{m}" for m in ("engine", "torch_engine", "torch_rows", "static_engine", "llamacpp")}
# the loader builds the engines' models (it knows the engine a spec names); the package exports them
BUILDERS = {"hsd_runtime.models.loading", "hsd_runtime"}

# an engine's own classes (the protocol may be imported to annotate with; no isinstance against it)
ENGINE_CLASSES = {"GgufModel", "StaticModel", "TorchModel", "LlamaCppCache", "StaticCache", "TorchCache", "RowsCache"}
PROTOCOLS = {"EngineModel", "EngineCache", "EngineRows"}
MODULE_TYPES = {"Module"}  # nn.Module, torch.nn.Module, Module
# attributes that only a model of one engine or another has: probing for them guesses the engine
PROBES = {"open_cache", "open_rows", "n_vocab", "n_ctx", "n_params", "allocates_cells", "context_limit", "engine"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_names(node: ast.expr) -> list[str]:
    """The last names of the types an ``isinstance`` second argument names (a tuple's each)."""
    if isinstance(node, ast.Tuple):
        return [name for elt in node.elts for name in _type_names(elt)]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Name):
        return [node.id]
    return []


def engine_guesses(module: str, source: str) -> list[str]:
    """Every place ``source`` (the module ``module``) tells engines apart by itself: ``isinstance``
    or ``issubclass`` against a module or an engine's class, ``hasattr``/``getattr`` of an attribute
    only some engines' models have, an engine class's name compared as text, an engine class imported."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            name, probe = node.func.id, node.args[1]
            if name in ("isinstance", "issubclass"):
                hit = set(_type_names(probe)) & (ENGINE_CLASSES | PROTOCOLS | MODULE_TYPES)
                if hit:
                    found.append(f"{where} {name}(..., {', '.join(sorted(hit))})")
            elif name in ("hasattr", "getattr") and isinstance(probe, ast.Constant) and probe.value in PROBES:
                found.append(f"{where} {name}(..., {probe.value!r})")
        elif isinstance(node, ast.Compare):
            texts = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
            if any(t in ENGINE_CLASSES for t in texts if isinstance(t, str)):
                found.append(f"{where} compares a type's name")
        elif isinstance(node, ast.ImportFrom) and module not in BUILDERS:
            hit = {a.name for a in node.names} & ENGINE_CLASSES
            if hit:
                found.append(f"{where} imports {', '.join(sorted(hit))}")
    return found


def test_only_the_engine_modules_tell_engines_apart():
    offenders = [
        guess for module, path in _modules().items() if module not in ENGINE_MODULES for guess in engine_guesses(module, path.read_text())
    ]
    assert offenders == [], "engines guessed outside the engine modules (ask engine_model(member) instead):\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "line",
    [
        "if isinstance(model, nn.Module): pass",
        "if not isinstance(model, (torch.nn.Module, int)): pass",
        "if isinstance(model, GgufModel): pass",
        "if isinstance(model, EngineModel): pass",
        "opener = getattr(model, 'open_cache', None)",
        "cells = [m for m in models if hasattr(m, 'open_cache')]",
        "vocab = getattr(model, 'n_vocab')",
        "llama = type(model).__name__ == 'GgufModel'",
        "from hsd_runtime.models.static_engine import StaticModel",
    ],
)
def test_a_planted_guess_is_found(line):
    """The check itself: each way of guessing an engine, planted in a module, is reported."""
    source = (ROOT / "hsd_planner" / "profiling" / "timing.py").read_text() + "\n\ndef planted(model, models):\n    " + line + "\n"
    assert len(engine_guesses("hsd_planner.profiling.timing", source)) == 1


def test_the_loader_may_build_engine_models_but_the_core_may_not_probe_them():
    assert engine_guesses("hsd_runtime.decoding.hierarchy", "bad = isinstance(m, nn.Module)") != []
    assert engine_guesses("hsd_runtime.models.loading", "from .llamacpp import GgufModel") == []


def _answers_the_seam(model: EngineModel, engine: str, width: int) -> None:
    """``model`` implements the protocol: its answers, a cache that feeds and crops, and the
    refusal (or the keeping) of hidden rows."""
    assert isinstance(model, EngineModel) and engine_model(model) is model
    assert model.engine == engine and engine in ENGINES
    assert model.n_vocab >= width and model.num_layers >= 1 and model.n_params > 0
    assert model.context_limit is None or model.context_limit > 16
    assert isinstance(model.device, torch.device) and isinstance(model.allocates_cells, bool)
    cache = model.open_cache(width, 32)
    assert cache.width == width
    rows = cache.feed([3, 4, 5, 6], 0, 2)  # [2, width]
    assert rows.shape == (2, width) and rows.device == model.device
    cache.crop(2, 4)
    again = cache.feed([5, 6], 2, 2)  # the same positions fed again after the crop: the same logits
    torch.testing.assert_close(again, rows, rtol=0, atol=1e-3)
    if engine == "torch":
        kept = model.open_cache(width, keep_hidden=True)
        kept.feed([3, 4, 5], 0, 1)
    else:
        with pytest.raises(ChainError, match="the torch engine alone keeps"):
            model.open_cache(width, keep_hidden=True)


def test_the_torch_engine_model():
    module = tiny_llama(0)
    model = engine_model(module)
    assert isinstance(model, TorchModel) and model.module is module
    assert (model.n_vocab, model.context_limit, model.device, model.allocates_cells) == (64, 512, torch.device("cpu"), False)
    _answers_the_seam(model, "torch", 64)


def test_the_static_engine_model():
    model = StaticModel(tiny_llama(0), "static", n_ctx=256)
    assert (model.context_limit, model.allocates_cells) == (256, True)
    _answers_the_seam(model, "static", 64)


@pytest.mark.skipif(
    os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1", reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed"
)
def test_the_llamacpp_engine_model(tmp_path):
    from hsd_runtime.models.llamacpp import GgufModel
    from tests.gguf_tiny import write_gguf

    model = GgufModel(write_gguf(tiny_llama(0), tmp_path / "t.gguf"), "t", threads=1, n_ctx=128)
    assert (model.context_limit, model.allocates_cells) == (128, True)
    _answers_the_seam(model, "llamacpp", 64)


def test_a_member_of_no_engine_is_refused():
    from hsd_runtime import NgramDrafter

    with pytest.raises(TypeError, match="no model of an engine"):
        engine_model(NgramDrafter(3))
