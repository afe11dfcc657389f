"""Plots drawn from result objects: angular-distance heatmaps, ΔP bars, and baseline-vs-candidate figures.

Everything here reads only result objects (never a model), so `layerprobe plot result.json` can redraw
any figure from its JSON. The angular heatmap follows the papers (Gromov et al. 2024; Mix-LN fig. 2):
start layer l on the x axis, span n on the y axis with n = 1 at the bottom, small distances yellow.
Files are written atomically and every figure is closed after saving, so long batch runs neither leave
half-written images behind nor accumulate figures in pyplot's registry.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # Headless CI and servers have no display; never depend on one.

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from layerprobe.core import check_output_dir  # noqa: E402
from layerprobe.plots.curve import plot_prune_curve
from layerprobe.results import (  # noqa: E402
    AngularResult,
    MetricDrop,
    ModelInfo,
    PruneCurveResult,
    PruneDropResult,
    RunDir,
    atomic_write,
    load_result,
    variant_label,  # noqa: E402
)

HEATMAP_CMAP = "viridis_r"  # The papers draw small distances (lazy spans) yellow.
DIFF_CMAP = "RdBu_r"
ANNOTATE_MAX_LAYERS = 12
HARMFUL, WITHIN_NOISE, HELPFUL, MISSING = "#c0392b", "#9e9e9e", "#2e86c1", "#555555"
CANDIDATE = "#ff7f0e"  # cells not significantly above their row's minimum
DISTANCE_LABEL = r"angular distance $d(x^l,\,x^{l+n})$"
SPAN_LABEL = "span n (blocks skipped; n = 1 at bottom)"


def span_matrix(distance: list[list[float]], num_layers: int | None = None) -> np.ma.MaskedArray:
    """Rearrange the (L+1)×(L+1) distance matrix into the papers' (span, start) view.

    Args:
        distance: `distance[i][j]` = d(x^i, x^j), as stored in `AngularResult.distance`.
        num_layers: use only blocks 0 … num_layers-1 (to compare models of different depth by index).

    Returns:
        `(L, L)` masked array, row n-1 and column l holding d(x^l, x^(l+n)). Cells with l + n > L (the
        blank triangle) and non-finite distances are masked; NaN is kept as data so callers can tell a
        failed measurement from a cell that does not exist.

    """
    full = np.asarray(distance, dtype=float)
    size = full.shape[0] - 1 if num_layers is None else num_layers
    if not 0 < size < full.shape[0]:
        raise ValueError(f"num_layers={size} does not fit a {full.shape[0]}×{full.shape[0]} distance matrix")
    values = np.full((size, size), np.nan)
    outside = np.ones((size, size), dtype=bool)
    for n in range(1, size + 1):
        starts = np.arange(size - n + 1)
        values[n - 1, starts] = full[starts, starts + n]
        outside[n - 1, starts] = False
    return np.ma.masked_array(values, mask=outside | ~np.isfinite(values))


def span_minima(matrix: np.ma.MaskedArray) -> dict[int, int]:
    """Find the start layer of the smallest distance in each span row, `{n: l}`; ties go to the lowest l."""
    minima = {}
    for row in range(matrix.shape[0]):
        if matrix[row].count():
            minima[row + 1] = int(np.ma.argmin(matrix[row]))
    return minima


def span_candidates(result: AngularResult) -> dict[int, list[int]]:
    """Per span n, the starts l whose distance is not significantly above the row minimum, `{n: [l, ...]}`.

    Read from the result's summary rule (`results.angular_summary`), so the plot and the printed summary
    always agree; empty for results without `distance_stderr` (files written before it existed).
    """
    if result.distance_stderr is None:
        return {}
    choices = result.summarize()["most_redundant"]
    return {int(n): list(choice["candidates"] or []) for n, choice in choices.items()}


def plot_angular(result: AngularResult, out_dir: Path) -> list[Path]:
    """Draw `angular.png` and `angular.pdf` (the PDF for papers, the PNG for reports and CI logs)."""
    run = RunDir(out_dir)
    return _save(_angular_figure(result), run.plot("angular"), run.plot("angular", suffix="pdf"))


def plot_prune_drop(result: PruneDropResult, out_dir: Path) -> list[Path]:
    """Draw one `prune_drop_<task>.png` per task from its primary (first-reported) metric."""
    paths = []
    for task, path in zip(result.tasks, RunDir(out_dir).task_plots("prune_drop", result.tasks), strict=True):
        paths += _save(_prune_drop_figure(result, task), path)
    return paths


def plot_result(json_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Redraw every plot of a result JSON (backs `layerprobe plot`); defaults to the JSON's directory."""
    json_path = Path(json_path)
    result = load_result(json_path)
    out_dir = json_path.parent if out_dir is None else check_output_dir(out_dir)
    if isinstance(result, AngularResult):
        return plot_angular(result, out_dir)

    if isinstance(result, PruneCurveResult):
        return plot_prune_curve(result, out_dir)
    return plot_prune_drop(result, out_dir)


