"""Any result JSON → its plots again (backs `layerprobe plot`), from the file alone, never from a model."""

from __future__ import annotations

from pathlib import Path

from layerprobe.core import check_output_dir
from layerprobe.plots.curve import plot_prune_curve
from layerprobe.plots.delta import plot_prune_drop
from layerprobe.plots.depth import plot_depth
from layerprobe.plots.gain import plot_gain
from layerprobe.plots.heal import plot_heal
from layerprobe.plots.heatmap import plot_angular
from layerprobe.plots.stability import plot_stability
from layerprobe.plots.track import plot_track
from layerprobe.results import (
    GAIN_SCHEMA,
    STABILITY_SCHEMA,
    TRACK_SCHEMA,
    AngularResult,
    DepthResult,
    GainResult,
    HealResult,
    PruneCurveResult,
    StabilityResult,
    TrackResult,
    load_result,
    read_json,
    schema_family,
)


def redraw(json_path: Path, out_dir: Path | None = None) -> list[Path]:
    """Redraw every plot of a result JSON of any kind; the plots go next to the JSON unless `out_dir` is given.

    Raises:
        ResultError: the file is missing, unreadable or not a valid layerprobe result.
        LayerprobeError: `out_dir` cannot be used as an output directory.
    """
    json_path = Path(json_path)
    kind = schema_family(str(read_json(json_path)["schema"]))
    readers: dict[str, type[StabilityResult] | type[TrackResult] | type[GainResult]] = {
        STABILITY_SCHEMA: StabilityResult,
        TRACK_SCHEMA: TrackResult,
        GAIN_SCHEMA: GainResult,
    }
    reader = next((r for schema, r in readers.items() if schema_family(schema) == kind), None)
    if reader is not None:  # not load_result's kinds: several results, or a speed-up of several checkpoints
        other = reader.from_dict(read_json(json_path), str(json_path))
        out_dir = json_path.parent if out_dir is None else check_output_dir(out_dir)
        if isinstance(other, StabilityResult):
            return plot_stability(other, out_dir)
        if isinstance(other, GainResult):
            return plot_gain(other, out_dir)
        return plot_track(other, out_dir)
    result = load_result(json_path)  # validated once, whatever the kind
    out_dir = json_path.parent if out_dir is None else check_output_dir(out_dir)
    if isinstance(result, AngularResult):
        return plot_angular(result, out_dir)
    if isinstance(result, DepthResult):
        return plot_depth(result, out_dir)
    if isinstance(result, PruneCurveResult):
        return plot_prune_curve(result, out_dir)
    if isinstance(result, HealResult):
        return plot_heal(result, out_dir)
    return plot_prune_drop(result, out_dir)
