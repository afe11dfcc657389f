"""ΔP bars: what removing each layer does to a task's score, coloured by whether it hurts, helps or is noise.

With paired uncertainty the error bars are the paired 95 % intervals of ΔP and a bar is red or blue only
when its interval excludes 0; older files draw the pruned scores' own 95 % intervals (± 1.96 stderr) and
the baseline's 95 % band around 0. Every interval drawn is a 95 % interval, and the legend says so.
`draw_bars`, `zero_line` and `value_text` also draw the gate's baseline-vs-candidate bars, so a compare
plot looks like the plots of the runs it compares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.core import LayerprobeError
from layerprobe.plots.common import (
    HARMFUL,
    HELPFUL,
    MISSING,
    WITHIN_NOISE,
    effect_color,
    interval_text,
    layer_axis,
    metric_label,
    number_text,
    place_legend,
    pyplot,
    save_figure,
    title_name,
)
from layerprobe.results import (
    FlipRate,
    MetricDrop,
    PruneDropResult,
    RunDir,
    agreement_distances,
    agreement_span,
    variant_label,
)
from layerprobe.stats import PROPORTION_METRICS, Z95, score_interval95

# Every interval a figure draws is a 95 % interval; these are its labels.
BASELINE_BAND = "baseline 95 % CI (Wilson for an accuracy, else ± 1.96 stderr)"
OWN_INTERVAL = "95 % CI of the pruned score (± 1.96 stderr)"
PAIRED_INTERVAL = "paired 95 % CI of ΔP"

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def plot_prune_drop(result: PruneDropResult, out_dir: Path) -> list[Path]:
    """Draw `prune_drop_<task>.png` and `.pdf` per task from its primary (first-reported) metric."""
    paths: list[Path] = []
    for task, path in zip(result.tasks, RunDir(out_dir).task_plots("prune_drop", result.tasks), strict=True):
        paths += save_figure(prune_drop_figure(result, task), path, path.with_suffix(".pdf"))
    return paths


# Metrics shown under the primary metric's ΔP when a task reports them (`--task corpus`): how far each
# pruned model's next-token distribution is from the full model's, in two readings.
COMPANION_METRICS = {
    "kl": "KL(P_base ‖ P_pruned), nats",
    "top1_agreement": "top-1 agreement with\nthe full model",
}
COMPANION_TITLES = {
    "kl": "KL divergence of each pruned model from the full model",
    "top1_agreement": "top-1 agreement of each pruned model with the full model",
}


def prune_drop_figure(result: PruneDropResult, task: str | None = None) -> Figure:
    """Build the ΔP figure of one task's primary metric (returned open, so tests can inspect it).

    `task` defaults to the result's first (what a notebook's `result.plot()` draws). A task that also
    reports `COMPANION_METRICS` (the corpus task: KL and top-1 agreement beside NLL) gets one panel per
    companion under the ΔP bars, each pruned model's value with its paired 95 %
    interval.
    """
    task = next(iter(result.tasks)) if task is None else task
    if task not in result.tasks:
        raise LayerprobeError(f"No task {task!r} in this result.", hint=f"Its tasks: {', '.join(result.tasks)}.")
    metric_name = result.tasks[task].primary_metric
    metric = result.tasks[task].metrics[metric_name]
    companions = [name for name in COMPANION_METRICS if name in result.tasks[task].metrics and name != metric_name]
    flips = result.tasks[task].flip_rate  # a generating task: a panel with the share of answers that changed
    panels = 1 + len(companions) + (1 if flips else 0)
    width = float(np.clip(3.5 + 0.13 * len(metric.layers), 7.0, 14.0))
    fig, axes = pyplot().subplots(
        panels,
        1,
        figsize=(width, 4.8 + 2.6 * (panels - 1)),
        layout="constrained",
        squeeze=False,
        sharex=True,
        gridspec_kw={"height_ratios": [1.6] + [1.0] * (panels - 1)},
    )
    ax = axes[0][0]
    if flips:
        lower = axes[-1][0]
        _draw_flip_rates(lower, flips)
        lower.set_xlabel(variant_label(result.settings))
    _draw_delta_bars(ax, metric, metric_name, result.tasks[task].samples)
    ax.set_xlabel(variant_label(result.settings))
    agreement = (result.tasks[task].agreement or {}).get(metric_name)
    twins = []
    if agreement and agreement_distances(agreement):
        twins.append(_overlay_distance(ax, agreement, agreement_span(agreement, result.settings)))
    baseline = value_text(metric, metric_name, result.tasks[task].samples)
    ax.set_title(
        f"{title_name(result.model)} · {task} · {metric_label(metric_name)}\nbaseline = {baseline}", fontsize=11
    )
    for row, name in zip(axes[1 : 1 + len(companions)], companions, strict=True):
        _draw_companion(row[0], result.tasks[task].metrics[name], name)
        row[0].set_xlabel(variant_label(result.settings))
    if panels > 1:
        ax.tick_params(labelbottom=True)
    # Last, once every panel, label and title is in place: the legends go where they hide no data.
    place_legend(ax, *twins, fontsize=8)
    for row in axes[1 : 1 + len(companions)]:
        place_legend(row[0], fontsize=8)
    return fig


def _draw_companion(ax: Axes, metric: MetricDrop, name: str) -> None:
    """Each pruned model's value of a companion metric, with its paired 95 % interval (baseline + ΔP's)."""
    if metric.paired and metric.delta_ci95 is not None:
        intervals = [
            None if ci is None else (metric.baseline + ci[0], metric.baseline + ci[1]) for ci in metric.delta_ci95
        ]
        label = "paired 95 % CI"
    else:
        intervals = normal_intervals(metric.pruned, metric.stderr)
        label = "95 % CI (± 1.96 stderr)"
    if draw_bars(ax, metric.layers, metric.pruned, None, "#6c7a89", 0.8, None, intervals):
        ax.errorbar([], [], yerr=[], fmt="none", ecolor="black", elinewidth=0.8, label=label)
    ax.axhline(
        metric.baseline,
        color="black",
        linewidth=0.8,
        linestyle="--",
        label=f"full model ({number_text(metric.baseline)})",
    )
    layer_axis(ax, metric.layers)
    ax.set_ylabel(COMPANION_METRICS[name], fontsize=9)
    ax.set_title(COMPANION_TITLES[name], fontsize=10, loc="left")


def _draw_delta_bars(ax: Axes, metric: MetricDrop, metric_name: str, documents: int | None = None) -> None:
    """ΔP bars coloured by what the removal does to the model.

    With paired uncertainty the error bars are the paired 95 % intervals of ΔP (a sequential run's: the
    anytime-valid ones it stopped with), and a bar is red/blue only when its interval excludes 0, grey
    otherwise. Older files draw the pruned score's own 95 % interval (± 1.96 stderr) as error bars and the
    baseline's 95 % band around 0 (the interval the title gives it: `baseline_band`), grey within it.
    """
    sign = 1.0 if metric.higher_is_better else -1.0
    if metric.paired:
        significant = metric.significant or [None] * len(metric.layers)
        colors = [_paired_color(sign * d, sig) for d, sig in zip(metric.delta, significant, strict=True)]
        drawn = draw_bars(ax, metric.layers, metric.delta, None, colors, 0.8, None, intervals=metric.interval95)
        zero_line(ax, None)
        grey = (
            "not significant (95 % CI spans 0)" if metric.p_adjusted is None else "not significant (adjusted p ≥ 0.05)"
        )
        interval = PAIRED_INTERVAL
    else:
        band = baseline_band(metric, metric_name, documents)
        colors = [
            WITHIN_NOISE if band is not None and band[0] < delta < band[1] else effect_color(sign * delta)
            for delta in metric.delta
        ]
        intervals = normal_intervals(metric.delta, metric.stderr)
        drawn = draw_bars(ax, metric.layers, metric.delta, None, colors, 0.8, None, intervals)
        zero_line(ax, band)
        grey, interval = "within the baseline's 95 % CI", OWN_INTERVAL
    for color, label in (
        (HARMFUL, "removal hurts"),
        (WITHIN_NOISE, grey),
        (HELPFUL, "removal helps"),
    ):
        if color in colors:
            ax.bar([np.nan], [np.nan], color=color, label=label)
    if MISSING in colors:
        ax.plot([], [], "x", color=MISSING, label="not scored (nan)")
    if drawn:
        if metric.sequential:
            interval = "anytime-valid 95 % CI of ΔP (sequential)"
        ax.errorbar([], [], yerr=[], fmt="none", ecolor="black", elinewidth=0.8, label=interval)
    layer_axis(ax, metric.layers)
    better = "higher" if metric.higher_is_better else "lower"
    ax.set_ylabel(f"ΔP = pruned − baseline\n({metric_label(metric_name)}, {better} is better)")


FLIP_MARKERS = ("o", "s", "^", "D", "v")


def _draw_flip_rates(ax: Axes, flips: dict[str, FlipRate]) -> None:
    """Per filter, the share of documents whose answer differs from the full model's, with Wilson 95 % intervals."""
    offsets = np.linspace(-0.15, 0.15, len(flips)) if len(flips) > 1 else [0.0]
    for (name, rate), offset, marker in zip(flips.items(), offsets, FLIP_MARKERS * len(flips), strict=False):
        x = np.asarray(rate.layers, dtype=float) + offset
        low = [r - c[0] for r, c in zip(rate.rate, rate.ci95, strict=True)]
        high = [c[1] - r for r, c in zip(rate.rate, rate.ci95, strict=True)]
        ax.errorbar(x, rate.rate, yerr=[low, high], fmt=marker, markersize=4, capsize=2, linewidth=0.8, label=name)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("answers changed\n(share of documents)")
    # Above the panel, never on it: rates sit anywhere from 0 to 1, so no corner inside is sure to be free.
    ax.legend(
        fontsize=8,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=len(flips),
        title="filter (Wilson 95 %)",
        title_fontsize=8,
        frameon=False,
    )