# --- figures (built here, saved by the public functions; tests inspect them before saving) ----------


def _angular_figure(result: AngularResult):
    size = result.num_layers
    side = float(np.clip(3.0 + 0.1 * size, 6.5, 11.0))
    fig, ax = plt.subplots(figsize=(side + 1.4, side), layout="constrained")
    image, _ = _draw_heatmap(
        ax, span_matrix(result.distance), annotate=size <= ANNOTATE_MAX_LAYERS, candidates=span_candidates(result)
    )
    fig.colorbar(image, ax=ax, label=DISTANCE_LABEL, shrink=0.85, aspect=30, pad=0.02)
    tokens = result.data.get("tokens")
    tokens = f"{tokens:,}" if isinstance(tokens, int) else tokens
    ax.set_title(
        f"{_title_name(result.model)} · {tokens} tokens · positions={result.data.get('positions')}", fontsize=11
    )
    return fig


def _prune_drop_figure(result: PruneDropResult, task: str):
    metric_name = result.tasks[task].primary_metric
    metric = result.tasks[task].metrics[metric_name]
    fig, ax = plt.subplots(
        figsize=(float(np.clip(3.5 + 0.13 * len(metric.layers), 7.0, 14.0)), 4.8), layout="constrained"
    )
    _draw_delta_bars(ax, metric, metric_name)
    ax.set_xlabel(variant_label(result.settings))
    agreement = (result.tasks[task].agreement or {}).get(metric_name)
    if agreement and agreement.get("adjacent_distance"):
        _overlay_distance(ax, agreement)
    ax.set_title(f"{_title_name(result.model)} · {task} · {metric_name}\nbaseline = {_value_text(metric)}", fontsize=11)
    return fig


# --- drawing helpers ---------------------------------------------------------------------------------


