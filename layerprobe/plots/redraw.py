"""Any result JSON → its plots again (backs `layerprobe plot`), from the file alone, never from a model."""

from __future__ import annotations

from pathlib import Path

from layerprobe.core import check_output_dir
from layerprobe.plots.curve import plot_prune_curve
from layerprobe.plots.delta import plot_prune_drop
from layerprobe.plots.depth import plot_depth
from layerprobe.plots.heatmap import plot_angular
from layerprobe.results import AngularResult, DepthResult, PruneCurveResult, load_result


def redraw(json_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Redraw every plot of a result JSON of any kind; the plots go next to the JSON unless `out_dir` is given.

    Raises:
        ResultError: the file is missing, unreadable or not a valid layerprobe result.
        LayerprobeError: `out_dir` cannot be used as an output directory.
    """
    json_path = Path(json_path)
    result = load_result(json_path)  # validated once, whatever the kind
    out_dir = json_path.parent if out_dir is None else check_output_dir(out_dir)
    if isinstance(result, AngularResult):
        return plot_angular(result, out_dir)
    if isinstance(result, DepthResult):
        return plot_depth(result, out_dir)
    if isinstance(result, PruneCurveResult):
        return plot_prune_curve(result, out_dir)
    return plot_prune_drop(result, out_dir)
