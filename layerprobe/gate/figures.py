"""The gate's figures: baseline vs candidate heatmaps and ΔP bars, one file per compared kind.

Built from result objects with the plots room's drawing helpers, so a compare plot looks like the plots
of the runs it compares; `plot_verdict` saves one per kind next to the candidate (or in `out_dir`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.core import ResultError
from layerprobe.gate.verdict import Verdict
from layerprobe.plots import (
    DIFF_CMAP,
    DISTANCE_LABEL,
    PAIRED_INTERVAL,
    baseline_band,
    draw_bars,
    draw_heatmap,
    effect_color,
    layer_axis,
    metric_label,
    normal_intervals,
    place_legend,
    pyplot,
    save_figure,
    short_name,
    span_matrix,
    value_text,
    zero_line,
)
from layerprobe.results import AngularResult, MetricDrop, PruneDropResult, RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_compare_angular(baseline: AngularResult, candidate: AngularResult, out_path: Path) -> list[Path]:
    """Baseline heatmap, candidate heatmap, and candidate − baseline over the blocks both models have.

    A pruned candidate has fewer blocks than its baseline, so the difference is taken by block index over
    the first min(L) blocks; the panel title says so, because index k no longer names the same weights.
    Written as `out_path` (PNG) and the same name with `.pdf`.
    """
    return save_figure(compare_angular_figure(baseline, candidate), *_png_and_pdf(out_path))


def plot_compare_prune_drop(baseline: PruneDropResult, candidate: PruneDropResult, out_path: Path) -> list[Path]:
    """Per common task, grouped ΔP bars of baseline and candidate, and their difference by layer index.

    Every error bar and band is a 95 % interval, labelled in the legends. Written as `out_path` (PNG)
    and the same name with `.pdf`.

    Raises:
        ResultError: the two results share no task scored with the same primary metric.
    """
    return save_figure(compare_prune_drop_figure(baseline, candidate), *_png_and_pdf(out_path))


def _png_and_pdf(out_path: Path) -> tuple[Path, Path]:
    path = Path(out_path)
    return path, path.with_suffix(".pdf")


def plot_verdict(verdict: Verdict, out_dir: str | Path | None = None) -> list[Path]:
    """Draw compare.png and .pdf (compare_<kind>.* when several kinds) next to the candidate, or in `out_dir`."""
    paths = []
    for comp in verdict.comparisons:
        if comp.kind in ("depth", "heal"):  # their own figures (depth.png, heal.png) already show each run
            continue
        directory = RunDir(Path(out_dir) if out_dir is not None else comp.candidate.path.parent)
        figure = directory.plot("compare", comp.kind if len(verdict.comparisons) > 1 else None)
        baseline, candidate = comp.baseline_result, comp.candidate_result
        if isinstance(baseline, AngularResult) and isinstance(candidate, AngularResult):
            paths += plot_compare_angular(baseline, candidate, figure)
        elif isinstance(baseline, PruneDropResult) and isinstance(candidate, PruneDropResult):
            paths += plot_compare_prune_drop(baseline, candidate, figure)
    return paths


def compare_angular_figure(baseline: AngularResult, candidate: AngularResult) -> Figure:
    """Build the three-heatmap figure of `plot_compare_angular` (returned open, so tests can inspect it)."""
    common = min(baseline.num_layers, candidate.num_layers)
    largest = max(baseline.num_layers, candidate.num_layers)
    side = float(np.clip(2.5 + 0.07 * largest, 4.6, 6.0))
    fig, axes = pyplot().subplots(1, 3, figsize=(3 * side + 2.5, side + 0.6), layout="constrained")
    for ax, res, role in ((axes[0], baseline, "baseline"), (axes[1], candidate, "candidate")):
        image, _ = draw_heatmap(ax, span_matrix(res.distance), annotate=largest <= 8)
        ax.set_title(f"{role}: {short_name(res.model.id)}\nL = {res.num_layers}", fontsize=10)
    fig.colorbar(image, ax=axes[:2], label=DISTANCE_LABEL, shrink=0.8, aspect=30)
    diff = span_matrix(candidate.distance, common) - span_matrix(baseline.distance, common)
    finite = np.abs(diff.compressed())
    limit = max(float(finite.max()) if finite.size else 0.0, 1e-3)
    diff_image, _ = draw_heatmap(
        axes[2], diff, cmap=DIFF_CMAP, limits=(-limit, limit), annotate=largest <= 8, mark_minima=False
    )
    axes[2].set_title(f"candidate − baseline\nblocks 0–{common - 1} matched by index (min L = {common})", fontsize=10)
    fig.colorbar(diff_image, ax=axes[2], label="Δ distance (candidate − baseline)", shrink=0.8, aspect=30)
    fig.suptitle("angular distance: baseline vs candidate (red = candidate changes more)", fontsize=11)
    return fig


def compare_prune_drop_figure(baseline: PruneDropResult, candidate: PruneDropResult) -> Figure:
    """Build the bars figure of `plot_compare_prune_drop` (returned open, so tests can inspect it)."""
    rows = []
    for task, drop in baseline.tasks.items():
        metric_name = drop.primary_metric
        if task in candidate.tasks and metric_name in candidate.tasks[task].metrics:
            other = candidate.tasks[task].metrics[metric_name]
            rows.append((task, metric_name, drop.metrics[metric_name], other))
    if not rows:
        raise ResultError(
            "The baseline and candidate results share no task with the same primary metric.",
            hint="Run prune-drop on both models with the same --tasks.",
        )
    layers = max(len(set(b.layers) | set(c.layers)) for _, _, b, c in rows)
    fig, axes = pyplot().subplots(
        len(rows),
        2,
        figsize=(float(np.clip(5.0 + 0.2 * layers, 11.0, 18.0)), 4.0 * len(rows)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"width_ratios": [3, 2]},
    )
    for (task, metric_name, base, cand), (ax_bars, ax_diff) in zip(rows, axes, strict=True):
        drawn = []
        for metric, offset, label, color in ((base, -0.2, "baseline", "#7f8c8d"), (cand, 0.2, "candidate", "#e67e22")):
            drawn.append(
                draw_bars(
                    ax_bars,
                    np.asarray(metric.layers) + offset,
                    metric.delta,
                    None,
                    color,
                    0.4,
                    label,
                    _intervals(metric),
                )
            )
        zero_line(ax_bars, baseline_band(base, metric_name, baseline.tasks[task].samples))  # as in the title
        if any(drawn):
            paired = base.paired and cand.paired
            interval = PAIRED_INTERVAL if paired else "95 % CI of ΔP (paired where recorded, else ± 1.96 stderr)"
            ax_bars.errorbar([], [], yerr=[], fmt="none", ecolor="black", elinewidth=0.8, label=interval)
        ax_bars.set_title(
            f"{task} · {metric_label(metric_name)}: ΔP per removed layer\n"
            f"baseline model {value_text(base, metric_name, baseline.tasks[task].samples)}"
            f" · candidate model {value_text(cand, metric_name, candidate.tasks[task].samples)}",
            fontsize=9,
        )
        layer_axis(ax_bars, sorted(set(base.layers) | set(cand.layers)))
        ax_bars.set_ylabel(f"ΔP ({metric_label(metric_name)})")
        shared = sorted(set(base.layers) & set(cand.layers))
        before = dict(zip(base.layers, base.delta, strict=True))
        after = dict(zip(cand.layers, cand.delta, strict=True))
        diff = [after[layer] - before[layer] for layer in shared]
        colors = [effect_color(d if base.higher_is_better else -d) for d in diff]
        if draw_bars(
            ax_diff, shared, diff, None, colors, 0.8, None, normal_intervals(diff, _combined_stderr(base, cand, shared))
        ):
            ax_diff.errorbar(
                [],
                [],
                yerr=[],
                fmt="none",
                ecolor="black",
                elinewidth=0.8,
                label="95 % CI: ± 1.96 √(se_base² + se_cand²)",
            )
        zero_line(ax_diff, None)
        layer_axis(ax_diff, shared)
        ax_diff.set_ylabel("ΔP(candidate) − ΔP(baseline)")
        ax_diff.set_title("difference, matched by layer index\n(blue = candidate better, red = worse)", fontsize=9)
    fig.suptitle(
        f"prune-drop: {short_name(baseline.model.id)} (baseline) vs {short_name(candidate.model.id)} (candidate)",
        fontsize=11,
    )
    # Last, once titles and labels have set the layout: each legend where it hides no bar, cap or end.
    for ax_bars, ax_diff in axes:
        place_legend(ax_bars, fontsize=8)
        if ax_diff.get_legend_handles_labels()[0]:
            place_legend(ax_diff, fontsize=8)
    return fig


def _intervals(metric: MetricDrop) -> list[tuple[float, float] | None] | list[list[float] | None]:
    """The 95 % interval of each ΔP: the paired one where recorded, else ± 1.96 × the pruned score's stderr."""
    if metric.paired and metric.delta_ci95 is not None:
        return metric.delta_ci95
    return normal_intervals(metric.delta, metric.stderr)


def _combined_stderr(base: MetricDrop, cand: MetricDrop, layers: list[int]) -> list[float | None]:
    """sqrt(se_base² + se_cand²) of the paired ΔP stderrs per shared layer (None where either lacks one)."""
    if base.delta_stderr is None or cand.delta_stderr is None:  # not both paired
        return [None] * len(layers)
    se_b = dict(zip(base.layers, base.delta_stderr, strict=True))
    se_c = dict(zip(cand.layers, cand.delta_stderr, strict=True))
    return [_hypot(se_b[l], se_c[l]) for l in layers]


def _hypot(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else math.hypot(a, b)
