"""`layerprobe report`: one self-contained HTML page for one run directory or several."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.console import StageSpinner, out
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import History, Quiet, RunDirs
from layerprobe.core import check_output_dir
from layerprobe.results import REPORT_HTML, RunDir
from layerprobe.review import write_report

PAGE_SUFFIXES = (".html", ".htm")


def page_path(out_path: Path) -> Path:
    """`--out`: a file name ending in .html, else a directory that gets report.html."""
    if out_path.suffix.lower() in PAGE_SUFFIXES and not out_path.is_dir():
        check_output_dir(out_path.parent, option=f"--out {out_path}: its folder")
        return out_path
    check_output_dir(out_path)
    return RunDir(out_path).report_html


@takes_groups
def report(
    run_dirs: RunDirs,
    *,
    history: History,
    out_path: Annotated[
        Path, typer.Option("--out", help="The page to write (a .html file), or a directory that gets report.html.")
    ] = Path(REPORT_HTML),
    quiet: Quiet = False,
) -> None:
    """One self-contained HTML page of one run or several: it opens from a CI artifact, no network needed.

    Per run: provenance, the angular heatmap (hover a cell for its distance ± standard error), ΔP bars with
    their paired 95 % intervals, the agreement of the two measures, pruning curves and the depth figure;
    for several runs first their history, as `layerprobe track` draws it. Exit 2 for a run directory that
    cannot be read or runs that do not belong together.
    """
    path = page_path(out_path)
    spinner = StageSpinner()
    with spinner.running():
        if not quiet:
            spinner.stage("writing the report")
        written = write_report(
            run_dirs,
            path,
            order=history.order,
            align=history.align,
            allow_mixed=history.allow_mixed,
            watch=history.watch,
        )
    out.print(f"wrote {written}", highlight=False, markup=False, soft_wrap=True)
