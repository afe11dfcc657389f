"""`layerprobe depth`: why blocks are lazy (norm placement, residual growth, updates, gradient norms)."""

from __future__ import annotations

from typing import Annotated

import typer

from layerprobe.cli.console import RichProgress, out
from layerprobe.cli.corpus_options import StreamedCorpus
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import ModelArg, ModelLoading, Output
from layerprobe.cli.summaries import print_depth_summary
from layerprobe.core import DepthSpec
from layerprobe.measure import run_depth
from layerprobe.plots import plot_depth
from layerprobe.results import RunDir, write_json


@takes_groups
def depth(
    model: ModelArg,
    grad: Annotated[
        bool,
        typer.Option(
            "--grad",
            help="Also the gradient norm of each block and sublayer for the model's own loss "
            "(next-token, or masked-LM for encoders); one more forward+backward pass.",
        ),
    ] = False,
    mask_seed: Annotated[int, typer.Option("--mask-seed", help="Seed of the 15 % masked-LM masking (--grad).")] = 1234,
    *,
    corpus: StreamedCorpus,
    loading: ModelLoading,
    output: Output,
) -> None:
    """Why blocks are lazy: norm placement, residual growth, per-block and per-sublayer updates, gradient norms.

    Norm placement is traced (Pre-LN, Post-LN, Mix-LN, sandwich, parallel, LayerNorm Scaling); residual
    RMS and variance are given for x^0 … x^L, relative updates per block and per sublayer (attention,
    MLP), and with --grad the gradient norm of each block for the model's own loss.

    Writes depth.json and the figure depth.png / depth.pdf.
    """
    spec = DepthSpec(
        model=loading.spec(model),
        corpus=corpus.spec(),
        positions=corpus.positions,
        batch_size=corpus.batch_size,
        grad=grad,
        mask_seed=mask_seed,
    )
    directory = output.directory(model)
    progress = RichProgress(output.quiet)
    with progress.running():
        result = run_depth(spec, progress.callbacks())
    json_path = write_json(RunDir(directory).depth_json, result.to_dict())
    plots = plot_depth(result, directory)
    print_depth_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, markup=False)
