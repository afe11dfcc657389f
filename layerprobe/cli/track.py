"""`layerprobe track`: the history of a run's checkpoints (or a release series) as JSON, markdown and figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from layerprobe.cli.console import StageSpinner, err, out, safe_text
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import History, Quiet, RunDirs, hold_out
from layerprobe.core import check_output_dir
from layerprobe.results import TrackResult
from layerprobe.review import read_track, track_markdown, track_table, write_track

FORMATS = ("table", "markdown", "json")
if TYPE_CHECKING:  # mypy reads the choice as the str it is; Typer lists and checks the Literal's values
    Format = str
else:
    Format = Literal[FORMATS]


@takes_groups
def track(
    run_dirs: RunDirs,
    *,
    history: History,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where track.json, track.md and the track_<what>.png/.pdf figures go.")
    ] = Path("layerprobe-out/track"),
    output_format: Annotated[
        Format,
        typer.Option(
            "--format", help="What goes to stdout: a table, GitHub markdown (for $GITHUB_STEP_SUMMARY) or track.json."
        ),
    ] = "table",
    plot: Annotated[
        bool,
        typer.Option(
            "--plot/--no-plot", help="Draw the track_<what>.png/.pdf figures (track.json and track.md always)."
        ),
    ] = True,
    quiet: Quiet = False,
) -> None:
    """Follow several runs of one model (a training run's checkpoints, a release series) across their results.

    Reads angular.json, prune_drop.json, depth.json and prune_curve.json from each run directory (whichever
    are there), orders the runs by training step, and writes track.json, track.md and line plots with 95 %
    intervals: lazy blocks, mean adjacent distance, each task's score and the ΔP of watched blocks,
    residual growth, the gradient-norm signature, a heat strip of adjacent distance per block, and pruning
    curves. Exit 2 for a run directory that cannot be read or runs that do not belong together.
    """
    hold_out(check_output_dir(out_dir))
    _, result = read_track(
        run_dirs, order=history.order, align=history.align, allow_mixed=history.allow_mixed, watch=history.watch
    )
    spinner = StageSpinner()
    with spinner.running():
        if not quiet:
            spinner.stage("drawing the history")
        paths = write_track(result, out_dir, figures=plot)
    show(result, output_format)
    if not quiet:
        for path in paths:
            err.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


def show(result: TrackResult, output_format: str) -> None:
    """The history on stdout in the chosen format."""
    if output_format == "markdown":
        typer.echo(safe_text(track_markdown(result)), nl=False)
    elif output_format == "json":
        typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=True))
    else:
        header, rows = track_table(result)
        table = Table(title="layerprobe track", title_justify="left")
        for i, name in enumerate(header):
            table.add_column(name, justify="right" if i >= 2 else "left", overflow="fold")
        for row in rows:
            table.add_row(*row)
        out.print(table, highlight=False, markup=False)
        for note in result.notes or []:
            out.print(f"note: {note}", style="dim", highlight=False, markup=False)
