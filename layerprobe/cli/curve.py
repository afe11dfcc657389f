"""`layerprobe prune-curve`: score vs fraction of blocks removed, for Gromov's span, the last and random spans."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.console import RichProgress, out, print_task_code
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import Corpus, Evaluation, ModelArg, ModelLoading, Output, Tasks, split_task_names
from layerprobe.core import PruneSpec
from layerprobe.plots import plot_prune_curve
from layerprobe.results import RunDir


@takes_groups
def prune_curve(
    model: ModelArg,
    *,
    task: Tasks,
    angular: Annotated[
        Path | None,
        typer.Option("--angular", help="angular.json of the same model (default: measured first on the corpus)."),
    ] = None,
    max_fraction: Annotated[
        float, typer.Option("--max-fraction", help="Largest fraction of blocks removed (n = 1 … ⌊fraction·L⌋).")
    ] = 0.5,
    baseline_seeds: Annotated[
        int, typer.Option("--baseline-seeds", help="Random-span baselines per n (seeds --seed, --seed+1, …).")
    ] = 0,
    evaluation: Evaluation,
    corpus: Corpus,
    loading: ModelLoading,
    output: Output,
) -> None:
    """Score vs fraction of blocks removed: Gromov's min-angular-distance span, last blocks, random spans.

    Writes prune_curve.json and prune_curve_<task>.png (one line per method).
    """
    from layerprobe.evaluate import local_task_code  # lm-eval: only once a run starts
    from layerprobe.prune import PruneCurveSpec, run_prune_curve

    spec = PruneCurveSpec(
        prune=PruneSpec(
            model=loading.spec(model),
            tasks=split_task_names(task),
            **evaluation.spec_fields(),
            corpus=corpus.spec(),
        ),
        max_fraction=max_fraction,
        baseline_seeds=baseline_seeds,
    )
    directory = output.directory(model)
    print_task_code(local_task_code(list(spec.prune.tasks), spec.prune.include_path))
    progress = RichProgress(output.quiet)
    with progress.running():
        result = run_prune_curve(spec, directory, str(angular) if angular else None, progress.callbacks())
    plots = plot_prune_curve(result, directory)
    out.print(f"wrote {RunDir(directory).prune_curve_json}" + "".join(f", {p}" for p in plots), markup=False)
