"""Helpers shared by the benchmark scripts: Spec-Bench prompts and machine description."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import torch

from hsd_planner.prompts import PromptSet

SPEC_BENCH = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "spec_bench.jsonl"
SPEC_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")


def spec_bench_prompts(per_category: int, path: Path = SPEC_BENCH) -> dict[str, list[str]]:
    """The first turn of the first ``per_category`` questions of each category.

    The 80 MT-bench questions (8 small categories) are pooled as ``mt_bench``.
    """
    groups: dict[str, list[str]] = defaultdict(list)
    with open(path) as fh:
        for line in fh:
            row = json.loads(line)
            category = row["category"] if row["category"] in SPEC_CATEGORIES else "mt_bench"
            if len(groups[category]) < per_category:
                groups[category].append(row["turns"][0])
    return dict(groups)


def mt_bench_set(path: Path = SPEC_BENCH) -> PromptSet:
    """Spec-Bench's multi-turn conversation category as one workload: the first turn of its 80
    MT-bench questions, taken in turn from its 8 small categories (writing, roleplay, ...) so that
    the first prompts of either split cover all of them."""
    groups: dict[str, list[str]] = defaultdict(list)
    with open(path) as fh:
        for line in fh:
            row = json.loads(line)
            if row["category"] not in SPEC_CATEGORIES:
                groups[row["category"]].append(row["turns"][0])
    rounds = max(len(g) for g in groups.values())
    return PromptSet("spec_bench/mt_bench", tuple(g[i] for i in range(rounds) for g in groups.values() if i < len(g)))


def machine() -> str:
    """One line naming the CPU, threads and library versions."""
    import transformers

    from hsd_planner.profiling.hardware import cpu_name

    return (
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}"
    )
