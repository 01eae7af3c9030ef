"""Click options shared by several commands, each defined once."""

from __future__ import annotations

from collections.abc import Callable

import click

from hsd_runtime import ChainError

__all__ = ["db_option", "int_list", "json_option", "runtime_options", "sampling_options", "parse_widths"]


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def runtime_options(f: Callable | None = None, *, dtype: str | None = "fp32", dtype_help: str = "") -> Callable:
    """``--device`` and ``--dtype``; ``dtype=None`` makes --dtype optional (the command decides)."""

    def wrap(g: Callable) -> Callable:
        g = click.option(
            "--device", default="auto", show_default=True, help="auto (CUDA when present, else CPU), cpu, cuda, cuda:1, ..."
        )(g)
        return click.option(
            "--dtype",
            type=click.Choice(["fp32", "bf16", "fp16"]),
            default=dtype,
            show_default=dtype is not None,
            help=dtype_help or "Weights and activations dtype for models whose spec sets none.",
        )(g)

    return wrap(f) if f is not None else wrap


def sampling_options(f: Callable) -> Callable:
    f = click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling generator.")(f)
    f = click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=None, help="Nucleus sampling mass.")(f)
    f = click.option("--top-k", type=click.IntRange(min=1), default=None, help="Sample among the k likeliest tokens.")(f)
    f = click.option(
        "--temperature", type=click.FloatRange(0, min_open=True), default=1.0, show_default=True, help="Sampling temperature."
    )(f)
    f = click.option(
        "--mode", type=click.Choice(["greedy", "sample"]), default="greedy", show_default=True, help="Decoding mode."
    )(f)
    return f


def parse_widths(text: str | None) -> list[int]:
    """``"4,2"`` -> ``[4, 2]``; empty or None -> ``[]``."""
    if not text:
        return []
    return int_list(text, "--widths")


def db_option(f: Callable) -> Callable:
    return click.option(
        "--db",
        envvar="HSD_PLAN_DB",
        default=None,
        help="Database path or SQLAlchemy URL [env HSD_PLAN_DB; default ~/.local/share/hsd-plan/hsd-plan.db].",
    )(f)


def int_list(text: str, option: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``, every value >= 1."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise ChainError(f"{option} {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise ChainError(f"{option} values must be >= 1")
    return values
