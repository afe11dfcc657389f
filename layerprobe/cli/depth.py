"""`layerprobe depth`: why blocks are lazy (norm placement, residual growth, updates, gradient norms)."""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.cli.console import RichProgress, out
from layerprobe.cli.corpus_options import Corpus, Streaming
from layerprobe.cli.groups import SpecGroup, takes_groups
from layerprobe.cli.options import ModelArg, ModelLoading, Output
from layerprobe.cli.summaries import print_depth_summary
from layerprobe.core import DepthSpec
from layerprobe.measure import run_depth
from layerprobe.plots import plot_depth
from layerprobe.results import RunDir, write_json


@dataclass(frozen=True)
class GradientNorms(SpecGroup):
    """`--grad` and its masking seed (declared on DepthSpec)."""

    SPEC = DepthSpec
    FIELDS = ("grad", "mask_seed")


@takes_groups
def depth(
    model: ModelArg,
    *,
    gradients: GradientNorms,
    corpus: Corpus,
    streaming: Streaming,
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
        **streaming.spec_fields(),
        **gradients.spec_fields(),
    )
    directory = output.directory(model)
    progress = RichProgress(output.quiet)
    with progress.running():
        result = run_depth(spec, progress.callbacks())
    json_path = write_json(RunDir(directory).depth_json, result.to_dict())
    plots = plot_depth(result, directory)
    print_depth_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, markup=False)
