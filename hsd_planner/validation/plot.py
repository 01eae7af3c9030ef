"""The validation figure: predicted against measured ms per token, and measured speed-ups."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import HSDError
from .report import ValidationReport

__all__ = ["check_plot_path", "plot_validation"]


FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def check_plot_path(path: Path) -> None:
    """Refuse, before a long run, a figure path that cannot be written at its end."""
    if path.suffix.lower() not in FORMATS:
        raise HSDError(f"--plot {path}: use a file name ending in {', '.join(FORMATS)}")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise HSDError(f"--plot {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise HSDError(f"--plot {path}: not writable")


def plot_validation(report: ValidationReport, path: Path) -> None:
    """Write a PNG with two panels: predicted vs measured (with y = x) and measured speed-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plans = report.plans
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5))
    pred = [p.predicted_ms_per_token for p in plans]
    meas = [p.measured_ms_per_token for p in plans]
    top = max(pred + meas) * 1.1
    ax1.plot([0, top], [0, top], color="grey", lw=1, ls="--", label="y = x")
    ax1.scatter(pred, meas, color="tab:blue", zorder=3)
    for p, x, y in zip(plans, pred, meas):
        ax1.annotate(f"#{p.plan_id}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax1.set(
        xlim=(0, top),
        ylim=(0, top),
        xlabel="predicted ms / token",
        ylabel="measured ms / token",
        title=f"median |error| {report.median_abs_error:.1%}, regret {report.regret:.1%}",
    )
    ax1.legend(loc="upper left")
    order = sorted(plans, key=lambda p: -p.measured_speedup)
    labels = [f"#{p.plan_id} {p.label}"[:60] for p in order]
    ax2.barh(labels, [p.measured_speedup for p in order], color="tab:green", label="measured")
    ax2.scatter([p.predicted_speedup for p in order], labels, color="black", marker="|", s=200, zorder=3, label="predicted")
    ax2.axvline(1.0, color="grey", lw=1, ls="--")
    ax2.invert_yaxis()
    ax2.legend(loc="lower right", fontsize=8)
    ax2.set(
        xlabel="speed-up over autoregressive",
        title=f"{report.target} on {report.prompts}; median |speed-up error| {report.median_abs_speedup_error:.1%}",
    )
    ax2.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
