"""Exporting a stored plan in the form one serving stack reads (``hsd-plan export``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hsd_runtime.terms.shape import TreeShape
from hsd_runtime.terms.spec import parse_spec

from ..errors import ExportError
from ..plan import Plan, format_chain, widths_to_json
from ..plan.batch import ScheduleRange, schedule_of
from ..store import Engine
from ..store.plans import SolvedPlan, load_plan
from ..store.records import RankedPlan
from ..store.schedule import load_batch_plans
from .batch import stack_schedule
from .names import check_mapped, gguf_names
from .restrict import restricted_solve, restrictions, unloadable
from .schema import (
    PLAN_SCHEMA_VERSION,
    HardwareInfo,
    PlanDocument,
    ProfileInfo,
    ScheduleEntry,
    StackPlan,
    StackScheduleEntry,
    WorkloadInfo,
)
from .stacks import STACKS, Served, Stack, comment_line, stack_for

__all__ = ["ExportReport", "check_request", "export_plan", "plan_document"]


@dataclass(frozen=True)
class ExportReport:
    """One export: the stack and version it targets, the plan asked for (``pick``) and the plan
    exported (the best the stack can express), why they differ, the configuration itself, and
    what the stack does with the exported plan that its prediction does not price (``caveat``)."""

    format: str
    stack: str
    version: str
    plan_id: int
    pick: Plan
    exported: Plan
    restriction: list[str]
    payload: dict
    text: str  # what --out writes
    caveat: list[str] = field(default_factory=list)

    @property
    def header(self) -> str:
        """One line: stack and version, the plan exported and, where it had to change, the pick."""
        head = f"{self.stack} {self.version}: {_speed(self.exported)}"
        if not self.restriction:
            line = f"{head}, plan {self.plan_id} as solved"
        else:
            line = f"{head}; plan {self.plan_id}, {_speed(self.pick)}, cannot run there: {'; '.join(self.restriction)}"
        return "".join([line, *(f"; note: {c}" for c in self.caveat)])

    def to_dict(self) -> dict:
        return {
            "format": self.format,
            "stack": self.stack,
            "version": self.version,
            "plan_id": self.plan_id,
            "pick": self.pick.to_dict(),
            "exported": self.exported.to_dict(),
            "restriction": self.restriction,
            "caveat": self.caveat,
            "payload": self.payload,
        }


def _speed(plan: Plan) -> str:
    what = plan.label if plan.depth else f"{plan.chain[-1]} autoregressive (no speculation)"
    return f"{what} at {plan.prediction.ms_per_token:.2f} ms/token ({plan.prediction.speedup:.2f}x)"


def check_request(fmt: str, version: str | None, model_map: dict[str, str]) -> Stack | None:
    """What an export of format ``fmt`` can refuse before any plan is read: an unknown format or
    version, a model map for the plan document. The stack's mapping, None for the plan document."""
    if fmt != "json":
        return stack_for(fmt, version)
    if version not in (None, str(PLAN_SCHEMA_VERSION)):
        raise ExportError(f"the plan document has schema version {PLAN_SCHEMA_VERSION}, not {version}")
    if model_map:
        raise ExportError("--model-map applies to a serving stack's format; the plan document names models by spec")
    return None


