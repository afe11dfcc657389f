"""The `depth` figure, drawn from a DepthResult only (so `layerprobe plot depth.json` redraws it).

Four panels under a strip of per-block placement labels: (a) residual RMS ‖x^l‖/√d and the variance
across hidden units vs depth, (b) each block's relative update ‖x^(l+1) − x^l‖/‖x^l‖, (c) attention vs
MLP relative contribution ‖f‖/‖r‖, (d) gradient norms per block and sublayer (with --grad). Values span
orders of magnitude across depth (the Curse of Depth is a growth law), so y axes are logarithmic, with
plain-number tick labels that never repeat (`DistinctLabels`), linear steps within a decade; bands are
± one standard deviation over positions (a spread, not an interval; the title says so), clipped at the
smallest positive value. Without --grad, panel (d) suggests it only for a model whose gradient
`depth --grad` can measure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.plots.common import number_text, place_legend, pyplot, save_figure, short_name
from layerprobe.results import DepthResult, RunDir, Spread

# The model kinds (`ModelInfo.kind`) whose loss `depth --grad` differentiates, and what it needs of each.
GRAD_ADVICE = {
    "causal-lm": "not measured (run with --grad)",
    "encoder": "not measured (--grad needs a checkpoint\nsaved with its trained masked-LM head)",
}
NO_GRAD = "not measured (--grad needs a\nlanguage-modelling loss: causal LM or masked LM)"
# What the shaded bands of panels (a)-(c) are, said on the figure itself.
BAND_NOTE = "shaded bands: ± 1 SD over positions (the spread of the values, not a confidence interval)"

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LABEL_COLOURS = {
    "Pre-LN": "#2e86c1",
    "Post-LN": "#e67e22",
    "sandwich": "#27ae60",
    "parallel": "#8e44ad",
    "unrecognised": "#9e9e9e",
}
ATTENTION_COLOUR, MLP_COLOUR, BLOCK_COLOUR = "#c0392b", "#2e86c1", "#333333"


def plot_depth(result: DepthResult, out_dir: Path) -> list[Path]:
    """Draw `depth.png` and `depth.pdf` in `out_dir`."""
    run = RunDir(out_dir)
    return save_figure(depth_figure(result), run.plot("depth"), run.plot("depth", suffix="pdf"))


def depth_figure(result: DepthResult) -> Figure:
    """Build the figure (returned open, so tests can inspect it before it is saved)."""
    fig = pyplot().figure(figsize=(11, 8.2), layout="constrained")
    grid = fig.add_gridspec(3, 2, height_ratios=[0.22, 1, 1])
    strip = fig.add_subplot(grid[0, :])
    axes = [fig.add_subplot(grid[1 + i // 2, i % 2]) for i in range(4)]
    _draw_strip(strip, result)
    _draw_residual(axes[0], result)
    _draw_spread(axes[1], result.update, BLOCK_COLOUR, "block update")
    axes[1].set_ylabel(r"$\|x^{l+1}-x^l\|\,/\,\|x^l\|$")
    axes[1].set_title("(b) relative update of block l", fontsize=10, loc="left")
    _draw_sublayers(axes[2], result)
    footnote = _draw_grad(axes[3], result)
    for ax in axes[1:]:
        ax.set_xlabel("block l")
        _integer_ticks(ax, result.num_layers)
    if footnote:  # under the axis, never on the curves
        axes[3].set_xlabel(f"block l\n{footnote}")
    for ax in fig.axes:
        if ax.get_yscale() == "log":
            log_ticks(ax)
    tokens = result.data.get("tokens")
    tokens = f"{tokens:,}" if isinstance(tokens, int) else tokens
    fig.suptitle(
        f"{short_name(result.model.id)} · {tokens} tokens · {result.placement.summary}\n{BAND_NOTE}", fontsize=11
    )
    for ax in axes[2:]:  # last, with the layout settled: where the legend hides no point of a curve
        if ax.get_legend_handles_labels()[0]:
            place_legend(ax, fontsize=8)
    return fig


def _draw_strip(ax: Axes, result: DepthResult) -> None:
    from matplotlib.patches import Patch, Rectangle

    labels = result.placement.labels
    for l, label in enumerate(labels):
        ax.add_patch(Rectangle((l - 0.5, 0), 1, 1, color=LABEL_COLOURS.get(label, "#555555"), ec="white"))
        scale = result.placement.blocks[l].norm_scale
        if scale is not None and len(labels) <= 24:
            ax.text(l, 0.5, f"×{scale:.2g}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    _integer_ticks(ax, len(labels))
    ax.set_title("norm placement per block (traced)", fontsize=10, loc="left")
    present = list(dict.fromkeys(labels))
    ax.legend(
        handles=[Patch(color=LABEL_COLOURS.get(p, "#555555"), label=p) for p in present],
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=8,
        frameon=False,
    )


def _draw_residual(ax: Axes, result: DepthResult) -> None:
    _draw_spread(ax, result.rms, BLOCK_COLOUR, r"RMS $\|x^l\|/\sqrt{d}$")
    ax.set_ylabel(r"RMS $\|x^l\|/\sqrt{d}$")
    ax.set_xlabel("residual state l (input of block l; l = L: last output)")
    twin = ax.twinx()
    _draw_spread(twin, result.variance, "#16a085", "variance across units", dashed=True, band=False)
    twin.set_ylabel("variance across units", color="#16a085", fontsize=8)
    twin.tick_params(axis="y", labelsize=7, colors="#16a085")
    lines = ax.get_lines() + twin.get_lines()
    # Above the panel, right of its title: the two lines can pass through any corner inside it.
    ax.legend(
        lines,
        [str(line.get_label()) for line in lines],
        fontsize=8,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
        borderaxespad=0.2,
    )
    ax.set_title("(a) residual stream growth", fontsize=10, loc="left")
    _integer_ticks(ax, result.num_layers + 1)


def _draw_sublayers(ax: Axes, result: DepthResult) -> None:
    ax.set_title(r"(c) sublayer contribution $\|f\|\,/\,\|r\|$", fontsize=10, loc="left")
    if not result.sublayers:
        ax.text(0.5, 0.5, "sublayers not found (see placement)", ha="center", va="center", transform=ax.transAxes)
        return
    for kind, colour in (("attention", ATTENTION_COLOUR), ("mlp", MLP_COLOUR)):
        _draw_spread(ax, result.sublayers[kind]["relative"], colour, "attention" if kind == "attention" else "MLP")
    ax.set_ylabel("relative contribution")


def _draw_grad(ax: Axes, result: DepthResult) -> str | None:
    """Panel (d); returns the footnote (what the gradient is of) for the caller to put under the axis."""
    ax.set_title(r"(d) gradient norm $\|\nabla_{\theta_l} \bar{\mathcal{L}}\|$", fontsize=10, loc="left")
    grad = result.grad
    if grad is None:
        advice = GRAD_ADVICE.get(result.model.kind, NO_GRAD)
        ax.text(0.5, 0.5, advice, ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_yticks([])
        return None
    x = np.arange(len(grad.block))
    ax.plot(x, _positive(grad.block), "o-", color=BLOCK_COLOUR, label="block", ms=4)
    for kind, colour in (("attention", ATTENTION_COLOUR), ("mlp", MLP_COLOUR)):
        values = (grad.sublayers or {}).get(kind)
        if values:
            ax.plot(x, _positive(values), "s--", color=colour, label=kind if kind == "attention" else "MLP", ms=3)
    ax.set_yscale("log")
    ax.set_ylabel(r"gradient norm $\|\nabla_{\theta}\,\bar{\mathcal{L}}\|_2$")
    return f"gradient of the mean {grad.loss} loss ({number_text(grad.mean_loss)}) over {grad.positions:,} positions"


def _draw_spread(ax: Axes, spread: Spread, colour: str, label: str, dashed: bool = False, band: bool = True) -> None:
    mean = _positive(spread.mean)
    std = np.asarray([s if s is not None else math.nan for s in spread.std], dtype=float)
    x = np.arange(len(mean))
    ax.plot(x, mean, "--" if dashed else "o-", color=colour, label=label, ms=4)
    if band:
        positive = mean[np.isfinite(mean) & (mean > 0)]
        floor = float(positive.min()) / 10 if positive.size else 1e-12
        ax.fill_between(x, np.clip(mean - std, floor, None), mean + std, color=colour, alpha=0.15, lw=0)
    ax.set_yscale("log")


def _positive(values: Sequence[float | None]) -> np.ndarray:
    """Values as floats, with None and non-positive entries (undrawable on a log axis) as NaN."""
    array = np.asarray([v if v is not None else math.nan for v in values], dtype=float)
    array[~(array > 0)] = math.nan
    return array


def log_ticks(ax: Axes) -> None:
    """Tick a logarithmic y axis so that every label is a distinct plain number.

    Ticks sit at 1, 2 and 5 times the powers of ten in view when that gives 3 to 9 labels, so a curve
    anywhere in the panel has labelled ticks beside it; at the powers of ten alone when the range is wider;
    when less than that is in view (where matplotlib would label minor ticks that round alike, "1×10⁰"
    several times), at about five evenly spaced values instead. Labels use the fewest significant digits
    (2 to 8) that keep them distinct.
    """
    from matplotlib.ticker import FixedFormatter, FixedLocator, LogLocator, MaxNLocator, NullFormatter, NullLocator

    low, high = ax.get_ylim()
    if not (low > 0 and high > low):
        return
    decades = [float(t) for t in LogLocator(base=10).tick_values(low, high) if low <= t <= high]
    dense = [float(t) for t in LogLocator(base=10, subs=(1.0, 2.0, 5.0)).tick_values(low, high) if low <= t <= high]
    narrow = False
    if 3 <= len(dense) <= 9:  # 1-2-5: labels near every curve
        ticks = dense
    elif len(decades) >= 2:
        ticks = decades
    else:  # less than a factor of 5 in view: evenly spaced values instead
        narrow = True
        ticks = [float(t) for t in MaxNLocator(nbins=5).tick_values(low, high) if low <= t <= high and t > 0]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FixedFormatter(distinct_labels(ticks)))
    ax.yaxis.set_minor_locator(NullLocator() if narrow else LogLocator(base=10, subs=tuple(range(2, 10))))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(low, high)


def distinct_labels(values: Sequence[float]) -> list[str]:
    """Plain-number labels with the fewest significant digits (2 to 8) that make them all distinct."""
    for digits in range(2, 9):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def _integer_ticks(ax: Axes, count: int) -> None:
    step = max(1, math.ceil(count / 16))
    ax.set_xticks(range(0, count, step))
