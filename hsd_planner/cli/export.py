"""``hsd-plan export``: a stored plan in the form a serving stack reads."""

from __future__ import annotations

import click

from ..export import export_plan, parse_model_map
from ..limits import SQLITE_INT_MAX
from ..paths import check_output_path
from ..store import open_db
from .options import FORCE_HELP, db_option, export_options, json_option
from .render import emit_export

__all__ = ["export_command"]


@click.command("export")
@click.option(
    "--plan",
    "plan_id",
    type=click.IntRange(1, SQLITE_INT_MAX),
    default=None,
    help="Plan id (see hsd-plan solve) [default: the newest solve's pick].",
)
@export_options
@click.option(
    "--out", default=None, help="Write the configuration to this file instead of stdout (a file name: not empty, no trailing '/')."
)
@click.option("--force", is_flag=True, help=FORCE_HELP)
@db_option
@json_option
def export_command(
    plan_id: int | None,
    fmt: str,
    stack_version: str | None,
    model_map: tuple[str, ...],
    out: str | None,
    force: bool,
    db_url: str | None,
    as_json: bool,
) -> None:
    """Export a solved plan as a serving stack's configuration, or as a plan document.

    Formats: hf (transformers generate() keyword arguments and GenerationConfig), vllm
    (speculative_config and the vllm serve line), sglang (server arguments), llamacpp
    (llama-server start-up flags), trtllm (TensorRT-LLM
    speculative_config YAML), json (the versioned plan document, with per stack the best plan
    it can express). Every output names the stack and the version its mapping was read from.

    No stack runs more than one drafter level, a draft tree from a drafter model, an early exit
    (layers=K) or hsd-plan's int8 copy (quant=int8): for a pick it cannot run, the export is the
    best plan the stack can express, solved on the same profile under those restrictions, and
    the line on stderr gives both predicted speeds.

    Example:

        hsd-plan export --format vllm --model-map qwen2.5-coder-0.5b=Qwen/Qwen2.5-Coder-0.5B-Instruct

        hsd-plan export --plan 3 --format json --out plan.json
    """
    path = check_output_path(out, "--out", force, database=db_url) if out is not None else None  # before any work
    names = parse_model_map(model_map)
    report = export_plan(open_db(db_url, create=False), plan_id, fmt, stack_version, names)
    emit_export(report, as_json, path)