def export_plan(
    db: Engine, plan_id: int | None, fmt: str, version: str | None = None, model_map: dict[str, str] | None = None
) -> ExportReport:
    """Plan ``plan_id`` (None: the newest solve's pick) as format ``fmt`` reads it.

    A stack that cannot run the plan as solved gets the best plan it can express, solved on the
    same profile under its restrictions (:func:`~hsd_planner.export.restrict.restricted_solve`).
    """
    names = model_map or {}
    stack = check_request(fmt, version, names)
    if stack is None:
        stored = load_plan(db, plan_id)
        doc = plan_document(stored, load_batch_plans(db, stored.solve.id))
        return ExportReport(
            format="json",
            stack="hsd-plan plan document",
            version=str(PLAN_SCHEMA_VERSION),
            plan_id=stored.plan_id,
            pick=stored.plan,
            exported=stored.plan,
            restriction=[],
            payload=doc.model_dump(mode="json"),
            text=doc.model_dump_json(indent=2) + "\n",
        )
    stored = load_plan(db, plan_id)
    exported, reasons = _for_stack(stored, stack)
    check_mapped(names, [stored.plan.chain, exported.chain])
    target = exported.chain[-1]
    if unloadable(target, False, stack) is not None and target not in names:
        raise ExportError(f"the target {target} is a model variant {stack.label} cannot load; solve for a target it serves")
    schedule, why = _schedule(stored, exported, stack, [e.batch_size for e in load_batch_plans(db, stored.solve.id)])
    if stack.gguf_files:  # llama-server loads files: each model's GGUF unless the map names another
        names = {**gguf_names([exported.chain]), **names}
    rendered = stack.render(replace(_served(stored, exported, names), schedule=schedule))
    reasons = reasons + why
    comment = comment_line(f"hsd-plan plan {stored.plan_id} for {stack.label}: {_speed(exported)}")
    text = "\n".join([comment, *rendered.lines]) + "\n"
    caveat = _caveat(exported, stack)
    return ExportReport(fmt, stack.name, stack.version, stored.plan_id, stored.plan, exported, reasons, rendered.payload, text, caveat)


def _caveat(plan: Plan, stack: Stack) -> list[str]:
    """What ``stack`` does with ``plan`` that its prediction does not price: llama-server keeps one
    ``ngram-mod`` table for all its requests (the profile and hsd-plan's engines begin one per
    request), so past its first request a plan drafting with ``ngram-mod`` also walks n-grams of
    the requests before."""
    if not plan.depth or not stack.lookup_rules or not parse_spec(plan.chain[0]).walks_mod:
        return []
    return [
        "llama-server keeps one ngram-mod table for all its requests, so past the first it also walks n-grams of "
        "earlier requests, which this prediction (a table per request) does not price"
    ]


# how much slower a plan whose price holds on llama-server may be predicted than one drafting with
# ngram-mod, whose price does not, and still be exported in its place: predictions this close are
# a tie to what a validation can tell (its regret goal)
SHARED_STATE_TIE = 0.02


def _for_stack(stored: SolvedPlan, stack: Stack) -> tuple[Plan, list[str]]:
    """The plan ``stack`` runs (the pick, or the restricted optimum) and why it is not the pick.

    On llama-server a plan drafting with ``ngram-mod`` (alone or after ``ngram-simple``) walks one
    table for all the server's requests, which its per-request price does not hold (:func:`_caveat`);
    the best plan without ``ngram-mod`` is exported instead where it is predicted within
    :data:`SHARED_STATE_TIE` of it.
    """
    solve = stored.solve

    def best(avoid: Sequence[str] = ()) -> Plan:
        return restricted_solve(
            stored.profile, stack, solve.t_max, solve.acceptance_model, stored.contexts, solve.max_depth, solve.max_new_tokens, avoid
        )

    reasons = restrictions(stored.profile, stored.plan, stack)
    plan = best() if reasons else stored.plan
    if _caveat(plan, stack):
        mod = [m.name for m in stored.profile.models if m.lookup and parse_spec(m.name).walks_mod]
        other = best(mod)
        if other.prediction.ms_per_token <= plan.prediction.ms_per_token * (1 + SHARED_STATE_TIE):
            slower = other.prediction.ms_per_token / plan.prediction.ms_per_token - 1
            reasons = [
                *reasons,
                f"it shares the ngram-mod table of {plan.chain[0]} across its requests, which that plan's price does not "
                f"hold, and {format_chain(other.chain, other.widths)} is predicted within {100 * slower:.1f} % of it",
            ]
            plan = other
    return plan, reasons


def _schedule(
    stored: SolvedPlan, exported: Plan, stack: Stack, batch_sizes: list[int]
) -> tuple[tuple[tuple[int, int, int], ...], list[str]]:
    """The stack's k per range of the solve's batch sizes (empty without batch plans), and why it
    is not exported where the stack takes no batch-size table and k would change with the batch."""
    schedule = stack_schedule(stored, exported, batch_sizes)
    if stack.batch_schedule or len({k for _, _, k in schedule}) < 2:
        return (schedule if stack.batch_schedule else ()), []
    ks = ", ".join(f"{k} at {a}-{b}" for a, b, k in schedule)
    return (), [f"it takes no batch-size schedule (k {ks}); it runs the batch-1 k at every batch size"]


