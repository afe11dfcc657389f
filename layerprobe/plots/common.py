"""What every figure shares: pyplot on demand, atomic saving, tick steps, the layer axis, names and colours.

matplotlib takes about a third of a second to import, so no module of plots (or of the gate, which draws
with these helpers) imports it at load time: drawing functions ask `pyplot()` for it, and `layerprobe
--help` stays fast. Files are written atomically and every figure is closed after saving, so long batch
runs neither leave half-written images behind nor accumulate figures in pyplot's registry.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from layerprobe.core import terminal_text
from layerprobe.results import ModelInfo, atomic_write

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# What removing a layer does to the model, as bar colours: hurts, within noise, helps, not scored.
HARMFUL, WITHIN_NOISE, HELPFUL, MISSING = "#c0392b", "#9e9e9e", "#2e86c1", "#555555"


@functools.cache
def pyplot() -> ModuleType:
    """matplotlib.pyplot on the headless Agg backend, imported on the first call.

    Headless CI and servers have no display, so a figure must never depend on one; Agg is selected once,
    the first time a figure is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, *paths: Path, dpi: int = 150) -> list[Path]:
    """Save a figure to each path atomically (`results.atomic_write`), then close it, also on failure.

    The format follows each path's suffix (png, pdf).
    """
    try:
        for path in paths:
            atomic_write(path, functools.partial(_savefig, fig, fmt=path.suffix.lstrip(".").lower(), dpi=dpi))
    finally:
        pyplot().close(fig)
    return list(paths)


def _savefig(fig: Figure, tmp: Path, *, fmt: str, dpi: int) -> None:
    printable_texts(fig)
    fig.savefig(tmp, format=fmt, dpi=dpi)


def printable_texts(fig: Figure) -> None:
    r"""Show the odd characters of every text in `fig` escaped (`\x0d`, `\udcff`), as the terminal does.

    A name read from a result (a model id holding a lone surrogate or a carriage return) would otherwise
    make the font renderer fail while saving, or break a title across lines.
    """
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        shown = terminal_text(text.get_text())
        if shown != text.get_text():
            text.set_text(shown)


def tick_step(count: int) -> int:
    """Label every cell up to 16, then thin out so labels never overlap (every 5th at L = 80)."""
    return 1 if count <= 16 else 2 if count <= 32 else 5 if count <= 80 else 10


def layer_axis(ax: Axes, layers: Iterable[int]) -> None:
    """Label the x axis as removed block indices, ticks thinned by `tick_step`, with a light y grid."""
    ordered = sorted(layers)
    step = tick_step(len(ordered))
    ax.set_xticks(ordered[::step] if step > 1 else ordered)
    ax.set_xlabel("removed layer (block index)")
    ax.grid(axis="y", alpha=0.3)


def effect_color(gain: float, noise: float | None = None) -> str:
    """Colour a change by its effect on the model; `gain` is signed so that positive is better.

    Within ± `noise` (when given) it is grey; a missing (non-finite) change is dark grey.
    """
    if not math.isfinite(gain):
        return MISSING
    if noise is not None and abs(gain) < noise:
        return WITHIN_NOISE
    return HELPFUL if gain >= 0 else HARMFUL


def short_name(model_id: str) -> str:
    """A title-sized model name: hub ids stay whole, local paths keep their last two parts."""
    parts = Path(model_id).parts
    return model_id if not model_id.startswith(("/", ".", "~")) or len(parts) <= 2 else "…/" + "/".join(parts[-2:])


def title_name(model: ModelInfo) -> str:
    """The model's short name, marked when its weights were quantized (a quantized ΔP is not the model's)."""
    return short_name(model.id) + (f" ({model.quantization})" if model.quantization else "")


# ------------------------------------------------------------------------------------------- words
# The words of docs/methods.md for the metric keys results carry (lm-eval's, the corpus task's, SQuAD's):
# every figure labels a metric through `metric_label`, never with the raw key.
METRIC_WORDS = {
    "acc": "accuracy",
    "acc_norm": "length-normalised accuracy",
    "exact_match": "exact match",
    "f1": "F1",
    "nll": "NLL (nats per token)",
    "perplexity": "perplexity",
    "kl": "KL(P_base ‖ P_pruned), nats",
    "top1_agreement": "top-1 agreement with the full model",
    "word_perplexity": "word perplexity",
    "byte_perplexity": "byte perplexity",
    "bits_per_byte": "bits per byte",
}


def metric_label(name: str) -> str:
    """A metric key in words: `exact_match,strict-match` → `exact match (strict-match filter)`, `acc` → `accuracy`.

    A key layerprobe does not know keeps its name, underscores read as spaces.
    """
    key, _, filter_name = name.partition(",")
    words = METRIC_WORDS.get(key, key.replace("_", " "))
    return words if filter_name in ("", "none") else f"{words} ({filter_name} filter)"


def number_text(value: float, digits: int = 4) -> str:
    """One score in a title: 4 significant digits, trailing zeros kept (`0.1093`, `0.5200`, `2.833e+07`).

    A ± half-width takes `digits=2` (`± 0.020`): its own uncertainty makes more digits noise.
    """
    return f"{value:#.{digits}g}"


def interval_text(low: float, high: float) -> str:
    """A 95 % interval in a title, both ends in `number_text`'s format: `[0.1093, 0.5200]`, never `[0.109, 0.52]`."""
    return f"[{number_text(low)}, {number_text(high)}]"


# ------------------------------------------------------------------------------------------ legends
# Where a legend may sit inside the axes, tried in this order before the axes make room for it.
LEGEND_PLACES: tuple[Any, ...] = (
    "upper right",
    "upper left",
    "lower right",
    "lower left",
    "upper center",
    "lower center",
)


