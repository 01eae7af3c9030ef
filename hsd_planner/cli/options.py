"""Click options shared by several commands, each declared once, defaults from the config models."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hsd_runtime.terms.choices import DTYPES, MODES
from hsd_runtime.terms.limits import MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE

from ..choices import ACCEPTANCE_MODELS
from ..limits import MAX_COUNT, MAX_LENGTH
from ..plan import SOLVE_DEFAULTS, T_MAX_LIMIT, TREE_BUDGET_LIMIT

__all__ = [
    "FORCE_HELP",
    "FiniteRange",
    "allow_busy_option",
    "db_option",
    "engine_option",
    "export_options",
    "json_option",
    "mode_options",
    "prepack_option",
    "prompt_options",
    "runtime_options",
    "sampling_options",
    "solve_options",
]

F = TypeVar("F", bound=Callable)

# what --force may replace, the same for every command that writes a file (see hsd_planner.paths)
FORCE_HELP = (
    "Overwrite an existing --out file; a symbolic link is replaced itself, never written through "
    "(never a folder, a device, a database or its -wal/-shm/-journal file)."
)


class FiniteRange(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets ``nan`` through (it
    compares false with every bound) and ``inf`` where no upper bound is set."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def export_options(f: F | None = None, *, fmt_option: str = "--format", required: bool = True) -> Callable:
    """``--format`` (``fmt_option``), ``--stack-version`` and ``--model-map``: which stack an export
    is for, at which version of its mapping, under which model names."""
    from ..export import FORMATS

    def wrap(g: F) -> F:
        g = click.option(
            "--model-map",
            multiple=True,
            metavar="SPEC=NAME",
            help="The name the server knows a model of the plan by (repeatable) [default: the spec].",
        )(g)
        g = click.option(
            "--stack-version", default=None, help="Version of the stack's mapping (see docs/serving.md) [default: the newest]."
        )(g)
        return click.option(
            fmt_option,
            "fmt",
            type=click.Choice(FORMATS),
            required=required,  # no default=None beside it: click 8.5 then takes None as given
            help="Serving stack to export for: transformers (hf), vLLM, SGLang, llama.cpp, TensorRT-LLM, or the plan document (json).",
        )(g)

    return wrap(f) if f is not None else wrap


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db_url",
        envvar="HSD_PLAN_DB",
        default=None,
        help="Database: an SQLite file path, or a PostgreSQL server's postgresql://user:password@host/name "
        "[env HSD_PLAN_DB; default ~/.local/share/hsd-plan/hsd-plan.db].",
    )(f)


def runtime_options(f: F | None = None, *, dtype: str | None = "auto", dtype_help: str = "") -> Callable:
    """``--device`` and ``--dtype``; ``dtype=None`` makes --dtype optional (the command decides).

    ``auto`` is bf16 where the device computes it natively (CUDA with bf16; a CPU with AMX or
    AVX512-BF16), else fp32: :func:`resolve_dtype_choice` makes the choice and says it.
    """

    def wrap(g: F) -> F:
        g = click.option("--device", default="auto", show_default=True, help="auto (CUDA when present, else CPU), cpu, cuda, cuda:1, ...")(
            g
        )
        return click.option(
            "--dtype",
            type=click.Choice(["auto", *DTYPES]),
            default=dtype,
            show_default=dtype is not None,
            help=dtype_help
            or "Weights and activations dtype for models whose spec sets none; auto: bf16 where computed natively, else fp32.",
        )(g)

    return wrap(f) if f is not None else wrap


def engine_option(f: F) -> F:
    """``--engine``: what runs the models whose spec names no ``engine=``."""
    from hsd_runtime.terms.choices import ENGINES

    return click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="torch",
        show_default=True,
        help="What runs the models whose spec sets no engine=: torch (transformers, any device and dtype), static "
        "(Llama/Qwen2 models over preallocated caches, CUDA graphs on a GPU) or llamacpp "
        "(the GGUF files on llama.cpp, CPU; installed by scripts/install.sh). Profiles are kept apart by engine.",
    )(f)


def prepack_option(f: F) -> F:
    return click.option(
        "--prepack/--no-prepack",
        default=True,
        show_default=True,
        help="On the CPU, multiply by weights packed once at load (oneDNN); --no-prepack runs torch's default kernels. "
        "Profiles are kept apart by this choice; validate runs the kernels its profile was measured with.",
    )(f)


def mode_options(f: F) -> F:
    """``--mode``, ``--temperature`` and ``--lenience``: which decoding a profile or a run is for."""
    f = click.option(
        "--lenience",
        type=FiniteRange(0, 1, min_open=True),
        default=1.0,
        show_default=True,
        help="LOSSY below 1: the target accepts a draft x with probability min(1, p(x) / (e q(x))), so the output no longer "
        "follows the target's distribution (sampling only; 1 is the exact rule).",
    )(f)
    f = click.option(
        "--temperature",
        type=FiniteRange(MIN_TEMPERATURE, MAX_TEMPERATURE),
        default=1.0,
        show_default=True,
        help="Sampling temperature.",
    )(f)
    return click.option("--mode", type=click.Choice(MODES), default="greedy", show_default=True, help="Decoding mode.")(f)


def sampling_options(f: F | None = None, *, top_k: bool = True, seed_help: str = "Seed of the sampling generator.") -> Callable:
    """:func:`mode_options` plus ``--top-p``, ``--seed`` and (when ``top_k``) ``--top-k``."""

    def wrap(g: F) -> F:
        g = click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True, help=seed_help)(g)
        g = click.option("--top-p", type=FiniteRange(0, 1, min_open=True), default=None, help="Nucleus sampling mass [default: 1, off].")(g)
        if top_k:
            g = click.option("--top-k", type=click.IntRange(1, MAX_LENGTH), default=None, help="Sample among the k likeliest tokens.")(g)
        return mode_options(g)

    return wrap(f) if f is not None else wrap


def prompt_options(f: F | None = None, *, max_prompts: int | None = None, max_help: str = "Use at most this many prompts") -> Callable:
    """``--prompts``, ``--category`` and ``--max-prompts`` (``max_help``, and how the prompts are chosen)."""

    def wrap(g: F) -> F:
        help_text = f"{max_help} (a fixed sample spread over the file, not its first ones)."  # prompts.split's sample
        g = click.option(
            "--max-prompts", type=click.IntRange(1, MAX_COUNT), default=max_prompts, show_default=max_prompts is not None, help=help_text
        )(g)
        g = click.option("--category", default=None, help="Keep only JSONL rows of this category.")(g)
        return click.option(
            "--prompts",
            "prompts_file",
            type=click.Path(dir_okay=False),
            default=None,
            help="JSONL ('prompt' or Spec-Bench 'turns') or text file, one prompt per line, or humaneval (HumanEval's 164 stubs) [default: the built-in set].",
        )(g)

    return wrap(f) if f is not None else wrap


def solve_options(f: F) -> F:
    """The options of a solve, defaults from :class:`SolveConfig`."""
    d = SOLVE_DEFAULTS
    f = click.option("--require", default="", help="Comma-separated model specs every plan must contain.")(f)
    f = click.option("--exclude", default="", help="Comma-separated model specs not to use.")(f)
    f = click.option(
        "--max-new-tokens",
        type=click.IntRange(1, MAX_LENGTH),
        default=d.max_new_tokens,
        help="Rank plans by the time of a generation of this many new tokens, its last round cut short "
        "[default: as many as the profile's continuations, the workload's own length].",
    )(f)
    f = click.option(
        "--context-len",
        type=click.IntRange(1, MAX_LENGTH),
        default=d.context_len,
        help="Context length the cost curves are read at [default: each profiled prompt's length plus half its continuation].",
    )(f)
    f = click.option(
        "--tree-budget",
        type=click.IntRange(2, TREE_BUDGET_LIMIT),
        default=d.tree_budget,
        show_default=True,
        help="Most nodes of a draft tree, what one verification pass checks: 8 allows 4x1 (4 + 4 nodes) and 2x2, not 3x2 (3 + 6).",
    )(f)
    f = click.option(
        "--trees/--no-trees",
        default=d.trees,
        show_default=True,
        help="Let the first drafter draft a tree (RSD) for a verifier it has a sibling-acceptance curve with; "
        "a plan then shows it as d[3x2x1]: 3 candidates for the next token, 2 after each, then 1.",
    )(f)
    f = click.option(
        "--max-depth", type=click.IntRange(0, MAX_COUNT), default=d.max_depth, help="Most drafter levels [default: no limit]."
    )(f)
    f = click.option(
        "--t-max",
        type=click.IntRange(1, T_MAX_LIMIT),
        default=d.t_max,
        show_default=True,
        help="Largest width tried at any level, and the deepest tree.",
    )(f)
    f = click.option(
        "--top", "top_k", type=click.IntRange(1, MAX_COUNT), default=d.top_k, show_default=True, help="How many hierarchies to list."
    )(f)
    return click.option(
        "--acceptance",
        type=click.Choice(ACCEPTANCE_MODELS),
        default=d.acceptance,
        show_default=True,
        help="Run-length model: the measured P(G >= g), or alpha^g.",
    )(f)


def allow_busy_option(f: F) -> F:
    """``--allow-busy``: keep latency samples timed while other work held the cores."""
    return click.option(
        "--allow-busy",
        is_flag=True,
        envvar="HSD_PLAN_ALLOW_BUSY",
        help="Keep latency samples timed while other work shared the CPU (counted in the summary) instead of timing them "
        "again and refusing a machine that stays busy [env: HSD_PLAN_ALLOW_BUSY=1].",
    )(f)