def _paired_color(gain: float, significant: bool | None) -> str:
    """Red/blue only for a change whose paired 95 % interval excludes 0; grey otherwise."""
    if not math.isfinite(gain):
        return MISSING
    if not significant:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def _overlay_distance(ax: Axes, agreement: dict, span: int = 1) -> Axes:
    """The angular distance d(x^l, x^(l+n)) of each variant's span on a second y axis, with the rank agreement."""
    twin = ax.twinx()
    twin.plot(
        agreement["layers"],
        agreement_distances(agreement) or [],
        "o-",
        color="#6c3483",
        markersize=3,
        linewidth=1,
        label=rf"angular distance $d(x^l,\,x^{{l+{span}}})$ (right axis)",
    )
    twin.set_ylabel(rf"$d(x^l,\,x^{{l+{span}}})$", color="#6c3483")
    twin.tick_params(axis="y", colors="#6c3483")
    rho, ci = agreement.get("spearman"), agreement.get("spearman_ci95")
    if rho is not None:  # under the axis, not on the plot: no place inside is sure to be free of bars and line
        text = f"Spearman ρ(d, ΔP) = {rho:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")
        ax.set_xlabel(f"{ax.get_xlabel()}\n{text} (d: right axis, purple)")
    return twin


def draw_bars(
    ax: Axes,
    xs: Sequence[float] | np.ndarray,
    deltas: Sequence[float],
    stderrs: Sequence[float | None] | None,
    color: str | Sequence[str],
    width: float,
    label: str | None,
    intervals: Sequence[Sequence[float] | None] | None = None,
) -> bool:
    """Bars with error bars only where an interval (or a stderr) exists, and an × where the score is missing.

    `intervals` are (low, high) per bar: pass 95 % intervals (`normal_intervals` for ± 1.96 stderr), the
    one convention of every figure. `stderrs` draws symmetric ± stderr bars instead (kept for callers that
    label them). Without either, no bar has an error bar. Returns whether any error bar was drawn.
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
    return bool(has.any())


def zero_line(ax: Axes, band: tuple[float, float] | None) -> None:
    """The y = 0 line, with the baseline's 95 % band around it (`baseline_band`) when that has a width."""
    ax.axhline(0.0, color="black", linewidth=0.8)
    if band is not None and band[1] > band[0]:
        ax.axhspan(band[0], band[1], color="#f9e79f", linewidth=0, zorder=0, label=BASELINE_BAND)


