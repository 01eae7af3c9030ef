"""Helpers shared by the benchmark scripts: Spec-Bench prompts and machine description."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import torch

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


def machine() -> str:
    """One line naming the CPU, threads and library versions."""
    import transformers

    from hsd_planner.profiling.hardware import cpu_name

    return (
        f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}"
    )