def place_legend(ax: Axes, *others: Axes, **kwargs) -> object:
    """A legend of `ax` where it hides no data of `ax` or of `others` (twin axes drawn on the same area).

    Tries each of `LEGEND_PLACES`; when every one covers a data point (a bar's end, an error bar's cap, a
    marker, a line), widens the y range upward by the legend's height and tries again (up to 3 times); at
    last it goes outside, to the right of the axes. The test: `hidden_data(legend, ax, *others)` is empty.
    """
    owner = others[-1] if others else ax  # a twin is drawn over `ax`: its legend must be on top
    if isinstance(kwargs.get("title"), str):
        kwargs["title"] = terminal_text(kwargs["title"])
    _settle(ax)  # settle the layout first: positions are tested where they will be
    handles, labels = [], []
    for source in (ax, *others):
        h, l = source.get_legend_handles_labels()
        handles += h
        labels += [terminal_text(label) for label in l]  # measured below: a lone surrogate fails the font
    for source in (ax, *others):
        old = source.get_legend()
        if old is not None:
            old.remove()
    for attempt in range(4):
        for place in LEGEND_PLACES:
            legend = owner.legend(handles, labels, loc=place, **kwargs)
            if not hidden_data(legend, ax, *others):
                return legend
            legend.remove()
        if attempt < 3:
            _make_headroom(ax, *others, legend_height=_legend_fraction(owner, handles, labels, kwargs))
            _settle(ax)
    return owner.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kwargs)


def _settle(ax: Axes) -> None:
    """Run the figure's layout (constrained layout moves axes) without rendering pixels.

    Its texts are made printable first: the layout measures them, and a name holding a lone surrogate
    would make the font renderer fail here, before saving (where `save_figure` escapes them too).
    """
    figure: Any = ax.figure
    printable_texts(figure)
    figure.draw_without_rendering()


def _renderer(ax: Axes) -> Any:
    """The figure's renderer (Agg: `pyplot` selects it), for the extents of legends and texts."""
    canvas: Any = ax.figure.canvas
    return canvas.get_renderer()


def _legend_fraction(owner: Axes, handles: list, labels: list, kwargs: dict) -> float:
    """The legend's height as a fraction of the axes' height."""
    legend = owner.legend(handles, labels, loc="upper right", **kwargs)
    renderer = _renderer(owner)
    fraction = legend.get_window_extent(renderer).height / max(owner.get_window_extent(renderer).height, 1.0)
    legend.remove()
    return min(fraction, 0.6)


def _make_headroom(*axes: Axes, legend_height: float) -> None:
    """Raise the top of each y axis so that the data fill only the lower 1 − height of the axes."""
    for ax in axes:
        low, high = ax.get_ylim()
        if ax.get_yscale() == "log":
            span = math.log10(high) - math.log10(low)
            ax.set_ylim(low, 10 ** (math.log10(low) + span / (1.0 - legend_height - 0.05)))
        else:
            ax.set_ylim(low, low + (high - low) / (1.0 - legend_height - 0.05))


def hidden_data(legend, *axes: Axes) -> list[tuple[float, float]]:
    """The data points (display coordinates) of `axes` under `legend`'s box (`data_points`).

    Markers, line vertices and points along each segment, error bar ends and caps, bar ends, text boxes'
    corners count. Reference lines drawn across the axes (`axhline`, `axvline`) and shaded bands are not data points.
    """
    import numpy as np

    renderer = legend.figure.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    points = np.concatenate([data_points(ax) for ax in axes]) if axes else np.empty((0, 2))
    inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)
    return [(float(x), float(y)) for x, y in points[inside]]


def data_points(ax: Axes):
    """Every data point of `ax` in display coordinates (an (n, 2) array), as `hidden_data` tests them."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.patches import Rectangle

    chunks = [np.empty((0, 2))]

    def along(xy) -> None:  # the vertices and 8 points on each segment between finite neighbours
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        xy = xy[np.isfinite(xy).all(axis=1)]
        chunks.append(xy)
        if len(xy) > 1:
            steps = np.linspace(0.0, 1.0, 10)[1:-1, None, None]
            chunks.append((xy[:-1] + steps * (xy[1:] - xy[:-1])).reshape(-1, 2))

    for line in ax.lines:
        if not line.get_visible() or not line.get_transform().contains_branch(ax.transData):
            continue  # axhline/axvline: blended with the axes' own coordinates, a reference, not data
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        if line.get_linestyle() in ("None", "none", "", " "):
            chunks.append(xy[np.isfinite(xy).all(axis=1)])
        else:
            along(xy)
    for collection in ax.collections:
        if isinstance(collection, LineCollection):  # error bars
            for segment in collection.get_segments():
                along(collection.get_transform().transform(np.asarray(segment, dtype=float)))
        elif isinstance(collection, PathCollection):  # scatter markers
            offsets = np.asarray(collection.get_offsets(), dtype=float)
            if offsets.size:
                chunks.append(collection.get_offset_transform().transform(offsets))
    for patch in ax.patches:
        if not isinstance(patch, Rectangle) or not patch.get_data_transform().contains_branch(ax.transData):
            continue  # axhspan: a band across the axes, not data
        if patch.get_visible() and patch.get_height() and np.isfinite(patch.get_height()):
            x, y, w, h = patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()
            end = y + h  # a bar's value end, sampled across its width
            along(patch.get_data_transform().transform([(x, end), (x + w, end)]))
    for text in ax.texts:
        if text.get_visible() and text.get_text().strip():
            extent = text.get_window_extent(_renderer(ax))
            chunks.append(
                np.array(
                    [[extent.x0, extent.y0], [extent.x1, extent.y1], [extent.x0, extent.y1], [extent.x1, extent.y0]]
                )
            )
    return np.concatenate(chunks)
