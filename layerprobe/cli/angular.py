"""`layerprobe angular`: the angular distance between the inputs of every pair of blocks, in one pass."""

from __future__ import annotations

from pathlib import Path

from layerprobe.cli.console import RichProgress, out
from layerprobe.cli.corpus_options import Corpus, Streaming
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import ModelArg, ModelLoading, Output, StateMemory, hold_out
from layerprobe.cli.summaries import print_angular_summary
from layerprobe.core import AngularSpec, check_output_dir
from layerprobe.measure import run_angular
from layerprobe.model import world
from layerprobe.plots import plot_angular
from layerprobe.results import RunDir, write_json


@takes_groups
def angular(
    model: ModelArg,
    *,
    corpus: Corpus,
    streaming: Streaming,
    loading: ModelLoading,
    memory: StateMemory,
    output: Output,
) -> None:
    """Angular distance d(x^l, x^(l+n)) between the inputs of every pair of blocks, in one pass.

    Writes angular.json (the full (L+1)×(L+1) matrix) and the heatmap angular.png / angular.pdf.
    """
    spec = AngularSpec(
        model=loading.spec(model),
        corpus=corpus.spec(),
        **streaming.spec_fields(),
        **memory.spec_fields(),
    )
    measure_and_report(spec, output.directory(model), output.quiet)


def measure_and_report(spec: AngularSpec, directory: Path, quiet: bool) -> None:
    """Run `angular` (on every rank of a launch), then write and print the result on the main rank."""
    hold_out(check_output_dir(directory))
    ranks = world()
    progress = RichProgress(quiet or not ranks.is_main)
    with progress.running():
        result = run_angular(spec, progress.callbacks(), world=ranks)
    ranks.finish()  # every rank done: leave the launch together (no rank dies in teardown)
    if not ranks.is_main:
        return
    json_path = write_json(RunDir(directory).angular_json, result.to_dict())
    plots = plot_angular(result, directory)
    print_angular_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, markup=False)
