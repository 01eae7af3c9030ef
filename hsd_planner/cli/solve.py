"""``hsd-plan solve``: rank hierarchies from the stored profile and store the plans."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import ExportError
from ..export import check_request, export_plan, parse_model_map
from ..plan import SolveConfig
from ..profiling.hardware import this_machine
from ..profiling.sources import absolute_spec, absolute_specs
from ..solving import solve_and_store, solve_batch_schedule
from ..store import open_db, open_memory_db
from ..store.exchange import import_document, read_document
from ..store.machines import resolve_hardware
from ..store.unit import all_or_nothing
from .batch import batch_sizes_option, parse_batch_sizes
from .options import db_option, export_options, json_option, mode_options, solve_options
from .render import emit_solve
from .values import split_specs

__all__ = ["solve_command"]


@click.command("solve")
@click.option("--target", default=None, help="Target model spec [default: the largest profiled verifier].")
@click.option("--workload", default=None, help="Workload name as profiled (see hsd-plan profiles show) [default: the newest].")
@click.option(
    "--hardware",
    default=None,
    metavar="NAME_OR_ID",
    help="Machine whose latency to use: its id, fingerprint or device name as hsd-plan profiles show lists them [default: this machine's].",
)
@click.option(
    "--profile-file",
    default=None,
    help="Solve on an exported profile (e.g. profiles/NAME.json) instead of the database; nothing is stored.",
)
@mode_options
@solve_options
@batch_sizes_option(
    None,
    "Also solve for these batch sizes (sequences decoded in lockstep; chains only) and store the best plan of each: "
    "the schedule a server switches by, 0 where speculation stops paying [default: batch size 1 only].",
)
@export_options(fmt_option="--export", required=False)
@db_option
@json_option
def solve_command(
    target: str | None,
    workload: str | None,
    hardware: str | None,
    profile_file: str | None,
    mode: str,
    temperature: float,
    lenience: float,
    acceptance: str,
    top_k: int,
    t_max: int,
    max_depth: int | None,
    trees: bool,
    tree_budget: int,
    context_len: int | None,
    max_new_tokens: int | None,
    exclude: str,
    require: str,
    batch_sizes: str | None,
    fmt: str | None,
    stack_version: str | None,
    model_map: tuple[str, ...],
    db_url: str | None,
    as_json: bool,
) -> None:
    """Find the latency-optimal hierarchy from the stored profile, and store the plans.

    Prints the best hierarchy, the alternatives, the best single drafter and autoregressive
    decoding, each with predicted ms per token, mean accepted length and speed-up. A width like
    3x2x1 is a draft tree (first drafter only, where its sibling acceptance was profiled);
    --no-trees plans chains alone.

    With --export FORMAT, the pick is also exported for a serving stack as hsd-plan export
    does (the best plan that stack can express where it cannot run the pick).

    With --batch-sizes, the best chain at each batch size is solved and stored too (the latency
    of b sequences in lockstep, from the c(n, b) curves of profile --batch-sizes), and the
    schedule they make is printed; an export to vLLM or TensorRT-LLM then carries it.

    With --profile-file, the solve runs on an exported profile (a curated one from profiles/,
    or any hsd-plan profiles export) held in memory: no database is read or written.

    Example:

        hsd-plan solve --target smollm2-135m --t-max 8 --json

        hsd-plan solve --tree-budget 8

        hsd-plan solve --no-trees

        hsd-plan solve --max-new-tokens 256

        hsd-plan solve --profile-file profiles/amd-epyc-avx512bf16-smollm2-builtin.json

        hsd-plan solve --db postgresql://ann@db.lan/team --hardware 2

        hsd-plan solve --export vllm --model-map smollm2-135m=HuggingFaceTB/SmolLM2-135M-Instruct

        hsd-plan solve --batch-sizes 1,2,4,8,16 --export trtllm
    """
    target = absolute_spec(target) if target else target
    if (model_map or stack_version) and fmt is None:
        raise ExportError("--model-map and --stack-version describe an export; give --export FORMAT too")
    names = parse_model_map(model_map)  # before solving: a malformed map stores nothing
    if fmt is not None:
        check_request(fmt, stack_version, names)  # an unknown --stack-version, before the solve
    sizes = parse_batch_sizes(batch_sizes)
    config = SolveConfig(
        t_max=t_max,
        top_k=top_k,
        max_depth=max_depth,
        trees=trees,
        tree_budget=tree_budget,
        acceptance=acceptance,
        context_len=context_len,
        max_new_tokens=max_new_tokens,
        exclude=tuple(absolute_specs(split_specs(exclude))),
        require=tuple(absolute_specs(split_specs(require))),
    )
    if profile_file is not None:
        doc = read_document(Path(profile_file), "--profile-file")
        db = open_memory_db()  # the file is the whole profile, whatever machine it came from
        import_document(db, doc)
        machines = resolve_hardware(db, hardware) if hardware is not None else None
    else:
        db = open_db(db_url, create=False)
        # imported profiles of other machines never stand in for this one unless asked for
        machines = resolve_hardware(db, hardware) if hardware is not None else this_machine()
    # the solve, its batch schedule and its export are stored together: a refusal of either
    # (a --model-map naming a model the pick lacks, a profile without batch curves) stores nothing
    with all_or_nothing(db) as unit:
        report = solve_and_store(unit, target, workload, mode, temperature, config, machines, lenience)
        solved = config.model_copy(update={"max_new_tokens": report.max_new_tokens})  # the length the solve resolved
        batch = solve_batch_schedule(unit, report.solve_id, solved, sizes) if sizes else None
        export = export_plan(unit, report.best.id, fmt, stack_version, names) if fmt is not None else None
    emit_solve(report, as_json, export, batch)
