"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny import save_tiny_model


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two tiny models sharing a tokenizer (target, draft) and one with another tokenizer."""
    root = tmp_path_factory.mktemp("models")
    return {
        "target": save_tiny_model(root / "target", seed=0, layers=4),
        "draft": save_tiny_model(root / "draft", seed=1, layers=2),
        "other": save_tiny_model(root / "other", seed=2, layers=2, words=[f"x{i}" for i in range(60)]),
    }


@pytest.fixture(autouse=True)
def isolated_db(tmp_path, monkeypatch) -> Path:
    """Every test gets its own database through the environment, as a user would set it."""
    path = tmp_path / "hsd-plan.db"
    monkeypatch.setenv("HSD_PLAN_DB", str(path))
    return path
