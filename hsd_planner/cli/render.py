"""Everything the CLI prints: JSON, plain-text tables, progress bars. Commands only choose."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import click

from ..export import ExportReport
from ..generate import GenerateReport
from ..paths import write_atomic
from ..plan.batch import BatchSolution
from ..profiling import SUMMARY_N, ProfileSummary
from ..profiling.summary import floor_ratio, shortest_context
from ..profiling.timing import SPREAD_LIMIT
from ..solving import THIN_PROMPTS, SolveReport
from ..store.exchange import ProfileDocument
from ..validation import ERROR_GOAL, ValidationReport
from .batch import format_batch_solve

__all__ = [
    "Bars",
    "emit",
    "emit_export",
    "emit_solve",
    "format_generate",
    "format_profiles",
    "format_solve",
    "format_summary",
    "format_validation",
]


class _Report(Protocol):
    def to_dict(self) -> dict: ...


def emit(report: _Report, as_json: bool, text: Any = None) -> None:
    """Print ``report`` as one JSON line, or as ``text`` (a string, or a function of the report)."""
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        click.echo(text(report) if callable(text) else text)


def emit_export(report: ExportReport, as_json: bool, out: Path | None = None) -> None:
    """An export: to ``out`` when given (checked by :func:`~hsd_planner.paths.check_output_path`
    before the export was made), else the configuration on stdout, with one line on stderr naming
    the stack, its version and the predicted speeds (``--json``: one JSON line instead)."""
    if out is not None:
        write_atomic(out, "--out", lambda tmp: tmp.write_text(report.text))
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    click.echo(_safe(report.header), err=True)
    if out is None:
        click.echo(report.text, nl=False)
    else:
        click.echo(f"wrote {out}", err=True)


class Bars:
    """Progress bars on stderr, one per stage (tqdm; hidden when stderr is not a terminal, or
    when not ``enabled``)."""

    def __init__(self, enabled: bool = True) -> None:
        self._bar: Any = None
        self._enabled = enabled

    def start(self, desc: str, total: int | None = None) -> None:
        from tqdm import tqdm

        self.close()
        self._bar = tqdm(desc=desc, total=total, unit="step", file=sys.stderr, disable=None if self._enabled else True)

    def total(self, n: int) -> None:
        self._bar.total = n

    def step(self, n: int = 1) -> None:
        self._bar.update(n)

    @property
    def done(self) -> int:
        """Steps done in the current stage."""
        return int(self._bar.n) if self._bar is not None else 0

    def postfix(self, **values: str) -> None:
        """Show ``key=value`` pairs after the bar (refreshed with the next step)."""
        self._bar.set_postfix(values, refresh=False)

    def stages(self) -> Callable[[str, int, int], None]:
        """A ``progress(stage, done, total)`` callback: a new bar for each new stage, advanced to ``done``."""
        current = {"name": ""}

        def progress(name: str, done: int, total: int) -> None:
            if current["name"] != name:
                current["name"] = name
                self.start(name, total)
            self.step(done - self.done)

        return progress

    def note(self, text: str) -> None:
        """One line on stderr above the bar."""
        from tqdm import tqdm

        tqdm.write(_safe(text), file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def format_generate(report: GenerateReport) -> str:
    """The text, the per-level table and the summary line of ``hsd-plan generate``."""
    r = report.result
    lines = [
        report.text,
        "",
        f"{'level':<34} {'passes':>7} {'tok/pass':>8} {'proposed':>9} {'accepted':>9} {'alpha':>6} {'ms':>9}"
        f" {'forward':>8} {'cache':>6} {'draft':>6} {'verify':>6}",
    ]
    trees, steering = [], []
    for lv in r.levels:
        alpha = f"{lv.acceptance:.2f}" if lv.acceptance is not None else "-"
        if lv.trees:
            trees.append(f"{lv.model}: {lv.trees} trees, {lv.proposed} nodes drafted, mean accepted depth {lv.accepted_depth:.2f}")
        elif lv.nodes_verified:
            trees.append(f"{lv.model}: {lv.nodes_verified} tree nodes verified")
        if lv.steers:
            steering.append(f"{lv.model}: {lv.steers} steering vectors set, {1000 * lv.steer_s:.1f} ms in all")
        split = "".join(f" {1000 * v:>{w}.1f}" for v, w in ((lv.forward_s, 8), (lv.cache_s, 6), (lv.draft_s, 6), (lv.verify_s, 6)))
        lines.append(
            f"{lv.model:<34} {lv.forward_passes:>7} {lv.tokens_per_pass:>8.2f} {lv.proposed:>9} {lv.accepted:>9} {alpha:>6} "
            f"{1000 * lv.time_s:>9.1f}{split}"
        )
    lines += [f"tree: {line}" for line in trees] + [f"steering: {line}" for line in steering]
    other = r.decode_s - sum(lv.time_s + lv.draft_s + lv.verify_s + lv.steer_s for lv in r.levels)
    lines.append(
        f"{len(r.tokens)} tokens in {r.decode_s:.2f} s: {r.ms_per_token:.1f} ms/token ({r.tokens_per_s:.1f} tok/s), "
        f"mean accepted length {r.mean_accepted_length:.2f}; {1000 * other:.0f} ms outside the levels; "
        f"prefill {r.prompt_tokens} tokens in {1000 * r.prefill_s:.0f} ms "
        f"[{report.dtype}, {report.device}]"
    )
    if report.lenience != 1.0:
        lines.append(f"LOSSY: lenience {report.lenience}; the output does not follow the target's distribution")
    if report.check is not None:
        c = report.check
        if c.identical:
            lines.append("check: identical to the target's own greedy decoding")
        else:
            lines.append(f"check: first divergence at new token {c.first_divergence}, agreement {c.agreement:.1%}")
    return "\n".join(lines)


def emit_solve(report: SolveReport, as_json: bool, export: ExportReport | None = None, batch: BatchSolution | None = None) -> None:
    """A solve's plans, with ``batch`` its best plan per batch size and schedule (``--json``: under
    the key ``batch``), with ``export`` its pick exported (under ``export``)."""
    if as_json:
        extra = ({"batch": batch.to_dict()} if batch else {}) | ({"export": export.to_dict()} if export else {})
        click.echo(json.dumps({**report.to_dict(), **extra}))
        return
    click.echo(format_solve(report))
    if batch is not None:
        click.echo(format_batch_solve(batch, report.solve_id))
    if export is not None:
        emit_export(export, False)


def format_solve(report: SolveReport) -> str:
    """The plans of a solve as a table, best first."""
    lines = [
        f"target {report.target}, workload {report.workload}, {report.mode}, {report.acceptance} acceptance, context {report.context_len}, "
        + (f"{report.max_new_tokens} new tokens" if report.max_new_tokens is not None else "steady state")
        + (f", LOSSY: lenience {report.lenience}" if report.lenience != 1.0 else ""),
        f"{'plan':>5} {'kind':<15} {'ms/token':>9} {'accepted':>9} {'speed-up':>9} {'90% interval':>13}  hierarchy",
    ]
    for p in report.plans:
        interval = f"{p.speedup_interval[0]:.2f}-{p.speedup_interval[1]:.2f}" if p.speedup_interval else "-"
        pred = p.plan.prediction
        lines.append(
            f"{p.id:>5} {p.kind:<15} {pred.ms_per_token:>9.2f} {pred.mean_accepted_length:>9.2f} "
            f"{pred.speedup:>8.2f}x {interval:>13}  {p.plan.label}{' (tied with the pick)' if p.tied else ''}"
        )
    if report.interval_history:
        lines.append(
            f"intervals: the bootstrap over the profiled prompts, widened by how far {report.interval_history} plans validated "
            "before on this machine measured from their predictions, each in units of its own interval"
        )
    if report.thin_sample:
        lines.append(
            f"note: the pick's acceptance rests on {report.sample_prompts} prompts ({report.sample_positions} positions); prompts vary "
            f"more than so few show, and an interval from so few holds a held-out set's speed-up less often than 9 times in 10. Profile at least {THIN_PROMPTS} (--max-prompts)."
        )
    return "\n".join(lines)


def _safe(text: str) -> str:
    """Control characters (terminal escape sequences in an imported name) shown as '?'."""
    return "".join("?" if unicodedata.category(ch) == "Cc" and ch != "\n" else ch for ch in text)


def format_profiles(doc: ProfileDocument, hardware_ids: Mapping[str, int] | None = None) -> str:
    """``hsd-plan profiles show``: counts, then each machine (``#id`` from ``hardware_ids``, what
    ``solve --hardware`` takes) with the latency of each model measured there, then one line per
    workload, model and pair."""
    return _safe(_format_profiles(doc, hardware_ids or {}))


def _format_profiles(doc: ProfileDocument, hardware_ids: Mapping[str, int]) -> str:
    lines = [
        f"{len(doc.hardware)} hardware, {len(doc.models)} models, {len(doc.workloads)} workloads, "
        f"{len(doc.latency)} latency points, {len(doc.acceptance)} acceptance pairs"
    ]
    for h in doc.hardware:
        capability = f" ({h.capability})" if h.capability else ""
        kernels = f", {h.kernels} kernels" if h.kernels else ""
        number = f"#{hardware_ids[h.fingerprint]} " if h.fingerprint in hardware_ids else ""
        lines.append(
            f"hardware {number}{h.fingerprint}: {h.device} {h.device_name}{capability}, {h.threads} threads, "
            f"torch {h.torch_version}{kernels}"
        )
        if h.bandwidth_gbs is not None:
            peaks = ", ".join(f"{d} {g:.0f} GFLOP/s" for d, g in sorted((h.peak_gflops or {}).items()))
            lines.append(
                f"  floor probe: read {h.bandwidth_gbs:.1f} GB/s (p90/p10 {h.bandwidth_spread:.2f}){', ' + peaks if peaks else ''}"
            )
        for m in doc.models:  # this machine's curves: c(n) of one machine never mixes with another's
            if pts := [r for r in doc.latency if r.model == m.spec and r.hardware == h.fingerprint]:
                plain = [r for r in pts if r.batch_size == 1]  # c(n); c(n, b) for b > 1 only counted
                lines.append(f"  latency of {m.spec}: {len(pts)} points{_cost_text(plain)}")
    for w in doc.workloads:
        lines.append(f"workload {w.name}: {w.count} prompts ({w.content_hash[:12]})")
    for m in doc.models:
        pts = [r for r in doc.latency if r.model == m.spec]
        machines = len({r.hardware for r in pts})
        batches = sorted({r.batch_size for r in pts} - {1})
        also = f", batch sizes {','.join(map(str, batches))} too" if batches else ""
        lines.append(f"model {m.spec}: {m.parameters:,} parameters, {len(pts)} latency points on {machines} hardware{also}")
    names = {w.content_hash: w.name for w in doc.workloads}
    for a in doc.acceptance:
        lines.append(
            f"acceptance {a.drafter} -> {a.verifier} on {names.get(a.workload, a.workload[:12])} "
            f"({a.setting.mode}, T={a.setting.temperature}, top-p={a.setting.top_p}, {a.setting.dtype}): "
            f"alpha {a.alpha:.3f} over {a.positions} positions"
            + (", A(k) " + " ".join(f"{v:.2f}" for v in a.siblings[:8]) if a.siblings else "")  # sibling acceptance, k = 1..8
        )
    return "\n".join(lines)


def _cost_text(points: list) -> str:
    """``, c(1) = 47.2 ms (1.04x floor), c(8)/c(1) = 1.41`` at the shortest context profiled."""
    if not points:
        return ""
    ctx, at = shortest_context(points)
    c1 = at.get(1)
    if c1 is None:
        return ""
    text = f", c(1) = {c1.median_ms:.2f} ms"
    if (ratio := floor_ratio(c1)) is not None:
        text += f" ({ratio:.2f}x floor)"
    if 8 in at:
        text += f", c(8)/c(1) = {at[8].median_ms / c1.median_ms:.2f}"
    if 0 in at:
        text += f", its projection {at[0].median_ms:.2f} ms a proposal"
    return text + f" at context {ctx}"


def format_summary(summary: ProfileSummary) -> str:
    """The summary as two plain-text tables."""
    hw, st = summary.hardware, summary.setting
    lines = [
        f"{summary.measured} measurements taken, {summary.skipped} already stored"
        + (f", {summary.noisy} latency points still noisy (p90/p10 > {SPREAD_LIMIT})" if summary.noisy else "")
        + (f", {summary.inverted} pass sizes slower than the next wider one even measured again (kept)" if summary.inverted else "")
        + (f", {summary.remeasured} samples timed again: other work shared the CPU" if summary.remeasured else "")
        + (f", {summary.kept_busy} samples kept from a busy machine (--allow-busy)" if summary.kept_busy else "")
        + ("" if summary.busy_checked else ", other work on the CPU not checked (this system has no /proc/stat)")
        + " "
        f"[{hw.device_name} ({hw.capability}), {hw.threads} threads, {hw.kernels} kernels; workload {summary.workload.name} "
        f"({summary.workload.count} prompts); {st.mode}, dtype {st.dtype}]",
        "",
    ]
    name = max([36, *(len(m) + 2 for m in summary.models)])  # a student's directory can be a long path
    lines.append(f"{'model':<{name}}" + "".join(f"{f'c({n}) ms':>11}" for n in SUMMARY_N) + f"{'c(1)/floor':>12}   context")
    for row in summary.latency:
        cells = "".join(f"{v:>11.2f}" if v is not None else f"{'-':>11}" for v in row.ms)
        floor = f"{row.floor_ratio:>12.2f}" if row.floor_ratio is not None else f"{'-':>12}"
        lines.append(f"{row.model:<{name}}{cells}{floor}   {row.context_len}")
    lines += [
        f"{row.model}: steered; its projection costs {row.proposal_ms:.2f} ms once a proposal, beside its passes"
        for row in summary.latency
        if row.proposal_ms is not None
    ]
    if summary.acceptance:
        alpha = {(a.drafter, a.verifier): a.alpha for a in summary.acceptance}
        verifiers = [m for m in summary.models if any(v == m for _, v in alpha)]
        labels = [_without_folders(v) for v in verifiers]
        width = max([16, *(len(label) + 2 for label in labels)])
        lines += [
            "",
            "acceptance alpha (rows: drafter, columns: verifier)",
            f"{'':<{name}}" + "".join(f"{label:>{width}}" for label in labels),
        ]
        for d in summary.models:
            if any(dd == d for dd, _ in alpha):
                cells = "".join(f"{alpha[(d, v)]:>{width}.3f}" if (d, v) in alpha else f"{'':>{width}}" for v in verifiers)
                lines.append(f"{d:<{name}}{cells}")
    return "\n".join(lines)


def _without_folders(spec: str) -> str:
    """``spec`` with the folders of every path in it left out (a column header, not an address)."""
    return re.sub(r"[^:=,]*/", "", spec)


def _coverage(report: ValidationReport) -> str:
    """The summary's clause on the predicted intervals: how many held the measured speed-up, how wide."""
    hits = [p.covered for p in report.plans if p.covered is not None]
    if not hits:
        return ""
    width = report.median_interval_width
    wide = f", median width {width:.0%} of the prediction" if width is not None else ""
    past = f", widened by {report.interval_history} earlier validated plans' misses" if report.interval_history else ""
    history = report.coverage_history
    stored = (
        f" ({history.inside} of {history.plans}, {history.inside / history.plans:.0%}, over the {history.validations} validations "
        "of this target stored on this machine)"
        if history and history.validations > 1
        else ""
    )
    return f"measured inside the predicted 90% interval: {sum(hits)} of {len(hits)} plans{stored}{wide}{past}; "


