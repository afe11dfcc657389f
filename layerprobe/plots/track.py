"""The history figures of `layerprobe track`, drawn from a TrackResult only: one line per tracked number.

Across the runs (by training step, or in the given order): the lazy-block count with its 95 % range,
the mean adjacent distance with its 95 % interval, each task's full-model score and the ΔP of the watched
blocks with their paired 95 % intervals, residual growth, and heal.json's held-out KL of the pruned and the
healed model with the recovery of each metric. Per block (track_blocks.py): the heat strip
of adjacent distances, the gradient-norm signature and the pruning curves. Every interval drawn is a 95 %
interval and says so in its legend; a number recorded without one says that too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import metric_label, place_legend, pyplot, save_figure, short_name
from layerprobe.plots.track_blocks import curve_figure, grad_figure, heat_figure
from layerprobe.results import INDEPENDENT_BLOCKS, RunDir, TrackResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LINE = "#1f4e79"
TASK_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


def plot_track(track: TrackResult, out_dir: Path) -> list[Path]:
    """Draw every figure the history has data for: `track_<what>.png` and `.pdf` in `out_dir`."""
    run = RunDir(out_dir)
    paths: list[Path] = []
    for what, figure in track_figures(track).items():
        paths += save_figure(figure, run.plot("track", what), run.plot("track", what, suffix="pdf"))
    return paths


def track_figures(track: TrackResult) -> dict[str, Figure]:
    """What → its figure (returned open), for the kinds of result the runs hold."""
    builders: dict[str, Callable[[TrackResult], Figure | None]] = {
        "lazy": lazy_figure,
        "adjacent": adjacent_figure,
        "heat": heat_figure,
        "scores": scores_figure,
        "delta": delta_figure,
        "residual": residual_figure,
        "grad": grad_figure,
        "curve": curve_figure,
        "heal": heal_figure,
    }
    figures = {}
    for what, build in builders.items():
        figure = build(track)
        if figure is not None:
            figures[what] = figure
    return figures


def ticker() -> ModuleType:
    """matplotlib.ticker, imported with the first figure (as pyplot)."""
    import matplotlib.ticker

    return matplotlib.ticker


def run_axis(ax: Axes, track: TrackResult) -> np.ndarray:
    """The x positions of the runs (their steps, or 0 … n−1 labelled with the runs), with the axis labelled."""
    if track.order == "step":
        ax.set_xlabel("training step")
        return np.array([run.step or 0 for run in track.runs], dtype=float)
    x = np.arange(len(track.runs), dtype=float)
    ax.set_xticks(x)
    ax.set_xticklabels(
        [run.label for run in track.runs],
        rotation=30 if len(x) > 4 else 0,
        ha="right" if len(x) > 4 else "center",
        fontsize=8,
    )
    ax.set_xlabel("run (as given)")
    return x


def title(track: TrackResult, what: str) -> str:
    """`<model> · <what>` (the first model, marked when runs of several were allowed)."""
    return f"{short_name(track.name)} · {what}"


def values(items: Sequence[float | None]) -> np.ndarray:
    """Numbers to draw, with None (not measured) as NaN: a gap in the line."""
    return np.array([math.nan if v is None else v for v in items], dtype=float)


def draw_series(
    ax: Axes,
    x: np.ndarray,
    y: Sequence[float | None],
    intervals: Sequence[Sequence[float] | None] | None,
    *,
    colour: str,
    label: str,
    interval_label: str | None = None,
) -> None:
    """A line over the runs, error bars from each (low, high) interval where known, and their legend entry."""
    points = values(y)
    ax.plot(x, points, "o-", color=colour, label=label)
    if intervals is None:
        return
    low = values([i[0] if i else None for i in intervals])
    high = values([i[1] if i else None for i in intervals])
    has = np.isfinite(low) & np.isfinite(high) & np.isfinite(points)
    if has.any():
        errors = np.vstack([points[has] - low[has], high[has] - points[has]]).clip(min=0)
        ax.errorbar(x[has], points[has], yerr=errors, fmt="none", ecolor=colour, capsize=3, elinewidth=1)
        if interval_label:
            ax.errorbar([], [], yerr=[], fmt="none", ecolor=colour, label=interval_label)


def finish(ax: Axes, track: TrackResult, ylabel: str, what: str, legend_title: str | None = None) -> None:
    """Label, grid, legend and title of one panel."""
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.set_title(title(track, what), fontsize=10)
    place_legend(ax, fontsize=8, title=legend_title, title_fontsize=7)  # where it hides no point or cap


def one_panel() -> tuple[Figure, Axes]:
    """A figure of one panel, as wide as every history figure."""
    fig, ax = pyplot().subplots(figsize=(7.5, 4.2), layout="constrained")
    return fig, ax


def lazy_figure(track: TrackResult) -> Figure | None:
    """Lazy blocks per run: the count, and the 95 % range from surely below to possibly below the threshold."""
    runs = [run.angular for run in track.runs]
    if not any(runs):
        return None
    fig, ax = one_panel()
    ranges = [
        None if a is None or a.surely_below is None or a.possibly_below is None else [a.surely_below, a.possibly_below]
        for a in runs
    ]
    draw_series(
        ax,
        run_axis(ax, track),
        [a.lazy_count if a else None for a in runs],
        ranges,
        colour=LINE,
        label="lazy blocks (d < threshold)",
        interval_label="95 % range: surely below … possibly below",
    )
    threshold = next(a.lazy_threshold for a in runs if a)
    ax.set_ylim(bottom=-0.3, top=max(run.num_layers for run in track.runs) + 0.3)
    ax.yaxis.set_major_locator(ticker().MaxNLocator(integer=True))
    finish(ax, track, f"blocks with d(x^l, x^(l+1)) < {threshold:g}", "lazy blocks (95 % range)")
    return fig


def adjacent_figure(track: TrackResult) -> Figure | None:
    """The mean adjacent distance per run with its 95 % interval (marked where it assumes blocks independent)."""
    runs = [run.angular for run in track.runs]
    if not any(runs):
        return None
    fig, ax = one_panel()
    independent = any(a and a.stderr_method == INDEPENDENT_BLOCKS for a in runs)
    draw_series(
        ax,
        run_axis(ax, track),
        [a.mean_adjacent if a else None for a in runs],
        [a.mean_adjacent_ci95 if a else None for a in runs],
        colour=LINE,
        label="mean over blocks of d(x^l, x^(l+1))",
        interval_label="95 % CI" + (" (assumes blocks independent)" if independent else " (from per-window values)"),
    )
    finish(ax, track, "mean adjacent angular distance", "mean adjacent distance (95 % CI)")
    return fig


def _tasks(track: TrackResult) -> list[str]:
    return list(dict.fromkeys(task for run in track.runs if run.prune_drop for task in run.prune_drop))


def _task_axes(count: int) -> tuple[Figure, list[Axes]]:
    fig, axes = pyplot().subplots(count, 1, figsize=(7.5, 3.0 * count + 0.6), layout="constrained", squeeze=False)
    return fig, list(axes[:, 0])


def scores_figure(track: TrackResult) -> Figure | None:
    """Each task's full-model score per run, with its 95 % interval (track.json's: `stats.score_interval95`)."""
    tasks = _tasks(track)
    if not tasks:
        return None
    fig, axes = _task_axes(len(tasks))
    for k, (ax, task) in enumerate(zip(axes, tasks, strict=True)):
        entries = [(run.prune_drop or {}).get(task) for run in track.runs]
        metric = next(e.metric for e in entries if e)
        draw_series(
            ax,
            run_axis(ax, track),
            [e.baseline if e else None for e in entries],
            [e.baseline_ci95 if e else None for e in entries],
            colour=TASK_COLOURS[k % len(TASK_COLOURS)],
            label=f"{task} {metric_label(metric)} (full model)",
            interval_label="95 % CI (Wilson for an accuracy, else ± 1.96 stderr)",
        )
        finish(ax, track, metric_label(metric), f"{task}: full-model score (95 % CI)")
    return fig


def delta_figure(track: TrackResult) -> Figure | None:
    """ΔP of each task's watched blocks per run, with the paired 95 % intervals of prune_drop.json."""
    tasks = [task for task in _tasks(track) if track.watch.get(task)]
    if not tasks:
        return None
    fig, axes = _task_axes(len(tasks))
    for ax, task in zip(axes, tasks, strict=True):
        x = run_axis(ax, track)
        entries = [(run.prune_drop or {}).get(task) for run in track.runs]
        metric = next(e.metric for e in entries if e)
        for k, block in enumerate(track.watch[task]):
            picked = [next((d for d in e.watched if d.watched == block), None) if e else None for e in entries]
            offset = (k - (len(track.watch[task]) - 1) / 2) * _jitter(x)
            draw_series(
                ax,
                x + offset,
                [d.delta if d else None for d in picked],
                [d.delta_ci95 if d else None for d in picked],
                colour=TASK_COLOURS[k % len(TASK_COLOURS)],
                label=f"block {block}",
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.errorbar([], [], yerr=[], fmt="none", ecolor="black", label="paired 95 % CI of ΔP")
        finish(
            ax,
            track,
            f"ΔP = pruned − baseline ({metric_label(metric)})",
            f"{task}: ΔP of watched blocks (paired 95 % CI)",
            legend_title=f"watched ({track.watch_source})",
        )
    return fig


def _jitter(x: np.ndarray) -> float:
    """A small horizontal offset so the intervals of several blocks at one run do not hide each other."""
    span = float(np.nanmax(x) - np.nanmin(x)) if len(x) > 1 else 1.0
    return 0.012 * (span or 1.0)


def residual_figure(track: TrackResult) -> Figure | None:
    """Residual growth RMS(x^L)/RMS(x^0) per run (depth.json records no interval for it)."""
    runs = [run.depth for run in track.runs]
    if not any(runs):
        return None
    fig, ax = one_panel()
    x = run_axis(ax, track)
    draw_series(ax, x, [d.rms_growth if d else None for d in runs], None, colour=LINE, label="RMS(x^L) / RMS(x^0)")
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    finish(ax, track, "residual growth across the stack", "residual growth", "no interval: depth.json records none")
    return fig


HEAL_COLOURS = {"pruned": "#c44e52", "healed": "#55a868"}  # as heal.png draws them
RECOVERY_METRICS = {"kl": "KL(original ‖ model)", "nll": "NLL", "top1_agreement": "top-1 agreement"}


def heal_figure(track: TrackResult) -> Figure | None:
    """Runs with a heal.json: held-out KL(original ‖ ·) of the pruned and the healed model, and each recovery.

    Top: both models' KL with their 95 % intervals (the original's is 0 by definition); bottom: the recovery
    (P_healed − P_pruned) / (P_original − P_pruned) of each metric with its bootstrap 95 % interval, a gap
    where heal.json says it is not defined (the cut cost nothing measurable).
    """
    heals = [run.heal for run in track.runs]
    if not any(heals):
        return None
    fig, (top, bottom) = pyplot().subplots(2, 1, figsize=(7.5, 6.6), layout="constrained", sharex=True)
    x = run_axis(bottom, track)
    for model, colour in HEAL_COLOURS.items():
        kl = [h.metrics["kl"] if h and "kl" in h.metrics else None for h in heals]
        draw_series(
            top,
            x,
            [k.get(model) if k else None for k in kl],
            [k.get(f"{model}_ci95") if k else None for k in kl],
            colour=colour,
            label=f"{model} model",
        )
    top.axhline(0.0, color="black", linewidth=0.8, label="original (0)")
    top.errorbar([], [], yerr=[], fmt="none", ecolor="black", label="95 % CI")
    top.set_ylim(top=top.get_ylim()[1] * 1.6)  # room above the lines for the legend
    finish(top, track, "held-out KL(original ‖ model)", "heal: held-out KL of the pruned and the healed model")
    for k, (metric, words) in enumerate(RECOVERY_METRICS.items()):
        entries = [h.metrics.get(metric) if h else None for h in heals]
        recovered = [e["recovery"] if e else None for e in entries]
        draw_series(
            bottom,
            x + (k - 1) * _jitter(x),
            [None if r is None else 100 * r for r in recovered],
            [None if not e or not e["recovery_ci95"] else [100 * b for b in e["recovery_ci95"]] for e in entries],
            colour=TASK_COLOURS[k],
            label=words,
        )
    for level in (0.0, 100.0):
        bottom.axhline(level, color="0.5", linewidth=0.8, linestyle="--")
    bottom.errorbar([], [], yerr=[], fmt="none", ecolor="black", label="bootstrap 95 % CI")
    finish(
        bottom,
        track,
        "recovery (% of the cut's cost won back)",
        "heal: recovery per metric (95 % CI)",
        legend_title="a gap: recovery not defined",
    )
    methods = sorted({h.method for h in heals if h})
    fig.suptitle(f"healed by {', '.join(methods)}", fontsize=9)
    return fig
