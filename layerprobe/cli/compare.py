"""`layerprobe compare`: gate a candidate's results against a baseline's (exit 0 pass, 1 regression, 2 bad input)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from layerprobe.cli.console import err, out, safe_text
from layerprobe.cli.options import Quiet
from layerprobe.core import LayerprobeError, OutputError
from layerprobe.gate import (
    FORMATS,
    build_table,
    check_format,
    compare_paths,
    load_rules,
    plot_verdict,
    render,
    render_junit,
)
from layerprobe.results import LAZY_THRESHOLD, write_text

if TYPE_CHECKING:  # mypy reads the choice as the str it is; Typer lists and checks the Literal's values
    Format = str
else:
    Format = Literal[FORMATS]

REGRESSION = 1  # the exit status of a failed gate; a bad input exits with 2 like every command's mistakes


def compare(
    baseline: Annotated[Path, typer.Argument(help="Baseline result JSON, or a run directory.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate result JSON of the same kind, or a run directory.")],
    rules_file: Annotated[
        Path | None,
        typer.Option("--rules", help="Rules TOML (sections angular, prune_drop, depth); flags override it."),
    ] = None,
    lazy_threshold: Annotated[
        float | None, typer.Option(help=f"A block is lazy when d(x^l, x^l+1) is below this (default {LAZY_THRESHOLD}).")
    ] = None,
    max_lazy_increase: Annotated[int | None, typer.Option(help="Extra lazy blocks allowed (default 0).")] = None,
    adjacent_tolerance: Annotated[
        float | None, typer.Option(help="Allowed fall of the mean adjacent distance (default 0.02).")
    ] = None,
    max_drop: Annotated[
        float | None, typer.Option(help="Allowed worsening of a task's full-model score (absolute, default 0.01).")
    ] = None,
    se_factor: Annotated[
        float | None, typer.Option(help="A layer's ΔP may worsen by this × combined stderr (default 2.0).")
    ] = None,
    max_drop_upper: Annotated[
        float | None,
        typer.Option(
            help="Non-inferiority margin: pass only when the one-sided 95 % upper bound of a task's full-model "
            "accuracy drop, from both runs' paired answers (prune-drop --log-samples), is at most this (default: off)."
        ),
    ] = None,
    max_flip_rate: Annotated[
        float | None,
        typer.Option(
            help="Generating tasks: the share of documents whose full-model answer (per filter) changed between "
            "the runs may be at most this; needs prune-drop --log-samples on both sides (default: off)."
        ),
    ] = None,
    max_rms_growth: Annotated[
        float | None, typer.Option(help="depth: RMS(x^L)/RMS(x^0) may grow by this factor over the baseline's (1.25).")
    ] = None,
    max_heal_gap: Annotated[
        float | None,
        typer.Option(
            help="heal: the healed model may be at most this much worse than its original on held-out "
            "--heal-metric (one-sided 95 % bound; no rule without it)."
        ),
    ] = None,
    heal_metric: Annotated[
        str | None, typer.Option(help="heal: the held-out metric --max-heal-gap bounds: nll, kl or top1_agreement.")
    ] = None,
    output_format: Annotated[Format, typer.Option("--format", help="How the verdict is written on stdout.")] = "table",
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML here.")] = None,
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Draw compare.png (compare_<kind>.png for several kinds).")
    ] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Plot directory (default: next to the candidate result).")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Gate a candidate's results against a baseline's: exit 0 pass, 1 regression, 2 bad input."""
    check_format(output_format)
    rules = load_rules(
        rules_file,
        lazy_threshold=lazy_threshold,
        max_lazy_increase=max_lazy_increase,
        adjacent_tolerance=adjacent_tolerance,
        max_drop=max_drop,
        se_factor=se_factor,
        max_drop_upper=max_drop_upper,
        max_flip_rate=max_flip_rate,
        max_rms_growth=max_rms_growth,
        max_heal_gap=max_heal_gap,
        heal_metric=heal_metric,
    )
    verdict = compare_paths(baseline, candidate, rules)
    if output_format == "table":
        out.print(build_table(verdict))
    else:
        text = render(verdict, output_format)
        typer.echo(safe_text(text if text.endswith("\n") else text + "\n"), nl=False)
    if junit is not None:
        try:
            write_text(junit, render_junit(verdict))
        except (OSError, OutputError) as exc:
            reason = exc.reason if isinstance(exc, OutputError) else exc.strerror or exc
            raise LayerprobeError(f"Cannot write --junit {junit}: {reason}") from exc
        err.print(f"wrote {junit}", highlight=False, markup=False, soft_wrap=True)
    if plot:
        try:
            for path in plot_verdict(verdict, out_dir):
                err.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)
        except (LayerprobeError, OSError) as exc:  # a plot is a courtesy: it must not change the exit status
            err.print(
                f"warning: no plot: {getattr(exc, 'message', exc)}", style="yellow", highlight=False, markup=False
            )
    if not verdict.passed:
        raise typer.Exit(REGRESSION)