def _served(stored: SolvedPlan, plan: Plan, names: dict[str, str]) -> Served:
    def name(spec: str) -> str:
        loads = str(parse_spec(spec).loads)  # pmin= is how the server drafts (a flag), not a model
        return names.get(spec, names.get(loads, loads))

    mode, temperature = stored.solve.setting.mode, stored.solve.temperature
    if not plan.depth:
        return Served(name(plan.chain[-1]), None, False, 0, 0, mode, temperature)
    drafter, k = plan.chain[0], plan.widths[0]
    assert not isinstance(k, TreeShape)  # the restricted solve plans chains for a stack without trees
    lookup = stored.profile.model(drafter).lookup
    spec = parse_spec(drafter)
    order, least = (spec.ngram_order, spec.ngram_min) if lookup else (0, 1)
    return Served(
        name(plan.chain[-1]),
        name(drafter),
        lookup,
        k,
        order,
        mode,
        temperature,
        ngram_min=least,
        p_min=spec.p_min or 0.0,
        n_min=spec.n_min,
        ngram_rule=spec.ngram_rule if lookup else None,
        n_match=spec.n_match,
    )


def plan_document(stored: SolvedPlan, batch: Sequence[RankedPlan] = ()) -> PlanDocument:
    """The versioned document of a stored plan, with the best plan of each stack's newest version
    and, from a solve with batch sizes (``batch``: its best chain per batch size), the schedules."""
    plan, p = stored.plan, stored.plan.prediction
    widths = widths_to_json(plan.widths)
    stacks = []
    for versions in STACKS.values():
        stack = versions[0]
        exported, reasons = _for_stack(stored, stack)
        schedule, why = _schedule(stored, exported, stack, [e.batch_size for e in batch])
        e = exported.prediction
        stacks.append(
            StackPlan(
                stack=stack.name,
                version=stack.version,
                restriction=reasons + why,
                chain=list(exported.chain),
                widths=widths_to_json(exported.widths),
                predicted_ms_per_token=e.ms_per_token,
                predicted_speedup=e.speedup,
                schedule=[StackScheduleEntry(min_batch=a, max_batch=b, k=k) for a, b, k in schedule],
            )
        )
    solve, hw, wl = stored.solve, stored.solve.hardware, stored.solve.workload
    profile = ProfileInfo(
        hardware=HardwareInfo.model_validate(hw, from_attributes=True),  # the record's fields the document keeps
        dtype=solve.setting.dtype,
        workload=WorkloadInfo(name=wl.name, content_hash=wl.content_hash, prompts=wl.count),
        mode=solve.setting.mode,
        temperature=solve.temperature,
        acceptance_model=solve.acceptance_model,
        context_len=solve.context_len,
    )
    return PlanDocument(
        chain=list(plan.chain),
        widths=widths,
        predicted_ms_per_token=p.ms_per_token,
        predicted_mean_accepted_length=p.mean_accepted_length,
        predicted_speedup=p.speedup,
        schedule=_document_schedule(plan, batch),
        profile=profile,
        stacks=stacks,
        plan_id=stored.plan_id,
        solve_id=stored.solve.id,
    )


def _document_schedule(plan: Plan, batch: Sequence[RankedPlan]) -> list[ScheduleEntry]:
    """The plan per range of batch sizes: the solve's schedule, or the plan alone at batch size 1."""
    ranges = schedule_of([(e.batch_size, e.plan) for e in batch]) if batch else [ScheduleRange(1, 1, plan)]
    return [
        ScheduleEntry(
            min_batch=r.min_batch,
            max_batch=r.max_batch,
            chain=list(r.plan.chain),
            widths=widths_to_json(r.plan.widths),
            predicted_ms_per_token=r.plan.prediction.ms_per_token,
            predicted_speedup=r.plan.prediction.speedup,
        )
        for r in ranges
    ]