def _expected(report: ValidationReport) -> str:
    """The clause on the error the draw of prompts alone makes (empty without intervals)."""
    expected = report.expected_abs_speedup_error
    if expected is None:
        return ""
    clause = f" ({expected:.1%} expected from which {report.prompt_count} prompts were drawn and the profile's timing spread alone"
    if expected <= ERROR_GOAL:
        return clause + ")"
    needed = report.prompts_for_error_goal
    if needed is not None:
        return clause + f"; about {needed} held-out prompts would expect {ERROR_GOAL:.0%})"
    if report.profiled_prompts:
        return clause + f"; the {report.profiled_prompts} profiled prompts alone leave more than {ERROR_GOAL:.0%}: profile more)"
    return clause + ")"


def format_validation(report: ValidationReport) -> str:
    """The report as a plain-text table with the summary line."""
    batched = report.batch_sizes != [1]  # a batch column, and each batch's throughput
    pick_batch = next(p.batch_size for p in report.plans if p.plan_id == report.pick)
    lines = [
        f"target {report.target}: {report.prompt_count} held-out prompts of {report.prompts}, "
        f"{report.mode}, {report.acceptance} acceptance model, context {report.context_len}"
        + (f", LOSSY: lenience {report.lenience}" if report.lenience != 1.0 else ""),
        (f"{'batch':>5} " if batched else "")
        + f"{'plan':>5} {'kind':<15} {'pred ms':>8} {'cal ms':>8} {'meas ms':>8} {'error':>7} {'speed-up p/c/m':>18} {'predicted 90%':>14} "
        + f"{'measured 90%':>13} "
        + f"{'accepted p/m':>13}  "
        + (f"{'tok/s':>8}  " if batched else "")
        + "hierarchy",
    ]
    for p in report.plans:
        interval = p.measured_speedup_interval
        spread = f"{interval[0]:.2f}-{interval[1]:.2f}" if interval else "-"
        band = p.predicted_speedup_interval
        mark = {True: " ", False: "!", None: " "}[p.covered]  # ! : the measured speed-up fell outside
        predicted = f"{band[0]:.2f}-{band[1]:.2f}{mark}" if band else "- "
        cal_ms = f"{p.calibrated_ms_per_token:>8.2f}" if p.calibrated_ms_per_token is not None else f"{'-':>8}"
        cal_up = f"{p.calibrated_speedup:.2f}" if p.calibrated_speedup is not None else "-"
        pred = p.plan.prediction
        plan_id = "-" if p.plan_id is None else p.plan_id
        lines.append(
            (f"{p.batch_size:>5} " if batched else "")
            + f"{plan_id:>5} {p.kind:<15} {pred.ms_per_token:>8.2f} {cal_ms} {p.measured_ms_per_token:>8.2f} "
            + f"{p.error:>+7.1%} {f'{pred.speedup:.2f}/{cal_up}/{p.measured_speedup:.2f}':>18} {predicted:>14} {spread:>13} "
            + f"{pred.mean_accepted_length:>6.2f}/{p.measured_mean_accepted_length:<6.2f}  "
            + (f"{p.measured_tokens_per_s:>8.1f}  " if batched else "")
            + f"{p.plan.label}{' (tied)' if p.tied else ''}"
        )
    for why in report.skipped:
        lines.append(f"not run: {why}")
    lines.append(
        f"median |speed-up error| {report.median_abs_speedup_error:.1%} as profiled, {report.median_abs_speedup_error_calibrated:.1%} calibrated"
        + _expected(report)
        + "; "
        f"median |error| {report.median_abs_error:.1%} raw, {report.median_abs_error_calibrated:.1%} calibrated "
        f"(target now / profiled: {report.drift:.3f}); "
        + _coverage(report)
        + f"regret {report.regret:.1%}, against the best untied plan {report.regret_untied:.1%} (pick: plan {report.pick}"
        + (f" at batch size {pick_batch}" if batched else "")
        + "); "
        f"validation {report.validation_id} stored"
    )
    if report.busy:
        lines.append(
            f"warning: {_busy_text(report)}; these errors are partly the machine's, not the model's: validate again on a quiet machine"
        )
    pick = next(p for p in report.plans if p.plan_id == report.pick)
    if report.state_changed:
        ratios = ", ".join(f"{r:.2f} at {n} token{'s' if n > 1 else ''}" for n, r in sorted(report.target_ratios.items()))
        lines.append(
            f"note: the machine is in another state than when it was profiled (the target's passes now / profiled: {ratios}); "
            f"here the pick's speed-up is {pick.calibrated_speedup:.2f}x calibrated, not the profile's {pick.plan.prediction.speedup:.2f}x. "
            "Profile again to plan for this state."
        )
    if pick.same_text is not None and pick.text_runs and pick.same_text < pick.text_runs:
        lines.append(
            f"note: the pick's output left the target's own greedy output in {pick.text_runs - pick.same_text} of its "
            f"{pick.text_runs} runs: a pass over several tokens rounds otherwise than a pass over one, a flipped near-tie "
            "changes the rest of the reply, and the profile measured acceptance on the target's own text only"
        )
    if report.acceptance_shift:
        levels = "; ".join(
            f"{x.drafter} under {x.verifier}: {x.measured:.2f} {x.what}, {x.predicted:.2f} predicted ({x.change:+.0%}"
            + (f"; {x.spread[0]:.2f}-{x.spread[1]:.2f} for 90% of prompt sets drawn like the profiled ones" if x.spread else "")
            + ")"
            for x in report.acceptance_shift
        )
        lines.append(
            f"note: these prompts draft otherwise than the profiled ones ({levels}); the prediction rests on the profiled "
            "prompts' acceptance. Profile more prompts like these to plan for them."
        )
    return "\n".join(lines)


def _busy_text(report: ValidationReport) -> str:
    """What other work the validation ran beside: over the whole of it, and the runs it contended with."""
    runs = sum(p.busy_runs or 0 for p in report.plans)
    whole = report.contention
    text = "other work shared the CPU while the plans ran"
    if whole is not None:
        text += f" ({whole.describe()} on average)"
    if runs:
        text += f", contending with {runs} run{'s' if runs > 1 else ''}"
    return text
