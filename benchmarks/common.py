"""Helpers shared by the benchmark scripts: Spec-Bench prompts and machine description.

Spec-Bench (Apache-2.0) is not part of this repository: download its questions,
``data/spec_bench/question.jsonl`` of github.com/hemingkx/Spec-Bench (480 questions: translation,
summarization, qa, math_reasoning, rag and MT-bench, 80 each), and pass the file with
``--spec-bench PATH`` to the benchmarks that read it.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch

from hsd_planner.prompts import PromptSet, load_prompts

SPEC_CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag")
SPEC_BENCH_SOURCE = "data/spec_bench/question.jsonl of github.com/hemingkx/Spec-Bench"


def spec_bench_option(ap: argparse.ArgumentParser, required: bool = True) -> None:
    """Add ``--spec-bench PATH`` to a benchmark's arguments (``required``: the benchmark cannot run without it)."""
    need = "" if required else " (needed for Spec-Bench workloads)"
    ap.add_argument(
        "--spec-bench",
        type=Path,
        default=None,
        required=required,
        metavar="PATH",
        help=f"Spec-Bench's questions{need}: {SPEC_BENCH_SOURCE}",
    )


def spec_bench_file(path: Path | None) -> Path:
    """``path``, a Spec-Bench question file; exits with one line saying where to get it when it is missing."""
    if path is None:
        raise SystemExit(f"this benchmark reads Spec-Bench's questions: download {SPEC_BENCH_SOURCE} and pass --spec-bench PATH")
    if not path.is_file():
        raise SystemExit(f"--spec-bench {path}: no such file (download {SPEC_BENCH_SOURCE})")
    return path


def spec_bench_set(path: Path | None, category: str) -> PromptSet:
    """The first turn of every question of one Spec-Bench category, named ``spec_bench/<category>``
    whatever the file is called (workload names in the databases and BENCHMARKS.md)."""
    return replace(load_prompts(spec_bench_file(path), category), name=f"spec_bench/{category}")


def _rows(path: Path | None) -> list[dict]:
    with open(spec_bench_file(path)) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def spec_bench_prompts(path: Path | None, per_category: int) -> dict[str, list[str]]:
    """The first turn of the first ``per_category`` questions of each category.

    The 80 MT-bench questions (8 small categories) are pooled as ``mt_bench``.
    """
    groups: dict[str, list[str]] = defaultdict(list)
    for row in _rows(path):
        category = row["category"] if row["category"] in SPEC_CATEGORIES else "mt_bench"
        if len(groups[category]) < per_category:
            groups[category].append(row["turns"][0])
    return dict(groups)


def mt_bench_set(path: Path | None) -> PromptSet:
    """Spec-Bench's multi-turn conversation category as one workload: the first turn of its 80
    MT-bench questions, taken in turn from its 8 small categories (writing, roleplay, ...) so that
    the first prompts of either split cover all of them."""
    groups: dict[str, list[str]] = defaultdict(list)
    for row in _rows(path):
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
