"""ΔP bars: what removing each layer does to a task's score, coloured by whether it hurts, helps or is noise.

With paired uncertainty (results that carry paired stderrs) the error bars are the paired 95 % intervals of ΔP and
a bar is red or blue only when its interval excludes 0; older files keep the pruned scores' own stderrs
and the baseline's noise band around 0. `draw_bars`, `zero_line` and `value_text` also draw the gate's
baseline-vs-candidate bars, so a compare plot looks like the plots of the runs it compares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import (
    HARMFUL,
    HELPFUL,
    MISSING,
    WITHIN_NOISE,
    effect_color,
    layer_axis,
    pyplot,
    save_figure,
    title_name,
)
from layerprobe.results import MetricDrop, PruneDropResult, RunDir, variant_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_prune_drop(result: PruneDropResult, out_dir: Path) -> list[Path]:
    """Draw one `prune_drop_<task>.png` per task from its primary (first-reported) metric."""
    paths: list[Path] = []
    for task, path in zip(result.tasks, RunDir(out_dir).task_plots("prune_drop", result.tasks), strict=True):
        paths += save_figure(prune_drop_figure(result, task), path)
    return paths


def prune_drop_figure(result: PruneDropResult, task: str) -> Figure:
    """Build the ΔP figure of one task's primary metric (returned open, so tests can inspect it)."""
    metric_name = result.tasks[task].primary_metric
    metric = result.tasks[task].metrics[metric_name]
    fig, ax = pyplot().subplots(
        figsize=(float(np.clip(3.5 + 0.13 * len(metric.layers), 7.0, 14.0)), 4.8), layout="constrained"
    )
    _draw_delta_bars(ax, metric, metric_name)
    ax.set_xlabel(variant_label(result.settings))
    agreement = (result.tasks[task].agreement or {}).get(metric_name)
    if agreement and agreement.get("adjacent_distance"):
        _overlay_distance(ax, agreement)
    ax.set_title(f"{title_name(result.model)} · {task} · {metric_name}\nbaseline = {value_text(metric)}", fontsize=11)
    return fig


def _draw_delta_bars(ax: Axes, metric: MetricDrop, metric_name: str) -> None:
    """ΔP bars coloured by what the removal does to the model.

    With paired uncertainty (results that carry paired stderrs) the error bars are the paired 95 % intervals of
    ΔP, and a bar is red/blue only when its interval excludes 0, grey otherwise. Older files keep the
    pruned score's own stderr as error bars and the baseline's noise band around 0.
    """
    sign = 1.0 if metric.higher_is_better else -1.0
    if metric.paired:
        significant = metric.significant or [None] * len(metric.layers)
        colors = [_paired_color(sign * d, sig) for d, sig in zip(metric.delta, significant, strict=True)]
        draw_bars(ax, metric.layers, metric.delta, None, colors, 0.8, None, intervals=metric.delta_ci95)
        zero_line(ax, None)
        grey = "not significant (95 % CI spans 0)"
    else:
        noise = metric.baseline_stderr
        colors = [effect_color(sign * delta, noise) for delta in metric.delta]
        draw_bars(ax, metric.layers, metric.delta, metric.stderr, colors, 0.8, None)
        zero_line(ax, noise)
        grey = "within baseline ± stderr"
    for color, label in (
        (HARMFUL, "removal hurts"),
        (WITHIN_NOISE, grey),
        (HELPFUL, "removal helps"),
    ):
        if color in colors:
            ax.bar([np.nan], [np.nan], color=color, label=label)
    if MISSING in colors:
        ax.plot([], [], "x", color=MISSING, label="not scored (nan)")
    if metric.paired:
        ax.errorbar([], [], yerr=[], fmt="none", ecolor="black", elinewidth=0.8, label="paired 95 % CI of ΔP")
    ax.legend(fontsize=8, loc="best")
    layer_axis(ax, metric.layers)
    better = "higher" if metric.higher_is_better else "lower"
    ax.set_ylabel(f"ΔP = pruned − baseline\n({metric_name}, {better} is better)")


def _paired_color(gain: float, significant: bool | None) -> str:
    """Red/blue only for a change whose paired 95 % interval excludes 0; grey otherwise."""
    if not math.isfinite(gain):
        return MISSING
    if not significant:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def _overlay_distance(ax: Axes, agreement: dict) -> None:
    """The adjacent angular distance d(x^l, x^(l+1)) on a second y axis, with the rank agreement."""
    twin = ax.twinx()
    twin.plot(agreement["layers"], agreement["adjacent_distance"], "o-", color="#6c3483", markersize=3, linewidth=1)
    twin.set_ylabel(r"$d(x^l,\,x^{l+1})$", color="#6c3483")
    twin.tick_params(axis="y", colors="#6c3483")
    rho, ci = agreement.get("spearman"), agreement.get("spearman_ci95")
    if rho is not None:
        text = f"Spearman ρ(d, ΔP) = {rho:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")
        twin.text(0.01, 0.02, text, transform=twin.transAxes, fontsize=8, color="#6c3483")


def draw_bars(
    ax: Axes,
    xs: Sequence[float] | np.ndarray,
    deltas: Sequence[float],
    stderrs: Sequence[float | None] | None,
    color: str | Sequence[str],
    width: float,
    label: str | None,
    intervals: Sequence[Sequence[float] | None] | None = None,
) -> None:
    """Bars with error bars only where a stderr (or an interval) exists, and an × where the score is missing.

    `intervals`, when given, are (low, high) per bar and replace the symmetric ± stderr error bars;
    without either, no bar has an error bar.
    """
    x, y = np.asarray(xs, dtype=float), np.asarray(deltas, dtype=float)
    ax.bar(x, np.nan_to_num(y), width=width, color=color, label=label)
    if intervals is not None:
        low = np.array([np.nan if i is None else float(i[0]) for i in intervals], dtype=float)
        high = np.array([np.nan if i is None else float(i[1]) for i in intervals], dtype=float)
        errs = np.vstack([y - low, high - y]).clip(min=0)
        has = np.isfinite(errs).all(axis=0) & np.isfinite(y)
        yerr = errs[:, has]
    else:
        per_bar = [None] * len(y) if stderrs is None else stderrs
        errs = np.array([np.nan if s is None else float(s) for s in per_bar], dtype=float)
        has = np.isfinite(errs) & np.isfinite(y)
        yerr = errs[has]
    if has.any():
        ax.errorbar(x[has], y[has], yerr=yerr, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    if (~np.isfinite(y)).any():
        ax.plot(x[~np.isfinite(y)], np.zeros((~np.isfinite(y)).sum()), "x", color=MISSING)


def zero_line(ax: Axes, noise: float | None) -> None:
    """The y = 0 line, with the baseline's ± stderr band around it when `noise` is a positive number."""
    ax.axhline(0.0, color="black", linewidth=0.8)
    if noise is not None and math.isfinite(noise) and noise > 0:
        ax.axhspan(-noise, noise, color="#f9e79f", linewidth=0, zorder=0, label="± baseline stderr")


def value_text(metric: MetricDrop) -> str:
    """The full model's score for a title: `0.5123 ± 0.012` (no ± when its stderr is unknown)."""
    noise = "" if metric.baseline_stderr is None else f" ± {metric.baseline_stderr:.2g}"
    return f"{metric.baseline:.4g}{noise}"
