"""The pruning-curve figure, drawn from a PruneCurveResult only (so `layerprobe plot prune_curve.json` redraws it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.plots.common import metric_label, pyplot, save_figure, title_name
from layerprobe.results import PruneCurveResult, RunDir, method_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # methods that chose the same sets stay told apart
LINE_STYLES = ("-", "--", ":", "-.")  # answers changed: one style per filter of a generating task


def plot_prune_curve(result: PruneCurveResult, out_dir: Path) -> list[Path]:
    """One figure per task (the metric that drove the choice, else its primary one): PNG and PDF."""
    run = RunDir(out_dir)
    paths = []
    for task in result.baseline:
        figure = prune_curve_figure(result, task)
        paths += save_figure(
            figure, run.plot("prune_curve", task), run.plot("prune_curve", task, suffix="pdf"), dpi=130
        )
    return paths


def prune_curve_figure(result: PruneCurveResult, task: str) -> Figure:
    """Build one task's pruning-curve figure (returned open, so the report can inline it).

    A line per method and, at each n, a bar for the paired 95 % interval of ΔP placed around the full
    model's score (the full model's score plus the interval of score − full model; a sequential run's
    anytime-valid interval, each set stopped when its ΔP was known, labelled so). Methods often choose
    the same set (angular and influence for small n, say), so each method's points are shifted
    sideways by a fraction of one unit's width: identical curves stay visible side by side, and bars
    never hide each other the way shaded bands do. The legend sits outside the axes, so no label covers
    a curve. A generating task gets a second panel: per method and filter, the share of answers that
    differ from the full model's, with its Wilson 95 % interval.
    """
    plt = pyplot()
    from matplotlib.lines import Line2D

    name = result.shown_metric(task)
    metric = result.tasks[task][name]
    filters = result.answer_filters(task)
    if filters:
        fig, (ax, lower) = plt.subplots(
            2, 1, figsize=(7.6, 6.4), sharex=True, height_ratios=[3, 2], layout="constrained"
        )
    else:
        fig, ax = plt.subplots(figsize=(7.6, 4.2), layout="constrained")
    ax.axhline(metric.baseline, color="0.4", lw=0.8, ls="--", label="full model")
    base = result.baseline[task][name]
    if base.ci95 is not None:
        ax.axhspan(*base.ci95, color="0.5", alpha=0.12, lw=0, label="full model 95 %")
    banded = False
    colours = {}
    for k, (method, points) in enumerate(metric.methods.items()):
        x = dodged(points.fractions(result.num_layers), k, len(metric.methods), result.num_layers)
        opacity = 0.6 if method.startswith("random") else 1.0
        style = {"marker": MARKERS[k % len(MARKERS)], "ms": 4, "mfc": "none", "alpha": opacity}
        line = ax.plot(x, points.score, label=method_label(method), **style)[0]
        colours[method] = (line.get_color(), style)
        intervals = points.delta_ci95 or [None] * len(x)
        if x and all(ci is not None for ci in intervals):
            low = [metric.baseline + ci[0] for ci in intervals if ci is not None]
            high = [metric.baseline + ci[1] for ci in intervals if ci is not None]
            ax.vlines(x, low, high, color=line.get_color(), lw=1.1, alpha=opacity * 0.8)
            banded = True
    handles, labels = ax.get_legend_handles_labels()
    if banded:
        handles.append(Line2D([], [], color="0.3", marker="|", ms=10, mew=1.1, ls="none"))
        labels.append(
            "anytime 95 % (paired ΔP, sequential)" if result.settings.get("precision") else "95 % (paired ΔP)"
        )
    sublayers = any(points.units_per_block > 1 for points in metric.methods.values())
    ax.set_ylabel(f"{task}: {metric_label(name)}")
    ax.set_title(f"{title_name(result.model)}: pruning curve", fontsize=9)
    ax.grid(alpha=0.3)
    if filters:
        handles += _draw_answers_changed(lower, result, task, filters, colours)
        labels += [f"answers changed ({f})" for f in filters]
        ax = lower
    ax.set_xlabel("fraction of blocks removed" + (" (a sublayer counts ½)" if sublayers else ""))
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    return fig


def dodged(fractions: list[float], k: int, count: int, num_layers: int) -> list[float]:
    """Method k of `count`'s x positions, shifted so the methods sit side by side within 0.6 of one unit's width.

    A unit is the smallest step of the x axis: one block, or half a block when a method counts sublayers.
    """
    step = 1 / (2 * num_layers)
    offset = (k - (count - 1) / 2) * 0.6 * step / max(count, 1)
    return [f + offset for f in fractions]


def _draw_answers_changed(
    ax: Axes, result: PruneCurveResult, task: str, filters: list[str], colours: dict[str, tuple[str, dict[str, Any]]]
) -> list[Line2D]:
    """Per method and filter, the share of answers that differ from the full model's and its Wilson 95 % band.

    Returns one legend handle per filter (its line style).
    """
    from matplotlib.lines import Line2D

    for k, (method, strategy) in enumerate(result.methods.items()):
        colour, style = colours[method]
        per_block = 1 if strategy.unit == "block" else 2
        for f, filter_name in enumerate(filters):
            found = [(n, s.flip_rate.get(task, {}).get(filter_name)) for n, s in sorted(strategy.sets.items())]
            points = [(n, flips) for n, flips in found if flips is not None]
            fractions = [n / (per_block * result.num_layers) for n, _ in points]
            x = dodged(fractions, k * len(filters) + f, len(result.methods) * len(filters), result.num_layers)
            ax.plot(x, [p.rate for _, p in points], color=colour, ls=LINE_STYLES[f % len(LINE_STYLES)], **style)
            low, high = [p.ci95[0] for _, p in points], [p.ci95[1] for _, p in points]
            ax.vlines(x, low, high, color=colour, lw=0.9, alpha=0.6)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("answers changed\n(share; Wilson 95 %)")
    ax.grid(alpha=0.3)
    return [Line2D([], [], color="0.3", ls=LINE_STYLES[f % len(LINE_STYLES)]) for f in range(len(filters))]
