"""`layerprobe plot`: redraw the plots of a result JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.console import out
from layerprobe.cli.options import Quiet
from layerprobe.plots import redraw


def plot(
    result_json: Annotated[
        Path, typer.Argument(help="An angular.json, prune_drop.json or depth.json written by layerprobe.")
    ],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: next to the JSON).")] = None,
    quiet: Quiet = False,
) -> None:
    """Redraw the plots of a result JSON (heatmap, ΔP bars or the depth figure)."""
    for path in redraw(result_json, out_dir):
        out.print(f"wrote {path}", highlight=False, markup=False)
