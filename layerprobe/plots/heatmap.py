"""The angular-distance heatmap: the (span, start) view of the distance matrix, drawn as the papers draw it.

The heatmap follows the papers (Gromov et al. 2024; Mix-LN fig. 2): start layer l on the x axis, span
n on the y axis with n = 1 at the bottom, small distances yellow. Each span's minimum (the most
redundant run of n blocks) is marked, and so are the other starts not significantly above it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import pyplot, save_figure, tick_step, title_name
from layerprobe.results import AngularResult, RunDir

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

HEATMAP_CMAP = "viridis_r"  # The papers draw small distances (lazy spans) yellow.
DIFF_CMAP = "RdBu_r"  # A signed difference: red up, blue down, white at 0.
ANNOTATE_MAX_LAYERS = 12
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
    return save_figure(angular_figure(result), run.plot("angular"), run.plot("angular", suffix="pdf"))


# What the heatmap shows, said in its title (the cells: docs/methods.md, "The summary and the heatmap").
HEATMAP_TITLE = r"angular distance $d(x^l,\,x^{l+n})$ between the inputs of blocks l and l+n"


def _positions(result: AngularResult) -> str:
    """Which positions each cell averages, in words."""
    positions = result.data.get("positions")
    return {"all": "mean over all positions", "last": "last position of each window"}.get(
        str(positions), f"positions={positions}"
    )


def angular_figure(result: AngularResult) -> Figure:
    """Build the heatmap figure of one result (returned open, so tests can inspect it before it is saved)."""
    size = result.num_layers
    side = float(np.clip(3.0 + 0.1 * size, 6.5, 11.0))
    fig, ax = pyplot().subplots(figsize=(side + 1.4, side), layout="constrained")
    image, _ = draw_heatmap(
        ax, span_matrix(result.distance), annotate=size <= ANNOTATE_MAX_LAYERS, candidates=span_candidates(result)
    )
    fig.colorbar(image, ax=ax, label=DISTANCE_LABEL, shrink=0.85, aspect=30, pad=0.02)
    tokens = result.data.get("tokens")
    tokens = f"{tokens:,}" if isinstance(tokens, int) else tokens
    ax.set_title(f"{HEATMAP_TITLE}\n{title_name(result.model)} · {tokens} tokens · {_positions(result)}", fontsize=11)
    return fig


def draw_heatmap(
    ax: Axes,
    matrix: np.ma.MaskedArray,
    *,
    annotate: bool,
    cmap: str = HEATMAP_CMAP,
    limits: tuple[float, float] = (0.0, 1.0),
    mark_minima: bool = True,
    candidates: dict[int, list[int]] | None = None,
) -> tuple[AxesImage, dict[int, int]]:
    """Draw a (span, start) matrix on `ax`; return the image and the `{n: l}` row minima it marked.

    Non-finite cells inside the triangle get a grey layer of their own, so a failed measurement never
    looks like a small distance nor like a cell that does not exist. Minima are boxed while cells are
    big enough to hold a box and dotted beyond that, where a box would hide the cell's colour. The other
    `candidates` of a row (starts not significantly above its minimum) get a dashed box or a hollow dot:
    a row with none of them is a clear choice.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

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
                text = (f"{value:.2f}" if cmap == HEATMAP_CMAP else signed(value)) if math.isfinite(value) else "nan"
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
    step = tick_step(size)
    ax.set_xticks(range(0, size, step))
    ax.set_yticks(sorted({1, *range(step, size + 1, step)}))
    ax.set_xlim(extent[0], extent[1])
    ax.set_ylim(extent[2], extent[3])
    return image, minima


def signed(value: float, digits: int = 3) -> str:
    """A difference with its sign (`+0.012`, `-0.004`); one that rounds to zero is `0.000`, never `-0.000`."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text
