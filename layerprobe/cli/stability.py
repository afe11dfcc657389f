"""`layerprobe stability`: how much the block ranking, and the blocks chosen for removal, depend on the data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from layerprobe.cli.console import err, out
from layerprobe.cli.options import Quiet, hold_out, model_slug
from layerprobe.core import DEFAULT_DRAWS, DEFAULT_SEED, LayerprobeError, check_output_dir
from layerprobe.plots import plot_stability
from layerprobe.results import RunDir, StabilityResult, write_json, write_text
from layerprobe.review import (
    DIRECTION,
    data_text,
    pair_name,
    ranked_by,
    ranking_text,
    resampled_text,
    stability_markdown,
    value_with_interval,
)
from layerprobe.review import stability as compute_stability

SHOWN_KS = 3  # Jaccard columns of the terminal table: k = 1, ⌊n/4⌋, ⌊n/2⌋ (the markdown has every k)


def stability(
    results: Annotated[
        list[Path],
        typer.Argument(help="Two or more angular.json / prune_drop.json of one model (kinds may be mixed)."),
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Output directory (default: ./layerprobe-out/<model>/)."),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="The prune-drop task to rank by where a file has several (default: its first)."),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option("--metric", help="The metric whose ΔP ranks the blocks (default: the task's primary metric)."),
    ] = None,
    draws: Annotated[int, typer.Option("--draws", help="Bootstrap draws per pair of inputs.")] = DEFAULT_DRAWS,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap draws.")] = DEFAULT_SEED,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Draw stability.png / stability.pdf.")] = True,
    quiet: Quiet = False,
) -> None:
    """How stable the block ranking is across calibration data: pairwise τ, ρ and lowest-k overlap, with 95 % CIs.

    Blocks are ranked from most to least prunable (angular: smallest d(x^l, x^l+1) first; prune-drop: smallest
    score lost first). Writes stability.json, stability.md and the matrix plot stability.png / stability.pdf.
    """
    if out_dir is not None:
        hold_out(check_output_dir(out_dir))  # before any file is read
    result = compute_stability(results, task=task, metric=metric, draws=draws, seed=seed)
    directory = hold_out(
        check_output_dir(out_dir if out_dir is not None else Path("layerprobe-out") / model_slug(result.model.id))
    )
    run = RunDir(directory)
    written = [
        write_json(run.stability_json, result.to_dict()),
        write_text(run.stability_md, stability_markdown(result)),
    ]
    if plot:
        try:
            written += plot_stability(result, directory)
        except (LayerprobeError, OSError) as exc:  # a plot is a courtesy: the numbers are written already
            err.print(
                f"warning: no plot: {getattr(exc, 'message', exc)}", style="yellow", highlight=False, markup=False
            )
    print_stability(result)
    out.print("wrote " + ", ".join(str(p) for p in written), highlight=False, markup=False)


def print_stability(result: StabilityResult) -> None:
    """The inputs, then one row per pair: τ-b and ρ with intervals, the Jaccard overlap at a few k."""
    cell = value_with_interval
    out.print(
        f"[bold]{escape(result.model.label)}[/]: ranking stability over {len(result.inputs)} inputs, "
        f"{len(result.blocks)} blocks",
        highlight=False,
    )
    inputs = Table()
    for column in ("input", "ranked by", "measured on", "intervals from", "most prunable first"):
        inputs.add_column(column)
    for item in result.inputs:
        inputs.add_row(
            *(escape(t) for t in (item.label, ranked_by(item), data_text(item), resampled_text(item))),
            ranking_text(item),
        )
    out.print(inputs)
    ks = _shown_ks(result.ks)
    pairs = Table()
    pairs.add_column("pair")
    pairs.add_column("Kendall τ-b [95 %]", justify="right")
    pairs.add_column("Spearman ρ [95 %]", justify="right")
    for k in ks:
        pairs.add_column(f"Jaccard k={k} (chance {result.jaccard_chance[k - 1]:.2f})", justify="right")
    for pair in result.pairs:
        pairs.add_row(
            escape(pair_name(result, pair)) + ("" if pair.method == "bootstrap" else f" [dim]({pair.method})[/]"),
            cell(pair.kendall_tau_b, pair.kendall_tau_b_ci95),
            cell(pair.spearman_rho, pair.spearman_rho_ci95),
            *(cell(pair.jaccard_lowest_k[k - 1], pair.jaccard_lowest_k_ci95[k - 1]) for k in ks),
        )
    out.print(pairs)
    out.print(DIRECTION, highlight=False, markup=False)
    for note in result.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _shown_ks(ks: list[int]) -> list[int]:
    """The k shown in the terminal: 1, ⌊n/4⌋ and ⌊n/2⌋, distinct and ascending."""
    if not ks:
        return []
    return sorted({ks[0], ks[len(ks) // 2], ks[-1]})[:SHOWN_KS]
