"""`layerprobe prune-drop`: the performance drop ΔP with each block (span, attention or MLP) removed in turn."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from layerprobe.cli.console import RichProgress, out, print_task_code
from layerprobe.cli.corpus_options import Corpus
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import (
    SCALE_PANEL,
    STATISTICS_PANEL,
    Evaluation,
    MaxStateMemory,
    ModelArg,
    ModelLoading,
    Output,
    Precision,
    RoundSize,
    Tasks,
    split_task_names,
)
from layerprobe.cli.summaries import print_prune_summary
from layerprobe.core import DEFAULT_STATE_BYTES, ENGINES, MULTIPLICITY_METHODS, PruneSpec, Share, parse_memory_size
from layerprobe.model import world
from layerprobe.plots import plot_prune_drop
from layerprobe.results import PruneDropResult, RunDir

if TYPE_CHECKING:  # mypy reads the choice as the str it is; Typer lists and checks the Literal's values
    Engine = str
    Multiplicity = str
else:
    Engine = Literal[ENGINES]
    Multiplicity = Literal[MULTIPLICITY_METHODS]


@takes_groups
def prune_drop(
    model: ModelArg,
    *,
    task: Tasks,
    layers: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="Blocks to remove, one at a time: 0-based inclusive ranges like 0-3,7 (default: all blocks).",
        ),
    ] = None,
    evaluation: Evaluation,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            rich_help_panel=SCALE_PANEL,
            help="auto: shared-prefix for loglikelihood tasks, simple "
            "otherwise; simple: one full evaluation per removed "
            "block; shared: reuse the baseline's states of blocks "
            "before the removed one.",
        ),
    ] = PruneSpec.engine,
    unit: Annotated[
        str,
        typer.Option(
            "--unit",
            help="What each variant removes: block (the whole block), attention or mlp (that sublayer's output "
            "is zero, as if its output projection were; MoE: every expert).",
        ),
    ] = PruneSpec.unit,
    span: Annotated[
        int,
        typer.Option(
            "--span",
            help="Remove n consecutive blocks [l, l+n) per variant (L-n+1 variants; --layers picks the starts l).",
        ),
    ] = PruneSpec.span,
    prefix_reuse: Annotated[
        bool,
        typer.Option(
            "--prefix-reuse/--no-prefix-reuse",
            rich_help_panel=SCALE_PANEL,
            help="Shared engine: compute the key/value cache of a prompt prefix many requests share (few-shot "
            "examples) once per variant and run only the rest of each request.",
        ),
    ] = PruneSpec.prefix_reuse,
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
    log_samples: Annotated[
        bool,
        typer.Option(
            "--log-samples",
            "--log_samples",
            rich_help_panel="Output",
            help="Also write every document's metric values, per variant, to <out>/samples/<task>.jsonl.",
        ),
    ] = PruneSpec.log_samples,
    angular: Annotated[
        Path | None,
        typer.Option(
            "--angular",
            help="angular.json of the same model (checked: id or weights fingerprint, architecture, blocks): "
            "rank agreement of d(x^l, x^(l+n)) with ΔP, n = --span (default: <out>/angular.json when it exists "
            "and measured this model).",
        ),
    ] = None,
    precision: Precision = PruneSpec.precision,
    round_size: RoundSize = PruneSpec.round_size,
    multiplicity: Annotated[
        Multiplicity,
        typer.Option(
            "--multiplicity",
            rich_help_panel=STATISTICS_PANEL,
            help="How the significance flags allow for testing every variant × task × metric of the run: holm "
            "(family-wise error 5 %), bh (false discovery rate 5 %, Benjamini–Hochberg) or none (each test at 5 %). "
            "Only the flags and p_adjusted change; every measured number is the same.",
        ),
    ] = PruneSpec.multiplicity,
    corpus: Corpus,
    loading: ModelLoading,
    max_state_memory: MaxStateMemory = None,
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
        layers=layers,
        **evaluation.spec_fields(),
        engine=engine,
        unit=unit,
        span=span,
        prefix_reuse=prefix_reuse,
        max_state_bytes=parse_memory_size(max_state_memory) or DEFAULT_STATE_BYTES,
        log_samples=log_samples,
        angular=str(angular) if angular else None,
        corpus=corpus.spec(),
        precision=precision,
        round_size=round_size,
        multiplicity=multiplicity,
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
