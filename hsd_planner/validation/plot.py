"""The validation figure: predicted against measured ms per token, and measured speed-ups."""

from __future__ import annotations

from pathlib import Path

from ..errors import PathError
from ..paths import check_output_path, write_atomic
from .report import ValidationReport

__all__ = ["check_plot_path", "plot_validation", "shared_prefix"]


FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
# how a figure of each format begins: an existing file is replaced without --force only when it is one
_MAGIC = {".png": (b"\x89PNG\r\n\x1a\n",), ".pdf": (b"%PDF",), ".svg": (b"<?xml", b"<svg"), ".jpg": (b"\xff\xd8\xff",)}


def _is_figure(path: Path) -> bool:
    """Whether the regular file ``path`` holds a figure in the format its suffix names."""
    suffix = ".jpg" if path.suffix.lower() == ".jpeg" else path.suffix.lower()
    with open(path, "rb") as fh:
        head = fh.read(16)
    return head.startswith(_MAGIC.get(suffix, ()))


def check_plot_path(text: str | Path, force: bool = False) -> Path:
    """Refuse, before a long run, a figure path that cannot or must not be written at its end.

    An existing file is replaced only when it is a figure of the same format, or with ``force``;
    see :func:`~hsd_planner.paths.check_output_path` for what else is refused.
    """
    path = Path(text)
    if path.suffix.lower() not in FORMATS:
        raise PathError(f"--plot {text}: use a file name ending in {', '.join(FORMATS)}")
    return check_output_path(text, "--plot", force, replaceable=_is_figure, hint="it is not a figure of that format; pass --force")


def plot_validation(report: ValidationReport, path: Path) -> None:
    """Write the figure (its format from the suffix) with two panels: predicted vs measured (with
    y = x) and measured speed-up; atomically, so a failed write leaves ``path`` as it was."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plans = report.plans
    # constrained layout sizes the panels around their labels and the figure's title (tight_layout
    # leaves a title wider than its panel to be cut at the figure's edge)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5), layout="constrained")
    fig.suptitle(f"{report.target} on {report.prompts}: {len(plans)} plans validated")
    pred = [p.plan.prediction.ms_per_token for p in plans]
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
    family = shared_prefix([name for p in order for name in p.plan.chain])
    labels = [_cut(f"#{p.plan_id} {p.plan.label.replace(family, '')}", 60) for p in order]
    ax2.barh(labels, [p.measured_speedup for p in order], color="tab:green", label="measured")
    ax2.scatter([p.plan.prediction.speedup for p in order], labels, color="black", marker="|", s=200, zorder=3, label="predicted")
    ax2.axvline(1.0, color="grey", lw=1, ls="--")
    ax2.invert_yaxis()
    ax2.legend(loc="lower right", fontsize=8)
    ax2.set(
        xlabel="speed-up over autoregressive" + (f" (models {family}...)" if family else ""),
        title=f"median |speed-up error| {report.median_abs_speedup_error:.1%}",
    )
    ax2.tick_params(axis="y", labelsize=7)
    fmt = "jpg" if path.suffix.lower() == ".jpeg" else path.suffix.lower().lstrip(".")
    try:
        write_atomic(path, "--plot", lambda tmp: fig.savefig(tmp, dpi=110, format=fmt))
    finally:
        plt.close(fig)


def shared_prefix(names: list[str]) -> str:
    """The start, up to and including a ``-``, that every model name (the lookup's aside) shares,
    so that a plan's label can leave it out: "" when there is none or only one name.

    >>> shared_prefix(["ngram", "qwen2.5-coder-0.5b:quant=int8", "qwen2.5-coder-1.5b"])
    'qwen2.5-coder-'
    >>> shared_prefix(["smollm2-135m:layers=4", "smollm2-135m"]), shared_prefix(["a-1", "b-1"]), shared_prefix(["t"])
    ('smollm2-', '', '')
    """
    models = sorted({n for n in names if not n.startswith("ngram")})
    if len(models) < 2:
        return ""
    first, last = models[0], models[-1]
    common = next((i for i, (a, b) in enumerate(zip(first, last)) if a != b), min(len(first), len(last)))
    cut = first.rfind("-", 0, common) + 1  # end at a dash, so that no name loses part of a word
    return first[:cut] if cut < min(len(first), len(last)) else ""


def _cut(text: str, width: int) -> str:
    """``text``, cut to ``width`` characters with an ellipsis where longer."""
    return text if len(text) <= width else text[: width - 3] + "..."
