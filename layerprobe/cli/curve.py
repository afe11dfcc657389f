"""`layerprobe prune-curve`: score vs fraction removed, one curve per strategy of choosing what to remove."""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.cli.console import RichProgress, out, print_task_code
from layerprobe.cli.corpus_options import Corpus
from layerprobe.cli.groups import SpecGroup, takes_groups
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
from layerprobe.core import PruneCurveSpec, PruneSpec
from layerprobe.plots import plot_prune_curve
from layerprobe.results import RunDir


@dataclass(frozen=True)
class CurveOptions(SpecGroup):
    """The curve's own settings (PruneCurveSpec), in the order --help lists them."""

    SPEC = PruneCurveSpec
    FIELDS = ("angular", "methods", "metric", "unit", "prune_drop", "max_fraction", "baseline_seeds")


@takes_groups
def prune_curve(
    model: ModelArg,
    *,
    task: Tasks,
    curve: CurveOptions,
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
    from layerprobe.prune import run_prune_curve

    spec = PruneCurveSpec(
        prune=PruneSpec(
            model=loading.spec(model),
            tasks=split_task_names(task),
            **evaluation.spec_fields(),
            **sequential.spec_fields(),
            corpus=corpus.spec(),
        ),
        **curve.spec_fields(),
    )
    task_code = check_task_code(list(spec.prune.tasks), spec.prune.include_path, spec.prune.trust_task_code)
    directory = output.directory(model)
    print_task_code(task_code)
    progress = RichProgress(output.quiet)
    with progress.running():
        result = run_prune_curve(spec, directory, progress.callbacks())
    plots = plot_prune_curve(result, directory)
    print_curve_summary(result)
    out.print(f"wrote {RunDir(directory).prune_curve_json}" + "".join(f", {p}" for p in plots), markup=False)
