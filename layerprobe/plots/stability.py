"""stability.png / .pdf: how much the block ranking depends on the data, from a StabilityResult alone.

Left, the inputs × inputs matrix of rank agreement: Kendall's τ-b above the diagonal, Spearman's ρ below,
each cell with its 95 % interval as text. Right, the Jaccard overlap of the k most prunable blocks for
every pair against k, with its 95 % band, and the overlap two unrelated rankings would have (chance);
pairs are drawn side by side around each k with their own marker and dashes, so equal curves stay visible.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import place_legend, pyplot, save_figure, tick_step, title_name
from layerprobe.results import RunDir, StabilityPair, StabilityResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ANNOTATE_MAX_INPUTS = 8  # interval text fits in a cell up to this many inputs
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # pairs that agree exactly stay visible under each other
DASHES = ("-", "--", ":", "-.")  # and so does each line between the markers
DODGE = 0.12  # k units between neighbouring pairs' points: equal curves side by side, never on top


def plot_stability(result: StabilityResult, out_dir: Path) -> list[Path]:
    """Draw `stability.png` and `stability.pdf` into `out_dir`."""
    run = RunDir(out_dir)
    return save_figure(stability_figure(result), run.plot("stability"), run.plot("stability", suffix="pdf"))


def stability_figure(result: StabilityResult) -> Figure:
    """Build the figure (returned open, so tests can inspect it before it is saved)."""
    count = len(result.inputs)
    side = float(np.clip(2.5 + 1.1 * count, 4.5, 10.0))
    fig, (matrix_ax, curve_ax) = pyplot().subplots(
        1, 2, figsize=(2 * side + 1.5, side), layout="constrained", gridspec_kw={"width_ratios": [1.1, 1]}
    )
    image = _draw_matrix(matrix_ax, result)
    fig.colorbar(image, ax=matrix_ax, label="rank correlation", shrink=0.85, aspect=30, pad=0.02)
    _draw_curves(curve_ax, result)
    fig.suptitle(
        f"{title_name(result.model)} · ranking stability over {count} inputs, {len(result.blocks)} blocks · "
        f"95 % bootstrap intervals",
        fontsize=11,
    )
    place_legend(curve_ax, fontsize=8)  # last, with the layout settled: where it hides no point of a curve
    return fig


def _draw_matrix(ax: Axes, result: StabilityResult) -> object:
    """τ-b above the diagonal, ρ below, 1 on it; each cell annotated with its value and interval."""
    count = len(result.inputs)
    values = np.full((count, count), np.nan)
    text: dict[tuple[int, int], str] = {}
    for i in range(count):
        values[i, i] = 1.0
        text[(i, i)] = "1"
    for pair in result.pairs:
        for (row, col), value, interval, name in (
            ((pair.first, pair.second), pair.kendall_tau_b, pair.kendall_tau_b_ci95, "τ"),
            ((pair.second, pair.first), pair.spearman_rho, pair.spearman_rho_ci95, "ρ"),
        ):
            values[row, col] = np.nan if value is None else value
            text[(row, col)] = _cell_text(name, value, interval)
    image = ax.imshow(np.ma.masked_invalid(values), cmap="RdBu", vmin=-1.0, vmax=1.0)
    if count <= ANNOTATE_MAX_INPUTS:
        for (row, col), label in text.items():
            value = values[row, col]
            dark = math.isfinite(value) and abs(value) > 0.6
            ax.text(col, row, label, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    labels = [item.label for item in result.inputs]
    ax.set_xticks(range(count), labels, rotation=30, ha="right")
    ax.set_yticks(range(count), labels)
    ax.set_title("Kendall τ-b (upper) · Spearman ρ (lower), 95 % intervals", fontsize=10)
    return image


def _cell_text(name: str, value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return f"{name} undefined"
    if interval is None or any(not math.isfinite(bound) for bound in interval):
        return f"{name} = {value:.2f}"
    return f"{name} = {value:.2f}\n[{interval[0]:.2f}, {interval[1]:.2f}]"


def _draw_curves(ax: Axes, result: StabilityResult) -> None:
    """One line per pair with its 95 % band, and the chance overlap dashed."""
    ks = result.ks
    count = len(result.pairs)
    for index, pair in enumerate(result.pairs):
        # Each pair a little left or right of k, with its own marker and dashes: pairs that agree exactly
        # (a common case with few blocks) show as parallel lines, not one line hiding the others.
        x = np.asarray(ks, dtype=float) + (index - (count - 1) / 2) * min(DODGE, 0.5 / max(count, 1))
        line = ax.plot(
            x,
            pair.jaccard_lowest_k,
            marker=MARKERS[index % len(MARKERS)],
            linestyle=DASHES[index % len(DASHES)],
            markersize=5,
            label=_pair_label(result, pair),
        )[0]
        low = [ci[0] for ci in pair.jaccard_lowest_k_ci95]
        high = [ci[1] for ci in pair.jaccard_lowest_k_ci95]
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
    ax.plot(ks, result.jaccard_chance, linestyle="--", color="#555555", label="chance (unrelated rankings)")
    ax.set_ylim(-0.02, 1.02)
    step = tick_step(len(ks))
    ax.set_xticks(ks[::step])
    ax.set_xlabel("k (the k most prunable blocks of each ranking)")
    ax.set_ylabel("Jaccard overlap |A∩B| / |A∪B|")
    ax.set_title("Overlap of the blocks chosen for removal, 95 % bands", fontsize=10)
    ax.grid(alpha=0.3)


def _pair_label(result: StabilityResult, pair: StabilityPair) -> str:
    return f"{result.inputs[pair.first].label} vs {result.inputs[pair.second].label}"
