"""`layerprobe prune-curve`: score vs fraction removed, one curve per strategy of choosing what to remove."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.console import RichProgress, out, print_task_code
from layerprobe.cli.corpus_options import Corpus
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import (
    Evaluation,
    ModelArg,
    ModelLoading,
    Output,
    Sequential,
    Tasks,
    split_task_names,
)
from layerprobe.cli.summaries import print_curve_summary
from layerprobe.core import CURVE_MAX_FRACTION, CURVE_METHODS, CURVE_UNITS, PruneSpec
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
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help=f"Comma-separated strategies among {','.join(CURVE_METHODS)}: angular = Gromov's span of least "
            "angular change; last = the blocks before the final one; influence = the n blocks of least adjacent "
            "change; delta = the n units whose single removal hurt --metric least; greedy = remove the least "
            "harmful unit, re-score the rest, repeat; random = random spans. Default: angular,last (and random "
            "with --baseline-seeds).",
        ),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="TASK:METRIC (or METRIC of the first task) that delta and greedy choose by; default: the first "
            "task's primary metric (corpus: nll; an image classifier's kl, a headless tower's cosine_distance). "
            "Every task and metric is still scored.",
        ),
    ] = None,
    unit: Annotated[
        str,
        typer.Option(
            "--unit",
            help="What delta and greedy remove: block, or sublayers (every attention and every MLP sublayer a "
            "candidate; n counts sublayers).",
        ),
    ] = CURVE_UNITS[0],
    prune_drop: Annotated[
        Path | None,
        typer.Option(
            "--prune-drop",
            help="prune_drop.json of the same model (single blocks) whose ΔP drives delta (default: measured first).",
        ),
    ] = None,
    max_fraction: Annotated[
        float,
        typer.Option(
            "--max-fraction", help="Largest fraction removed: n = 1 … ⌊fraction·L⌋ blocks (sublayers: ⌊fraction·2L⌋)."
        ),
    ] = CURVE_MAX_FRACTION,
    baseline_seeds: Annotated[
        int,
        typer.Option("--baseline-seeds", help="Random draws (one span per n each; seeds --seed, --seed+1, …)."),
    ] = 0,
    sequential: Sequential,
    evaluation: Evaluation,
    corpus: Corpus,
    loading: ModelLoading,
    output: Output,
) -> None:
    """Score vs fraction removed, for each strategy of choosing what to remove (--methods).

    Writes prune_curve.json (every method's removed set per n, every task's scores with 95 % intervals,
    the search cost) and prune_curve_<task>.png / .pdf (one line per method), and prints a table of every
    method × n. With --precision, every set is scored only until its ΔP is known (anytime 95 % intervals).
    """
    from layerprobe.evaluate import check_task_code  # lm-eval: only once a run starts
    from layerprobe.prune import PruneCurveSpec, run_prune_curve

    spec = PruneCurveSpec(
        prune=PruneSpec(
            model=loading.spec(model),
            tasks=split_task_names(task),
            **evaluation.spec_fields(),
            **sequential.spec_fields(),
            corpus=corpus.spec(),
        ),
        max_fraction=max_fraction,
        baseline_seeds=baseline_seeds,
        methods=None if methods is None else tuple(m.strip() for m in methods.split(",") if m.strip()),
        metric=metric,
        unit=unit,
        prune_drop=None if prune_drop is None else str(prune_drop),
    )
    task_code = check_task_code(list(spec.prune.tasks), spec.prune.include_path, spec.prune.trust_task_code)
    directory = output.directory(model)
    print_task_code(task_code)
    progress = RichProgress(output.quiet)
    with progress.running():
        result = run_prune_curve(spec, directory, str(angular) if angular else None, progress.callbacks())
    plots = plot_prune_curve(result, directory)
    print_curve_summary(result)
    out.print(f"wrote {RunDir(directory).prune_curve_json}" + "".join(f", {p}" for p in plots), markup=False)
