"""The gate's figures: baseline vs candidate heatmaps and ΔP bars, one file per compared kind.

Built from result objects with report.py's drawing helpers, so a compare plot looks like the plots of
the runs it compares; `plot_verdict` saves one per kind next to the candidate (or in `out_dir`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.core import ResultError
from layerprobe.plots import (
    DIFF_CMAP,
    DISTANCE_LABEL,
    _bars,
    _draw_heatmap,
    _effect_color,
    _layer_axis,
    _save,
    _short,
    _value_text,
    _zero_line,
    plt,
    span_matrix,
)
from layerprobe.results import AngularResult, MetricDrop, PruneDropResult, RunDir

if TYPE_CHECKING:
    from layerprobe.gate.verdict import Verdict


def plot_compare_angular(baseline: AngularResult, candidate: AngularResult, out_path: Path) -> Path:
    """Baseline heatmap, candidate heatmap, and candidate − baseline over the blocks both models have.

    A pruned candidate has fewer blocks than its baseline, so the difference is taken by block index over
    the first min(L) blocks; the panel title says so, because index k no longer names the same weights.
    """
    return _save(_compare_angular_figure(baseline, candidate), Path(out_path))[0]


def plot_compare_prune_drop(baseline: PruneDropResult, candidate: PruneDropResult, out_path: Path) -> Path:
    """Per common task, grouped ΔP bars of baseline and candidate, and their difference by layer index.

    Raises:
        ResultError: the two results share no task scored with the same primary metric.
    """
    return _save(_compare_prune_drop_figure(baseline, candidate), Path(out_path))[0]


def plot_verdict(verdict: Verdict, out_dir: str | Path | None = None) -> list[Path]:
    """Draw compare.png (compare_<kind>.png when several kinds) next to the candidate, or in `out_dir`."""
    paths = []
    for comp in verdict.comparisons:
        if comp.kind == "depth":  # its own figure (depth.png) already shows both curves' shape
            continue
        directory = RunDir(Path(out_dir) if out_dir is not None else comp.candidate.path.parent)
        figure = directory.plot("compare", comp.kind if len(verdict.comparisons) > 1 else None)
        draw = plot_compare_angular if comp.kind == "angular" else plot_compare_prune_drop
        paths.append(draw(comp.baseline_result, comp.candidate_result, figure))
    return paths


def _compare_angular_figure(baseline: AngularResult, candidate: AngularResult):
    common = min(baseline.num_layers, candidate.num_layers)
    largest = max(baseline.num_layers, candidate.num_layers)
    side = float(np.clip(2.5 + 0.07 * largest, 4.6, 6.0))
    fig, axes = plt.subplots(1, 3, figsize=(3 * side + 2.5, side + 0.6), layout="constrained")
    for ax, res, role in ((axes[0], baseline, "baseline"), (axes[1], candidate, "candidate")):
        image, _ = _draw_heatmap(ax, span_matrix(res.distance), annotate=largest <= 8)
        ax.set_title(f"{role}: {_short(res.model.id)}\nL = {res.num_layers}", fontsize=10)
    fig.colorbar(image, ax=axes[:2], label=DISTANCE_LABEL, shrink=0.8, aspect=30)
    diff = span_matrix(candidate.distance, common) - span_matrix(baseline.distance, common)
    finite = np.abs(diff.compressed())
    limit = max(float(finite.max()) if finite.size else 0.0, 1e-3)
    diff_image, _ = _draw_heatmap(
        axes[2], diff, cmap=DIFF_CMAP, limits=(-limit, limit), annotate=largest <= 8, mark_minima=False
    )
    axes[2].set_title(f"candidate − baseline\nblocks 0–{common - 1} matched by index (min L = {common})", fontsize=10)
    fig.colorbar(diff_image, ax=axes[2], label="Δ distance (candidate − baseline)", shrink=0.8, aspect=30)
    fig.suptitle("angular distance: baseline vs candidate (red = candidate changes more)", fontsize=11)
    return fig


def _compare_prune_drop_figure(baseline: PruneDropResult, candidate: PruneDropResult):
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
    fig, axes = plt.subplots(
        len(rows),
        2,
        figsize=(float(np.clip(5.0 + 0.2 * layers, 11.0, 18.0)), 4.0 * len(rows)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"width_ratios": [3, 2]},
    )
    for (task, metric_name, base, cand), (ax_bars, ax_diff) in zip(rows, axes, strict=True):
        for metric, offset, label, color in ((base, -0.2, "baseline", "#7f8c8d"), (cand, 0.2, "candidate", "#e67e22")):
            errors = metric.delta_stderr if metric.paired else metric.stderr  # paired ΔP stderr where recorded
            _bars(ax_bars, np.asarray(metric.layers) + offset, metric.delta, errors, color, 0.4, label)
        _zero_line(ax_bars, base.baseline_stderr)
        ax_bars.legend(fontsize=8, loc="best")
        ax_bars.set_title(
            f"{task} · {metric_name}: ΔP per removed layer\nbaseline model {_value_text(base)}"
            f" · candidate model {_value_text(cand)}",
            fontsize=9,
        )
        _layer_axis(ax_bars, sorted(set(base.layers) | set(cand.layers)))
        ax_bars.set_ylabel(f"ΔP ({metric_name})")
        shared = sorted(set(base.layers) & set(cand.layers))
        before = dict(zip(base.layers, base.delta, strict=True))
        after = dict(zip(cand.layers, cand.delta, strict=True))
        diff = [after[layer] - before[layer] for layer in shared]
        colors = [_effect_color(d if base.higher_is_better else -d) for d in diff]
        _bars(ax_diff, shared, diff, _combined_stderr(base, cand, shared), colors, 0.8, None)
        _zero_line(ax_diff, None)
        _layer_axis(ax_diff, shared)
        ax_diff.set_ylabel("ΔP(candidate) − ΔP(baseline)")
        ax_diff.set_title("difference, matched by layer index\n(blue = candidate better, red = worse)", fontsize=9)
    fig.suptitle(
        f"prune-drop: {_short(baseline.model.id)} (baseline) vs {_short(candidate.model.id)} (candidate)", fontsize=11
    )
    return fig


def _combined_stderr(base: MetricDrop, cand: MetricDrop, layers: list[int]) -> list[float | None]:
    """sqrt(se_base² + se_cand²) of the paired ΔP stderrs per shared layer (None where either lacks one)."""
    if not (base.paired and cand.paired):
        return [None] * len(layers)
    se_b = dict(zip(base.layers, base.delta_stderr, strict=True))
    se_c = dict(zip(cand.layers, cand.delta_stderr, strict=True))
    return [None if se_b[l] is None or se_c[l] is None else math.hypot(se_b[l], se_c[l]) for l in layers]
