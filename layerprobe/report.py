"""Plots drawn from result objects: angular-distance heatmaps, ΔP bars, and baseline-vs-candidate figures.

Everything here reads only result objects (never a model), so `layerprobe plot result.json` can redraw
any figure from its JSON. The angular heatmap follows the papers (Gromov et al. 2024; Mix-LN fig. 2):
start layer l on the x axis, span n on the y axis with n = 1 at the bottom, small distances yellow.
Files are written atomically and every figure is closed after saving, so long batch runs neither leave
half-written images behind nor accumulate figures in pyplot's registry.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # Headless CI and servers have no display; never depend on one.

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from layerprobe.errors import ResultError  # noqa: E402
from layerprobe.results import AngularResult, MetricDrop, ModelInfo, PruneDropResult, load_result  # noqa: E402

HEATMAP_CMAP = "viridis_r"  # The papers draw small distances (lazy spans) yellow.
DIFF_CMAP = "RdBu_r"
ANNOTATE_MAX_LAYERS = 12
HARMFUL, WITHIN_NOISE, HELPFUL, MISSING = "#c0392b", "#9e9e9e", "#2e86c1", "#555555"
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


def plot_angular(result: AngularResult, out_dir: Path) -> list[Path]:
    """Draw `angular.png` and `angular.pdf` (the PDF for papers, the PNG for reports and CI logs)."""
    return _save(_angular_figure(result), Path(out_dir) / "angular.png", Path(out_dir) / "angular.pdf")


def plot_prune_drop(result: PruneDropResult, out_dir: Path) -> list[Path]:
    """Draw one `prune_drop_<task>.png` per task from its primary (first-reported) metric."""
    paths, used = [], set()
    for task in result.tasks:
        name = _unique(f"prune_drop_{safe_name(task)}.png", used)
        paths += _save(_prune_drop_figure(result, task), Path(out_dir) / name)
    return paths


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


def plot_result(json_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Redraw every plot of a result JSON (backs `layerprobe plot`); defaults to the JSON's directory."""
    json_path = Path(json_path)
    result = load_result(json_path)
    out_dir = json_path.parent if out_dir is None else Path(out_dir)
    if isinstance(result, AngularResult):
        return plot_angular(result, out_dir)
    return plot_prune_drop(result, out_dir)


def safe_name(name: str) -> str:
    """Make a task name safe for a file name: `mmlu/abstract algebra` → `mmlu_abstract_algebra`."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "task"


# --- figures (built here, saved by the public functions; tests inspect them before saving) ----------


def _angular_figure(result: AngularResult):
    size = result.num_layers
    side = float(np.clip(3.0 + 0.1 * size, 6.5, 11.0))
    fig, ax = plt.subplots(figsize=(side + 1.4, side), layout="constrained")
    image, _ = _draw_heatmap(ax, span_matrix(result.distance), annotate=size <= ANNOTATE_MAX_LAYERS)
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
    ax.set_title(f"{_title_name(result.model)} · {task} · {metric_name}\nbaseline = {_value_text(metric)}", fontsize=11)
    return fig


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
            _bars(ax_bars, np.asarray(metric.layers) + offset, metric.delta, metric.stderr, color, 0.4, label)
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
        _bars(ax_diff, shared, diff, [None] * len(shared), colors, 0.8, None)
        _zero_line(ax_diff, None)
        _layer_axis(ax_diff, shared)
        ax_diff.set_ylabel("ΔP(candidate) − ΔP(baseline)")
        ax_diff.set_title("difference, matched by layer index\n(blue = candidate better, red = worse)", fontsize=9)
    fig.suptitle(
        f"prune-drop: {_short(baseline.model.id)} (baseline) vs {_short(candidate.model.id)} (candidate)", fontsize=11
    )
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
):
    """Draw a (span, start) matrix on `ax`; return the image and the `{n: l}` row minima it marked.

    Non-finite cells inside the triangle get a grey layer of their own, so a failed measurement never
    looks like a small distance nor like a cell that does not exist. Minima are boxed while cells are
    big enough to hold a box and dotted beyond that, where a box would hide the cell's colour.
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
    if minima or missing.any():
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
    """ΔP bars coloured by what the removal does to the model, with the baseline's noise band around 0."""
    noise, sign = metric.baseline_stderr, 1.0 if metric.higher_is_better else -1.0
    colors = [_effect_color(sign * delta, noise) for delta in metric.delta]
    _bars(ax, metric.layers, metric.delta, metric.stderr, colors, 0.8, None)
    _zero_line(ax, noise)
    for color, label in (
        (HARMFUL, "removal hurts"),
        (WITHIN_NOISE, "within baseline ± stderr"),
        (HELPFUL, "removal helps"),
    ):
        if color in colors:
            ax.bar([np.nan], [np.nan], color=color, label=label)
    if MISSING in colors:
        ax.plot([], [], "x", color=MISSING, label="not scored (nan)")
    ax.legend(fontsize=8, loc="best")
    _layer_axis(ax, metric.layers)
    better = "higher" if metric.higher_is_better else "lower"
    ax.set_ylabel(f"ΔP = pruned − baseline\n({metric_name}, {better} is better)")


def _effect_color(gain: float, noise: float | None = None) -> str:
    """Colour a change by its effect on the model; `gain` is signed so that positive is better."""
    if not math.isfinite(gain):
        return MISSING
    if noise is not None and abs(gain) < noise:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def _bars(ax, xs, deltas, stderrs, color, width: float, label: str | None) -> None:
    """Bars with error bars only where a stderr exists, and an × where the score is missing."""
    xs, deltas = np.asarray(xs, dtype=float), np.asarray(deltas, dtype=float)
    ax.bar(xs, np.nan_to_num(deltas), width=width, color=color, label=label)
    errs = np.array([np.nan if s is None else float(s) for s in stderrs], dtype=float)
    has = np.isfinite(errs) & np.isfinite(deltas)
    if has.any():
        ax.errorbar(xs[has], deltas[has], yerr=errs[has], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
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


def _unique(name: str, used: set[str]) -> str:
    """Give a repeated file name a number: two tasks may sanitise to one ('a/b', 'a_b')."""
    stem, suffix = os.path.splitext(name)
    candidate, k = name, 1
    while candidate in used:
        k += 1
        candidate = f"{stem}-{k}{suffix}"
    used.add(candidate)
    return candidate


def _save(fig, *paths: Path) -> list[Path]:
    """Save a figure to each path atomically, then close it, also when saving fails.

    Each file is written under a temporary name in its own directory and renamed over the target, so a
    reader never sees half an image. The temporary file is created by `savefig` itself (not `mkstemp`,
    which would make it private to its owner), so plots get the same permissions as any file the user
    writes, and CI artifact uploaders or web servers running as another user can read them.
    """
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            try:
                fig.savefig(tmp, format=path.suffix.lstrip(".").lower(), dpi=150)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
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
