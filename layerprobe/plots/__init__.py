"""Figures drawn from result objects only (matplotlib, Agg): never torch, transformers or lm_eval.

heatmap.py draws the angular-distance heatmap, delta.py the ΔP bars, depth.py and curve.py the depth
and pruning-curve figures, stability.py the ranking-stability figure, redraw.py any result JSON's figures
again; common.py holds what they share.
matplotlib is imported when the first figure is drawn (`pyplot`), so importing this room stays light.
The gate draws its baseline-vs-candidate figures with the helpers listed here.
"""

from layerprobe.plots.common import effect_color, layer_axis, pyplot, save_figure, short_name
from layerprobe.plots.curve import plot_prune_curve
from layerprobe.plots.delta import draw_bars, plot_prune_drop, value_text, zero_line
from layerprobe.plots.depth import plot_depth
from layerprobe.plots.heatmap import DIFF_CMAP, DISTANCE_LABEL, draw_heatmap, plot_angular, span_matrix
from layerprobe.plots.redraw import redraw
from layerprobe.plots.stability import plot_stability

__all__ = [
    "DIFF_CMAP",
    "DISTANCE_LABEL",
    "draw_bars",
    "draw_heatmap",
    "effect_color",
    "layer_axis",
    "plot_angular",
    "plot_depth",
    "plot_prune_curve",
    "plot_prune_drop",
    "plot_stability",
    "pyplot",
    "redraw",
    "save_figure",
    "short_name",
    "span_matrix",
    "value_text",
    "zero_line",
]
