"""Figures drawn from result objects only (matplotlib, Agg): never torch, transformers or lm_eval."""

from layerprobe.plots.curve import plot_prune_curve
from layerprobe.plots.depth import plot_depth, redraw
from layerprobe.plots.figures import (
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
    plot_angular,
    plot_prune_drop,
    plt,
    span_matrix,
)

__all__ = [
    "_bars",
    "_draw_heatmap",
    "_effect_color",
    "_layer_axis",
    "_save",
    "_short",
    "_value_text",
    "_zero_line",
    "DIFF_CMAP",
    "DISTANCE_LABEL",
    "plot_angular",
    "plot_depth",
    "plot_prune_curve",
    "plot_prune_drop",
    "plt",
    "redraw",
    "span_matrix",
]
