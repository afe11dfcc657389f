"""`layerprobe prune-drop`: the performance drop ΔP with each block (span, attention or MLP) removed in turn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

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
from layerprobe.cli.summaries import print_prune_summary
from layerprobe.core import SCALE_PANEL, PruneSpec, Share
from layerprobe.model import world
from layerprobe.plots import plot_prune_drop
from layerprobe.results import PruneDropResult, RunDir


@dataclass(frozen=True)
class DropMemory(SpecGroup):
    """`--max-state-memory` of prune-drop (the shared engine's recorded block inputs)."""

    PANEL = SCALE_PANEL
    SPEC = PruneSpec
    FIELDS = ("max_state_bytes",)


@dataclass(frozen=True)
class Drop(SpecGroup):
    """prune-drop's own settings: every other setting PruneSpec declares (what each variant removes, how…)."""

    SPEC = PruneSpec
    REST_OF = (Evaluation, Sequential, DropMemory)


@takes_groups
def prune_drop(
    model: ModelArg,
    *,
    task: Tasks,
    drop: Drop,
    evaluation: Evaluation,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            rich_help_panel=SCALE_PANEL,
            help="Continue an interrupted run in the same --out, recomputing nothing already done.",
        ),
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            rich_help_panel=SCALE_PANEL,
            help="i/N (0-based): score only this job's share of the variants, into its own --out; "
            "join the N shards with `layerprobe merge`.",
        ),
    ] = None,
    sequential: Sequential,
    corpus: Corpus,
    loading: ModelLoading,
    memory: DropMemory,
    output: Output,
) -> None:
    """Performance drop ΔP = P_pruned − P_original with each block (span, attention or MLP sublayer) removed in turn.

    Writes prune_drop.json and one plot per task (prune_drop_<task>.png). Progress is saved after every
    evaluation; rerun with --resume after an interruption.
    """
    from layerprobe.evaluate import check_task_code  # lm-eval: only once a run starts
    from layerprobe.prune import run_prune_drop

    share = Share.parse(shard) if shard is not None else None
    spec = PruneSpec(
        model=loading.spec(model),
        tasks=split_task_names(task),
        **drop.spec_fields(),
        **evaluation.spec_fields(),
        **sequential.spec_fields(),
        **memory.spec_fields(),
        corpus=corpus.spec(),
    )
    task_code = check_task_code(list(spec.tasks), spec.include_path, spec.trust_task_code)  # before any weight
    directory = output.directory(model)
    ranks = world()
    if ranks.is_main:
        print_task_code(task_code)
    progress = RichProgress(output.quiet or not ranks.is_main, notes=ranks.is_main)
    with progress.running():
        result = run_prune_drop(spec, directory, resume=resume, progress=progress.callbacks(), shard=share, world=ranks)
    ranks.finish()  # every rank done: leave the launch together (no rank dies in teardown)
    if not ranks.is_main:
        return
    if result is None:
        out.print(
            f"wrote shard {share} to {RunDir(directory).shard_json}; join all shards with `layerprobe merge`",
            highlight=False,
            soft_wrap=True,
        )
        return
    report_prune_drop(result, directory, spec.log_samples)


def report_prune_drop(result: PruneDropResult, directory: Path, log_samples: bool = False) -> None:
    """Draw the ΔP plots, print the summary and the `wrote …` line (also after `layerprobe merge`).

    Plots at least as new as prune_drop.json (a finished run reused by `--resume`) are kept, not redrawn:
    drawing them was a fifth of the fixed cost of a resume that evaluates nothing.
    """
    run = RunDir(directory)
    expected = [p for path in run.task_plots("prune_drop", result.tasks) for p in (path, path.with_suffix(".pdf"))]
    plots = expected if _up_to_date(expected, run.prune_drop_json) else plot_prune_drop(result, directory)
    print_prune_summary(result)
    written = [*plots, *([RunDir(directory).samples_dir] if log_samples else [])]
    out.print(
        f"wrote {RunDir(directory).prune_drop_json}" + "".join(f", {p}" for p in written), highlight=False, markup=False
    )


def _up_to_date(paths: list[Path], source: Path) -> bool:
    """Whether every file of `paths` exists and was written no earlier than `source`."""
    try:
        written = source.stat().st_mtime
        return all(path.stat().st_mtime >= written for path in paths)
    except OSError:
        return False
