"""The per-block history figures of `layerprobe track`: heat strip, gradient-norm signature, pruning curves.

Each run is one row of the heat strip (adjacent distance d(x^l, x^(l+1)) per block; the depth signature
the Mix-LN and LayerNorm-Scaling papers read: Pre-LN leaves deep blocks lazy, their fixes wake them), one
line of the gradient signature, one line of each task's pruning curve. Runs are coloured from dark (first)
to light (last). Blocks sit at their index, or at relative depth (l + 0.5) / L with `--align relative`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import metric_label, pyplot, short_name
from layerprobe.results import TrackResult, TrackRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEAT_CMAP = "viridis_r"  # as the angular heatmap: small distances (lazy blocks) yellow
PREFERRED_METHOD = "angular"  # the pruning curve followed across runs: Gromov et al.'s choice of span


def run_colours(count: int) -> list[tuple[float, float, float, float]]:
    """One colour per run, dark to light in the history's order."""
    cmap = pyplot().get_cmap("viridis")
    return [cmap(0.85 * i / max(1, count - 1)) for i in range(count)]


def block_edges(run: TrackRun, align: str) -> np.ndarray:
    """The cell edges of a run's blocks: l ± 0.5, or l / L … (l + 1) / L at relative depth."""
    size = run.num_layers
    if align == "relative":
        return np.arange(size + 1, dtype=float) / size
    return np.arange(size + 1, dtype=float) - 0.5


def block_ticks(ax: Axes, track: TrackResult) -> None:
    """Whole block numbers on the x axis (at most 16 labels) when blocks sit at their index."""
    if track.align == "block":
        size = max(run.num_layers for run in track.runs)
        ax.set_xticks(range(0, size, max(1, math.ceil(size / 16))))


def depth_label(track: TrackResult) -> str:
    """The x axis of the per-block figures."""
    return "relative depth (l + 0.5) / L" if track.align == "relative" else "block l"


def _title(track: TrackResult, what: str) -> str:
    return f"{short_name(track.name)} · {what}"


def heat_figure(track: TrackResult) -> Figure | None:
    """Adjacent distance per block (columns) and run (rows, first at the top), lazy cells dotted."""
    runs = [run for run in track.runs if run.angular]
    if not runs:
        return None
    fig, ax = pyplot().subplots(figsize=(8.5, 1.4 + 0.38 * len(track.runs)), layout="constrained")
    finite = [d for run in runs for d in run.angular.adjacent if math.isfinite(d)]  # type: ignore[union-attr]
    top = max(finite, default=1.0)
    image = None
    lazy_x, lazy_y = [], []
    for row, run in enumerate(track.runs):
        if run.angular is None:
            continue
        data = np.ma.masked_invalid(np.array([run.angular.adjacent], dtype=float))
        image = ax.pcolormesh(
            block_edges(run, track.align), [row - 0.5, row + 0.5], data, cmap=HEAT_CMAP, vmin=0.0, vmax=top
        )
        for position, d in zip(run.positions, run.angular.adjacent, strict=True):
            if d < run.angular.lazy_threshold:
                lazy_x.append(position)
                lazy_y.append(row)
    label = depth_label(track)
    if lazy_x:
        ax.scatter(lazy_x, lazy_y, s=9, color="white", edgecolors="black", linewidths=0.4)
        label += f"   (white dots: lazy, d < {runs[0].angular.lazy_threshold:g})"  # type: ignore[union-attr]
    ax.set_yticks(range(len(track.runs)))
    ax.set_yticklabels([run.label for run in track.runs], fontsize=8)
    ax.set_ylim(len(track.runs) - 0.5, -0.5)
    block_ticks(ax, track)
    ax.set_xlabel(label)
    if image is not None:
        fig.colorbar(image, ax=ax, label=r"$d(x^l,\,x^{l+1})$", pad=0.01, aspect=12)
    ax.set_title(_title(track, "adjacent distance per block (heat strip)"), fontsize=10)
    return fig


def grad_figure(track: TrackResult) -> Figure | None:
    """The gradient-norm signature: ‖∇θ_l loss‖ per block, one line per run (depth --grad; no interval recorded)."""
    runs = [(run, colour) for run, colour in zip(track.runs, run_colours(len(track.runs)), strict=True)]
    runs = [(run, colour) for run, colour in runs if run.depth and run.depth.grad]
    if not runs:
        return None
    fig, ax = pyplot().subplots(figsize=(7.5, 4.2), layout="constrained")
    for run, colour in runs:
        grad = np.array(run.depth.grad, dtype=float)  # type: ignore[union-attr]
        grad[~(grad > 0)] = np.nan  # a log axis cannot show 0 or a failed value
        ax.plot(run.positions, grad, "o-", ms=3, color=colour, label=run.label)
    ax.set_yscale("log")
    loss = next(run.depth.grad_loss for run, _ in runs if run.depth)
    ax.set_ylabel(f"gradient norm per block ({loss} loss)")
    ax.set_xlabel(depth_label(track))
    block_ticks(ax, track)
    ax.grid(alpha=0.3, which="both")
    _legend(ax, "no interval: depth.json records none")
    ax.set_title(_title(track, "gradient-norm signature"), fontsize=10)
    return fig


def curve_figure(track: TrackResult) -> Figure | None:
    """Each task's pruning curve (ΔP vs fraction removed), one line per run, with its 95 % band."""
    tasks = list(dict.fromkeys(task for run in track.runs if run.prune_curve for task in run.prune_curve))
    if not tasks:
        return None
    colours = run_colours(len(track.runs))
    fig, axes = pyplot().subplots(
        len(tasks), 1, figsize=(7.5, 3.4 * len(tasks) + 0.4), layout="constrained", squeeze=False
    )
    for ax, task in zip(axes[:, 0], tasks, strict=True):
        metric, method = "", PREFERRED_METHOD
        for run, colour in zip(track.runs, colours, strict=True):
            curve = (run.prune_curve or {}).get(task)
            if curve is None:
                continue
            metric = curve.metric
            method = PREFERRED_METHOD if PREFERRED_METHOD in curve.methods else next(iter(curve.methods))
            points = curve.methods[method]
            ax.plot(points.fraction, points.delta, "o-", ms=3, color=colour, label=run.label)
            low = [math.nan if c is None else c[0] for c in points.delta_ci95]
            high = [math.nan if c is None else c[1] for c in points.delta_ci95]
            ax.fill_between(points.fraction, low, high, color=colour, alpha=0.15, linewidth=0)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel("fraction of blocks removed")
        ax.set_ylabel(f"ΔP ({metric_label(metric)})" if metric else "ΔP")
        ax.grid(alpha=0.3)
        _legend(ax, "band: paired 95 % CI of ΔP")
        ax.set_title(_title(track, f"{task}: pruning curve, {method} spans"), fontsize=10)
    return fig


def _legend(ax: Axes, heading: str) -> None:
    """The runs' legend beside the axes (many runs would cover the lines), headed by what the bands are."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title=heading, title_fontsize=7)