def baseline_band(metric: MetricDrop, name: str, documents: int | None) -> tuple[float, float] | None:
    """The full model's 95 % interval moved to 0 (interval − baseline): the same interval as in the title.

    One quantity, one interval: `stats.score_interval95` (Wilson's for a share of correct answers, else
    ± 1.96 stderr) gives the title's interval, this band, track's table and the report alike.
    """
    bounds = score_interval95(name, metric.baseline, metric.baseline_stderr, documents)
    return None if bounds is None else (bounds[0] - metric.baseline, bounds[1] - metric.baseline)


def normal_intervals(
    values: Sequence[float], stderrs: Sequence[float | None] | None
) -> list[tuple[float, float] | None]:
    """Value ± 1.96 stderr per entry: the 95 % interval `draw_bars` draws (None where no stderr is finite)."""
    per_value = [None] * len(values) if stderrs is None else stderrs
    return [
        None if se is None or not math.isfinite(se) else (v - Z95 * se, v + Z95 * se)
        for v, se in zip(values, per_value, strict=True)
    ]


def _band(stderr: float | None) -> float | None:
    return None if stderr is None or not math.isfinite(stderr) else Z95 * stderr


def value_text(metric: MetricDrop, name: str | None = None, documents: int | None = None) -> str:
    """The full model's score for a title with its 95 % CI: `0.5123 ± 0.024 (95 % CI)` (no ± without a stderr).

    Every number in `number_text`'s one format (4 significant digits, trailing zeros kept).

    Given the metric's `name` and the `documents` scored, a share of correct answers gets Wilson's interval
    instead (`stats.score_interval95`): `0.2000 (95 % CI [0.07048, 0.4523])`, never below 0 or a zero width.
    """
    if name is not None and name.split(",")[0] in PROPORTION_METRICS:
        bounds = score_interval95(name, metric.baseline, metric.baseline_stderr, documents)
        if bounds is not None:
            return f"{number_text(metric.baseline)} (95 % CI {interval_text(*bounds)})"
    half = _band(metric.baseline_stderr)
    noise = "" if half is None else f" ± {number_text(half, 2)} (95 % CI)"
    return f"{number_text(metric.baseline)}{noise}"