def _draw_heatmap(
    ax,
    matrix: np.ma.MaskedArray,
    *,
    annotate: bool,
    cmap: str = HEATMAP_CMAP,
    limits: tuple[float, float] = (0.0, 1.0),
    mark_minima: bool = True,
    candidates: dict[int, list[int]] | None = None,
):
    """Draw a (span, start) matrix on `ax`; return the image and the `{n: l}` row minima it marked.

    Non-finite cells inside the triangle get a grey layer of their own, so a failed measurement never
    looks like a small distance nor like a cell that does not exist. Minima are boxed while cells are
    big enough to hold a box and dotted beyond that, where a box would hide the cell's colour. The other
    `candidates` of a row (starts not significantly above its minimum) get a dashed box or a hollow dot:
    a row with none of them is a clear choice.
    """
    size = matrix.shape[0]
    inside = np.add.outer(np.arange(size), np.arange(size)) < size  # Row n-1, column l: l + n <= L.
    extent = (-0.5, size - 0.5, 0.5, size + 0.5)  # Cell (n, l) centred on integer coordinates.
    image = ax.imshow(
        matrix,
        cmap=cmap,
        vmin=limits[0],
        vmax=limits[1],
        origin="lower",
        extent=extent,
        aspect="auto",
        interpolation="nearest",
    )
    missing = inside & np.ma.getmaskarray(matrix)
    if missing.any():
        ax.imshow(
            np.ma.masked_array(np.ones((size, size)), mask=~missing),
            cmap=ListedColormap(["#cfcfcf"]),
            origin="lower",
            extent=extent,
            aspect="auto",
            interpolation="nearest",
        )
        ax.scatter([], [], marker="s", color="#cfcfcf", label="non-finite")
    minima = span_minima(matrix) if mark_minima else {}
    if minima and size <= 24:
        for n, start in minima.items():
            ax.add_patch(
                Rectangle(
                    (start - 0.5, n - 0.5),
                    1,
                    1,
                    fill=False,
                    edgecolor="red",
                    linewidth=1.6,
                    gid="row-minimum",
                    zorder=3,
                )
            )
        ax.scatter([], [], marker="s", facecolors="none", edgecolors="red", label="row minimum")
    elif minima:
        ax.scatter(
            list(minima.values()),
            list(minima.keys()),
            s=max(3.0, 500.0 / size),
            color="red",
            linewidths=0,
            gid="row-minimum",
            zorder=3,
            label="row minimum",
        )
    others = [(n, l) for n, starts in (candidates or {}).items() for l in starts if minima.get(n) != l]
    if others and size <= 24:
        for n, start in others:
            ax.add_patch(
                Rectangle(
                    (start - 0.5 + 0.08, n - 0.5 + 0.08),
                    0.84,
                    0.84,
                    fill=False,
                    edgecolor=CANDIDATE,
                    linestyle="--",
                    linewidth=1.3,
                    gid="row-candidate",
                    zorder=3,
                )
            )
    elif others:
        ax.scatter(
            [l for _, l in others],
            [n for n, _ in others],
            s=max(3.0, 500.0 / size),
            facecolors="none",
            edgecolors=CANDIDATE,
            linewidths=0.6,
            gid="row-candidate",
            zorder=3,
        )
    if others:
        marker = "s" if size <= 24 else "o"
        ax.scatter([], [], marker=marker, facecolors="none", edgecolors=CANDIDATE, label="not significantly above it")
    if annotate:
        for (row, col), value in np.ndenumerate(matrix.filled(np.nan)):
            if inside[row, col]:
                light = not math.isfinite(value) or (
                    value < 0.45 if cmap == HEATMAP_CMAP else abs(value) < 0.6 * limits[1]
                )
                text = (f"{value:.2f}" if cmap == HEATMAP_CMAP else f"{value:+.3f}") if math.isfinite(value) else "nan"
                ax.text(
                    col,
                    row + 1,
                    text,
                    ha="center",
                    va="center",
                    fontsize=8 if size <= 8 else 6.5,
                    color="black" if light else "white",
                )
    if minima or missing.any() or others:
        ax.legend(loc="upper right", fontsize=8, frameon=False)  # The empty triangle has room for it.
    ax.set_xlabel("start layer l (input of block l)")
    ax.set_ylabel(SPAN_LABEL)
    step = _tick_step(size)
    ax.set_xticks(range(0, size, step))
    ax.set_yticks(sorted({1, *range(step, size + 1, step)}))
    ax.set_xlim(extent[0], extent[1])
    ax.set_ylim(extent[2], extent[3])
    return image, minima


def _draw_delta_bars(ax, metric: MetricDrop, metric_name: str) -> None:
    """ΔP bars coloured by what the removal does to the model.

    With paired uncertainty (results since issue #10) the error bars are the paired 95 % intervals of
    ΔP, and a bar is red/blue only when its interval excludes 0, grey otherwise. Older files keep the
    pruned score's own stderr as error bars and the baseline's noise band around 0.
    """
    sign = 1.0 if metric.higher_is_better else -1.0
    if metric.paired:
        significant = metric.significant or [None] * len(metric.layers)
        colors = [_paired_color(sign * d, sig) for d, sig in zip(metric.delta, significant, strict=True)]
        _bars(ax, metric.layers, metric.delta, None, colors, 0.8, None, intervals=metric.delta_ci95)
        _zero_line(ax, None)
        grey = "not significant (95 % CI spans 0)"
    else:
        noise = metric.baseline_stderr
        colors = [_effect_color(sign * delta, noise) for delta in metric.delta]
        _bars(ax, metric.layers, metric.delta, metric.stderr, colors, 0.8, None)
        _zero_line(ax, noise)
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
    _layer_axis(ax, metric.layers)
    better = "higher" if metric.higher_is_better else "lower"
    ax.set_ylabel(f"ΔP = pruned − baseline\n({metric_name}, {better} is better)")


