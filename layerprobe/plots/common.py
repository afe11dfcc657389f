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
from typing import TYPE_CHECKING

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
