"""Figures drawn from result objects only (matplotlib, Agg): never torch, transformers or lm_eval.

heatmap.py draws the angular-distance heatmap, delta.py the ΔP bars, depth.py and curve.py the depth
and pruning-curve figures, stability.py the ranking-stability figure, redraw.py any result JSON's figures
again; track.py and track_blocks.py the history of several runs (`layerprobe track`); inline.py turns a
figure into SVG for an HTML page; common.py holds what they share. matplotlib is imported when the first
figure is drawn (`pyplot`), so importing this room stays light. Importing it registers the angular, depth and
prune-drop figures with the results' notebook face (`plot()`, `save()`). The gate draws its baseline-vs-candidate
figures with the helpers listed here.
"""

from layerprobe.plots.common import (
    data_points,
    effect_color,
    hidden_data,
    interval_text,
    layer_axis,
    metric_label,
    number_text,
    place_legend,
    pyplot,
    save_figure,
    short_name,
)
from layerprobe.plots.curve import plot_prune_curve, prune_curve_figure
from layerprobe.plots.delta import (
    BASELINE_BAND,
    PAIRED_INTERVAL,
    baseline_band,
    draw_bars,
    normal_intervals,
    plot_prune_drop,
    prune_drop_figure,
    value_text,
    zero_line,
)
from layerprobe.plots.depth import depth_figure, plot_depth
from layerprobe.plots.gain import plot_gain
from layerprobe.plots.heal import heal_figure, plot_heal
from layerprobe.plots.heatmap import (
    DIFF_CMAP,
    DISTANCE_LABEL,
    HEATMAP_CMAP,
    angular_figure,
    draw_heatmap,
    plot_angular,
    span_matrix,
)
from layerprobe.plots.inline import figure_svg
from layerprobe.plots.redraw import redraw
from layerprobe.plots.stability import plot_stability, stability_figure
from layerprobe.plots.track import plot_track, track_figures
from layerprobe.results import AngularResult, DepthResult, PruneDropResult, register_figures

# A result's plot() and save() (results/notebook.py) draw through these: results sits below plots.
register_figures(AngularResult, angular_figure, plot_angular)
register_figures(DepthResult, depth_figure, plot_depth)
register_figures(PruneDropResult, prune_drop_figure, plot_prune_drop)

__all__ = [
    "angular_figure",
    "plot_gain",
    "plot_heal",
    "heal_figure",
    "BASELINE_BAND",
    "PAIRED_INTERVAL",
    "normal_intervals",
    "data_points",
    "depth_figure",
    "DIFF_CMAP",
    "DISTANCE_LABEL",
    "draw_bars",
    "draw_heatmap",
    "effect_color",
    "figure_svg",
    "HEATMAP_CMAP",
    "hidden_data",
    "interval_text",
    "layer_axis",
    "metric_label",
    "number_text",
    "place_legend",
    "plot_angular",
    "plot_depth",
    "plot_prune_curve",
    "plot_prune_drop",
    "plot_stability",
    "plot_track",
    "prune_curve_figure",
    "prune_drop_figure",
    "pyplot",
    "redraw",
    "save_figure",
    "short_name",
    "span_matrix",
    "stability_figure",
    "track_figures",
    "value_text",
    "baseline_band",
    "zero_line",
]
