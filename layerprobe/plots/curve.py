"""The pruning-curve figure, drawn from a PruneCurveResult only (so `layerprobe plot prune_curve.json` redraws it)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.plots.common import pyplot
from layerprobe.results import PruneCurveResult, RunDir, atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_prune_curve(result: PruneCurveResult, out_dir: Path) -> list[Path]:
    """One figure per task (its first metric): score vs fraction removed, a line per method, ±1 paired stderr."""
    plt = pyplot()
    paths = []
    for task in result.tasks:
        fig = prune_curve_figure(result, task)
        path = RunDir(out_dir).plot("prune_curve", task)
        try:
            atomic_write(path, partial(fig.savefig, format="png", dpi=130))
        finally:
            plt.close(fig)
        paths.append(path)
    return paths


def prune_curve_figure(result: PruneCurveResult, task: str) -> Figure:
    """Build one task's pruning-curve figure (returned open, so the report can inline it)."""
    name, metric = next(iter(result.tasks[task].items()))
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2), layout="constrained")
    ax.axhline(metric.baseline, color="0.5", lw=0.8, ls="--", label="full model")
    for method, points in metric.methods.items():
        x = [n / result.num_layers for n in points.n]
        line = ax.plot(x, points.score, marker="o", ms=3, label=method, alpha=0.6 if "random" in method else 1)[0]
        err = [(s, e) for s, e in zip(points.score, points.delta_stderr, strict=True) if e is not None]
        if len(err) == len(x):
            ax.fill_between(
                x, [s - e for s, e in err], [s + e for s, e in err], color=line.get_color(), alpha=0.15, lw=0
            )
    ax.set_xlabel("fraction of blocks removed")
    ax.set_ylabel(f"{task} {name}")
    ax.set_title(f"{result.model.id}: pruning curve (band: ±1 paired stderr vs full model)", fontsize=9)
    ax.legend(fontsize=8)
    return fig
