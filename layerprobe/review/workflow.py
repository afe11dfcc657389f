"""What the `track` and `report` commands do, start to end: read the run directories, build, write.

`read_track` reads and checks every run directory and builds the history; `write_track` writes
track.json, track.md and the figures; `write_report` writes the page, with the history when several
runs are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from layerprobe.plots import plot_track
from layerprobe.results import RunDir, TrackResult, write_json, write_text
from layerprobe.review.page import write_page
from layerprobe.review.runs import RunResults, read_run
from layerprobe.review.table import track_markdown
from layerprobe.review.track import build_track


def read_track(
    directories: Sequence[str | Path],
    *,
    order: str = "step",
    align: str = "block",
    allow_mixed: bool = False,
    watch: str | None = None,
) -> tuple[list[RunResults], TrackResult]:
    """Every run directory read and checked, in the history's order, and the history itself.

    Raises:
        LayerprobeError: a directory cannot be read, or the runs do not belong together (see `build_track`).
    """
    runs = [read_run(directory) for directory in directories]
    track = build_track(runs, order=order, align=align, allow_mixed=allow_mixed, watch=watch)
    by_directory = {str(run.directory): run for run in runs}
    return [by_directory[entry.directory] for entry in track.runs], track


def write_track(track: TrackResult, out_dir: Path, figures: bool = True) -> list[Path]:
    """Write track.json, track.md and (with `figures`) every figure the history has data for into `out_dir`."""
    run = RunDir(out_dir)
    paths = [write_json(run.track_json, track.to_dict()), write_text(run.track_md, track_markdown(track))]
    return paths + (plot_track(track, out_dir) if figures else [])


def write_report(
    directories: Sequence[str | Path],
    out: Path,
    *,
    order: str = "step",
    align: str = "block",
    allow_mixed: bool = False,
    watch: str | None = None,
) -> Path:
    """Write the report of the run directories to `out` (the history view when there are several)."""
    runs, track = read_track(directories, order=order, align=align, allow_mixed=allow_mixed, watch=watch)
    labels = [entry.label for entry in track.runs]
    return write_page(out, runs, labels, track if len(runs) > 1 else None)