def _paired_color(gain: float, significant: bool | None) -> str:
    """Red/blue only for a change whose paired 95 % interval excludes 0; grey otherwise."""
    if not math.isfinite(gain):
        return MISSING
    if not significant:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def _overlay_distance(ax, agreement: dict) -> None:
    """The adjacent angular distance d(x^l, x^(l+1)) on a second y axis, with the rank agreement."""
    twin = ax.twinx()
    twin.plot(agreement["layers"], agreement["adjacent_distance"], "o-", color="#6c3483", markersize=3, linewidth=1)
    twin.set_ylabel(r"$d(x^l,\,x^{l+1})$", color="#6c3483")
    twin.tick_params(axis="y", colors="#6c3483")
    rho, ci = agreement.get("spearman"), agreement.get("spearman_ci95")
    if rho is not None:
        text = f"Spearman ρ(d, ΔP) = {rho:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")
        twin.text(0.01, 0.02, text, transform=twin.transAxes, fontsize=8, color="#6c3483")


def _effect_color(gain: float, noise: float | None = None) -> str:
    """Colour a change by its effect on the model; `gain` is signed so that positive is better."""
    if not math.isfinite(gain):
        return MISSING
    if noise is not None and abs(gain) < noise:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def _bars(ax, xs, deltas, stderrs, color, width: float, label: str | None, intervals=None) -> None:
    """Bars with error bars only where a stderr (or an interval) exists, and an × where the score is missing.

    `intervals`, when given, are (low, high) per bar and replace the symmetric ± stderr error bars.
    """
    xs, deltas = np.asarray(xs, dtype=float), np.asarray(deltas, dtype=float)
    ax.bar(xs, np.nan_to_num(deltas), width=width, color=color, label=label)
    if intervals is not None:
        low = np.array([np.nan if i is None else float(i[0]) for i in intervals], dtype=float)
        high = np.array([np.nan if i is None else float(i[1]) for i in intervals], dtype=float)
        errs = np.vstack([deltas - low, high - deltas]).clip(min=0)
        has = np.isfinite(errs).all(axis=0) & np.isfinite(deltas)
        yerr = errs[:, has]
    else:
        errs = np.array([np.nan if s is None else float(s) for s in stderrs], dtype=float)
        has = np.isfinite(errs) & np.isfinite(deltas)
        yerr = errs[has]
    if has.any():
        ax.errorbar(xs[has], deltas[has], yerr=yerr, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    if (~np.isfinite(deltas)).any():
        ax.plot(xs[~np.isfinite(deltas)], np.zeros((~np.isfinite(deltas)).sum()), "x", color=MISSING)


def _zero_line(ax, noise: float | None) -> None:
    ax.axhline(0.0, color="black", linewidth=0.8)
    if noise is not None and math.isfinite(noise) and noise > 0:
        ax.axhspan(-noise, noise, color="#f9e79f", linewidth=0, zorder=0, label="± baseline stderr")


def _layer_axis(ax, layers) -> None:
    layers = sorted(layers)
    step = _tick_step(len(layers))
    ax.set_xticks(layers[::step] if step > 1 else layers)
    ax.set_xlabel("removed layer (block index)")
    ax.grid(axis="y", alpha=0.3)


def _tick_step(count: int) -> int:
    """Label every cell up to 16, then thin out so labels never overlap (every 5th at L = 80)."""
    return 1 if count <= 16 else 2 if count <= 32 else 5 if count <= 80 else 10


def _value_text(metric: MetricDrop) -> str:
    noise = "" if metric.baseline_stderr is None else f" ± {metric.baseline_stderr:.2g}"
    return f"{metric.baseline:.4g}{noise}"


def _save(fig, *paths: Path) -> list[Path]:
    """Save a figure to each path atomically (`results.atomic_write`), then close it, also on failure."""
    try:
        for path in paths:
            atomic_write(path, lambda tmp, path=path: fig.savefig(tmp, format=path.suffix.lstrip(".").lower(), dpi=150))
    finally:
        plt.close(fig)
    return list(paths)


def _title_name(model: ModelInfo) -> str:
    """The model's short name, marked when its weights were quantized (a quantized ΔP is not the model's)."""
    return _short(model.id) + (f" ({model.quantization})" if model.quantization else "")


def _short(model_id: str) -> str:
    """A title-sized model name: hub ids stay whole, local paths keep their last two parts."""
    parts = Path(model_id).parts
    return model_id if not model_id.startswith(("/", ".", "~")) or len(parts) <= 2 else "…/" + "/".join(parts[-2:])
