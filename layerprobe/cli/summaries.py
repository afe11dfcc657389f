"""The closing summaries of angular, depth, prune-drop and prune-curve: a heading, a table and one line, on stdout.

Warnings about the result (non-finite states, unmeasured entries) go to stderr. Every value printed
comes from the result object; every interval printed is a 95 % interval (± 1.96 stderr where the result
records a stderr), labelled as such.
"""

from __future__ import annotations

import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from layerprobe.cli.console import err, out
from layerprobe.core import DEFAULT_MULTIPLICITY
from layerprobe.export import weight_bytes
from layerprobe.results import (
    AngularResult,
    AngularSummary,
    AnswerFlips,
    DepthResult,
    FlipRate,
    MetricDrop,
    PruneCurveResult,
    PruneDropResult,
    agreement_span,
    depth_summary,
    method_label,
    span_distance_label,
    variant_label,
)
from layerprobe.stats import Z95, score_interval95

# Shown beside the primary metric when a task reports them (`--task corpus`: KL and top-1 agreement
# beside NLL), each pruned model's value with its paired 95 % interval.
COMPANION_COLUMNS = {"kl": "KL(base ‖ pruned) [95 % CI]", "top1_agreement": "top-1 agreement [95 % CI]"}


def print_angular_summary(result: AngularResult) -> None:
    """An AngularResult on stdout: d(x^l, x^l+1) per block with bars and lazy marks, then one summary line.

    Unmeasured entries (every position non-finite) are shown as such and never chosen as "most similar";
    with standard errors, the line says whether the most similar block is a clear choice.
    """
    summary = result.summary or result.summarize()
    adjacent = summary["adjacent"]
    adjacent_se = summary.get("adjacent_stderr")
    averaged = result.data["positions_averaged"]
    seen = (averaged if isinstance(averaged, int) else 0) + result.nonfinite_tokens
    out.print(
        f"[bold]{escape(result.model.heading)}[/]: d(x^l, x^(l+1)) over {seen:,} positions", highlight=False
    )  # a heading line, not a table title: titles wrap to the table's width
    table = Table()
    table.add_column("block l", justify="right")
    table.add_column("d(x^l, x^l+1)", justify="right")
    if adjacent_se:
        table.add_column("95 % CI", justify="right")
    table.add_column("", justify="left")
    width = 30
    skipped = set(result.model.skipped_blocks or ())  # mllama's image-only blocks: a text-only pass skips them
    for layer, value in enumerate(adjacent):
        if layer in skipped:
            table.add_row(str(layer), "skipped", *([""] if adjacent_se else []), "runs only with an image")
            continue
        if not math.isfinite(value):
            table.add_row(str(layer), "unmeasured", *([""] if adjacent_se else []), "[yellow]non-finite states[/]")
            continue
        bar = "█" * max(0, round(value * width * 2))
        lazy = " [yellow]lazy[/]" if layer in summary["lazy_layers"] else ""
        interval = [interval_text(value, adjacent_se[layer])] if adjacent_se else []
        table.add_row(str(layer), f"{value:.4f}", *interval, f"[cyan]{bar[:width]}[/]{lazy}")
    out.print(table)
    out.print(
        f"{_most_similar_text(summary)}; {summary['lazy_count']} of {len(adjacent)} blocks below "
        f"{summary['lazy_threshold']}; {result.tokens_per_second:,.0f} tokens/s",
        highlight=False,
        markup=False,
    )
    if result.nonfinite_tokens:
        err.print(
            f"[yellow]warning:[/] {result.nonfinite_tokens} positions had NaN/inf states; each entry leaves out "
            "only the positions where one of its two states is non-finite (try --dtype float32)"
        )
    unmeasured = [(i, j) for i, j in summary.get("unmeasured") or [] if i not in skipped]
    if unmeasured:
        cells = ", ".join(f"d(x^{i}, x^{j})" for i, j in unmeasured[:6])
        more = f" and {len(unmeasured) - 6} more" if len(unmeasured) > 6 else ""
        err.print(
            f"[yellow]warning:[/] {len(unmeasured)} entries could not be measured (no finite "
            f"position): {escape(cells)}{more}; the summary skips them"
        )


def _most_similar_text(summary: AngularSummary) -> str:
    """The most similar adjacent pair with its stderr, and whether other blocks are as good within noise."""
    choice = summary["most_redundant"].get("1")
    if choice is None:
        return "no adjacent pair could be measured"
    layer = choice["layer"]
    se = choice.get("stderr")
    text = f"most similar adjacent pair: x^{layer} → x^{layer + 1} (d = {choice['distance']:.4f}"
    text += f", 95 % CI {interval_text(choice['distance'], se)})" if se is not None and math.isfinite(se) else ")"
    if choice.get("clear") is True:
        text += ", a clear choice"
    elif choice.get("clear") is False:
        others = [l for l in choice["candidates"] or [] if l != layer]
        text += f", not clear: block(s) {others} within {summary['significance_z']:g} stderr of it"
    return text


def print_prune_summary(result: PruneDropResult) -> None:
    """A PruneDropResult on stdout: per task, the baseline and a table of removed blocks by ΔP, worst first.

    With paired uncertainty, each ΔP shows its paired 95 % interval and is coloured (red: hurts, green:
    helps) only when that interval excludes 0; older results colour against the baseline's 95 % interval.
    """
    for name, task in result.tasks.items():
        metric_name = task.primary_metric
        metric = task.metrics[metric_name]
        bounds = score_interval95(metric_name, metric.baseline, metric.baseline_stderr, task.samples)
        ci = "" if bounds is None else f" (95 % CI [{bounds[0]:.4f}, {bounds[1]:.4f}])"
        out.print(
            f"[bold]{escape(f'{result.model.heading} · {name} · {metric_name}')}[/]: "
            f"baseline {metric.baseline:.4f}{ci}",
            highlight=False,
        )
        table = Table()
        table.add_column(variant_label(result.settings), justify="right")
        table.add_column(escape(metric_name), justify="right")
        table.add_column("ΔP", justify="right")
        if metric.paired:
            table.add_column("anytime 95 % CI" if metric.sequential else "paired 95 % CI", justify="right")
        if metric.sequential:
            table.add_column("documents", justify="right")
            table.add_column("stop", justify="left")
        companions = {n: task.metrics[n] for n in COMPANION_COLUMNS if n in task.metrics and n != metric_name}
        for companion in companions:
            table.add_column(COMPANION_COLUMNS[companion], justify="right")
        flips = task.flip_rate or {}
        for filter_name in flips:
            table.add_column(escape(f"answers changed ({filter_name})"), justify="right")
        sign = 1 if metric.higher_is_better else -1
        order = sorted(range(len(metric.layers)), key=lambda i: sign * metric.delta[i])
        for i in order:
            delta = metric.delta[i]
            cells = [str(metric.layers[i]), f"{metric.pruned[i]:.4f}"]
            if metric.paired:
                significant = (metric.significant or [None] * len(metric.layers))[i]
                colour = "dim" if not significant else "red" if sign * delta < 0 else "green"
                interval = (metric.interval95 or [None] * len(metric.layers))[i]
                cells += [
                    f"[{colour}]{delta:+.4f}[/]",
                    "—" if interval is None else f"[{interval[0]:+.4f}, {interval[1]:+.4f}]",
                ]
                if metric.sequential:
                    cells += [str((metric.items or [None] * len(metric.layers))[i] or "—")]
                    cells += [(metric.stop or [None] * len(metric.layers))[i] or "—"]
            else:
                colour = "red" if sign * delta < -Z95 * (metric.baseline_stderr or 0) else "green"
                cells.append(f"[{colour}]{delta:+.4f}[/]")
            cells += [_companion_cell(other, metric.layers[i]) for other in companions.values()]
            cells += [_flip_cell(rate, metric.layers[i]) for rate in flips.values()]
            table.add_row(*cells)
        out.print(table)
        if metric.paired:
            method = "paired bootstrap over documents" if metric.delta_method == "paired_bootstrap" else "paired"
            method = "sequential, anytime-valid" if metric.sequential else method
            count = sum(bool(s) for s in metric.significant or [])
            out.print(
                f"{count} of {len(metric.layers)} removals change {metric_name} beyond noise "
                f"({_significance_text(result, method)})",
                highlight=False,
            )
        agreement = (task.agreement or {}).get(metric_name)
        if agreement:
            print_agreement(metric_name, agreement, agreement_span(agreement, result.settings))
        if task.nonfinite:
            err.print(
                f"[yellow]warning:[/] {escape(name)}: {task.nonfinite} inputs gave NaN/inf outputs over all "
                "evaluations (scored as unanswerable; try --dtype float32)"
            )
    out.print(f"engine: {escape(result.engine)}; {result.run.seconds or 0:,.1f} s", highlight=False)


def _companion_cell(metric: MetricDrop, layer: int) -> str:
    """A companion metric's value for the variant `layer`, with its paired 95 % interval when recorded."""
    if layer not in metric.layers:
        return "—"
    i = metric.layers.index(layer)
    value = metric.pruned[i]
    ci = (metric.delta_ci95 or [None] * len(metric.layers))[i]
    if ci is None:
        return f"{value:.4f}"
    return f"{value:.4f} [{metric.baseline + ci[0]:.4f}, {metric.baseline + ci[1]:.4f}]"


def interval_text(value: float, stderr: float | None) -> str:
    """The 95 % interval value ± 1.96 stderr as `[low, high]` (4 decimals); "—" without a finite stderr."""
    if stderr is None or not math.isfinite(stderr):
        return "—"
    return f"[{value - Z95 * stderr:.4f}, {value + Z95 * stderr:.4f}]"


def _flip_cell(rate: FlipRate, layer: int) -> str:
    """`0.40 [0.20, 0.64]`: the share of answers that differ from the full model's, with its Wilson 95 % interval."""
    if layer not in rate.layers:
        return "—"
    k = rate.layers.index(layer)
    low, high = rate.ci95[k]
    return f"{rate.rate[k]:.2f} [{low:.2f}, {high:.2f}]"


def _answers_cell(flips: AnswerFlips | None) -> str:
    """`0.40 [0.20, 0.64]`: one set's share of changed answers (one filter), with its Wilson 95 % interval."""
    return "—" if flips is None else f"{flips.rate:.2f} [{flips.ci95[0]:.2f}, {flips.ci95[1]:.2f}]"


MULTIPLICITY_NAMES = {"holm": "Holm-adjusted", "bh": "BH-adjusted (false discovery rate)", "none": "unadjusted"}


def _significance_text(result: PruneDropResult, method: str) -> str:
    """How the `significant` flags were decided: the adjustment and its family, or the plain 95 % CI of older files."""
    family = result.family
    if family is None:
        return f"{method} 95 % CI"
    adjustment = str(result.settings.get("multiplicity") or DEFAULT_MULTIPLICITY)
    return f"{MULTIPLICITY_NAMES.get(adjustment, adjustment)}, family of {family} tests; {method} p-values"


def print_agreement(metric_name: str, agreement: dict[str, Any], span: int = 1) -> None:
    """One line: Spearman ρ between d(x^l, x^(l+span)) and ΔP with its interval, and the top-k overlap."""
    rho, ci = agreement.get("spearman"), agreement.get("spearman_ci95")
    rho_text = "undefined (a constant side)" if rho is None else f"{rho:+.2f}"
    if ci is not None:
        rho_text += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    if agreement.get("informative") is False:
        distinct = agreement.get("distinct") or ["?", "?"]
        rho_text += f" (uninformative: {distinct[1]} distinct ΔP values, {distinct[0]} distinct distances)"
    overlap = agreement.get("top_k_overlap")
    overlap_text = "" if overlap is None else f"; top-{agreement['top_k']} overlap {overlap:.0%}"
    out.print(
        f"agreement with angular: Spearman ρ({span_distance_label(span)}, ΔP {metric_name}) = {rho_text} "
        f"(the measures agree when ρ is {agreement.get('agree_when', 'negative')}){overlap_text}",
        highlight=False,
    )


def print_depth_summary(result: DepthResult) -> None:
    """A DepthResult: the placement line, then per block its label, RMS, relative updates and gradient norm."""
    summary = result.summary or depth_summary(result)
    out.print(
        f"[bold]{escape(result.model.heading)}[/]: {escape(result.placement.summary)} "
        f"(over {result.data['positions_averaged']:,} positions)",
        highlight=False,
    )
    table = Table()
    for name in ("block l", "placement", "RMS x^l", "‖Δx‖/‖x‖"):
        table.add_column(name, justify="right" if name != "placement" else "left")
    subs = result.sublayers
    if subs:
        table.add_column("attention", justify="right")
        table.add_column("MLP", justify="right")
    if result.grad is not None:
        table.add_column("‖∇θ_l‖", justify="right")
    for l in range(result.num_layers):
        row = [
            str(l),
            escape(result.placement.blocks[l].label),
            f"{result.rms.mean[l]:.4g}",
            f"{result.update.mean[l]:.4f}",
        ]
        if subs:
            row += [f"{subs[k]['relative'].mean[l]:.4f}" for k in ("attention", "mlp")]
        if result.grad is not None:
            grad = result.grad.block[l]
            row.append(f"{grad:.3g}" if grad is not None else "—")
        table.add_row(*row)
    out.print(table)
    growth = summary["rms_growth"]
    growth_text = f"{growth:.3g}×" if growth is not None else "n/a"
    line = f"residual RMS x^{result.num_layers} / x^0 = {growth_text}"
    if result.grad is not None:
        line += (
            f"; {escape(result.grad.loss)} loss {result.grad.mean_loss:.4f} over {result.grad.positions:,} positions"
        )
    out.print(line, highlight=False)
    if result.nonfinite_tokens:
        err.print(
            f"[yellow]warning:[/] {result.nonfinite_tokens} positions had NaN/inf states and were "
            "left out (try --dtype float32)"
        )


def print_curve_summary(result: PruneCurveResult) -> None:
    """A PruneCurveResult on stdout: per task, a table of every method × n with 95 % intervals, then the costs.

    The task that drove the choice shows the driving metric, every other task its primary metric; the
    removed units are listed as blocks (`3`) and sublayers (`3.attn`, `3.mlp`). A sequential run
    (`--precision`) shows each set's anytime 95 % interval, the documents it was scored on and why it stopped.
    """
    sequential = result.settings.get("precision") is not None
    for task, baseline in result.baseline.items():
        name = result.shown_metric(task)
        base = baseline[name]
        ci = "" if base.ci95 is None else f" (95 % CI {_interval(base.ci95, signed=False)})"
        scored = "" if base.items is None else f" on {base.items} documents"
        out.print(
            f"[bold]{escape(f'{result.model.heading} · {task} · {name}')}[/]: full model {base.value:.4f}{ci}{scored}",
            highlight=False,
        )
        table = Table()
        for column in ("method", "n", "removed"):
            table.add_column(column, justify="left" if column != "n" else "right")
        for column in (escape(name), "95 % CI", "ΔP", "anytime 95 % CI" if sequential else "paired 95 % CI"):
            table.add_column(column, justify="right")
        if sequential:
            table.add_column("documents", justify="right")
            table.add_column("stop", justify="left")
        filters = result.answer_filters(task)
        for filter_name in filters:
            table.add_column(escape(f"answers changed ({filter_name})"), justify="right")
        for method, strategy in result.methods.items():
            for n, chosen in sorted(strategy.sets.items()):
                score = chosen.scores[task][name]
                removed = [str(b) for b in chosen.blocks]
                removed += [f"{b}.{'attn' if kind == 'attention' else kind}" for b, kind in chosen.sublayers]
                flips = chosen.flip_rate.get(task, {})
                table.add_row(
                    escape(method_label(method)),
                    str(n),
                    escape(",".join(removed)),
                    f"{score.value:.4f}",
                    _interval(score.ci95, signed=False),
                    f"{score.delta:+.4f}",
                    _interval(score.interval),
                    *([] if not sequential else [str(score.items or "—"), score.stop or "—"]),
                    *(_answers_cell(flips.get(f)) for f in filters),
                )
        out.print(table)
    for method, strategy in result.methods.items():
        cost = strategy.cost
        if cost.get("variants_scored") or cost.get("block_tokens"):
            reused = f" ({cost['reused']} reused from another method)" if cost.get("reused") else ""
            documents = f" on {cost['documents']:,} documents" if isinstance(cost.get("documents"), int) else ""
            scored = f"{cost.get('variants_scored', 0):,} sets scored{documents}{reused}"
            out.print(
                f"{escape(method_label(method))}: choosing cost {scored}, "
                f"{cost.get('block_tokens', 0):,} block × token evaluations",
                highlight=False,
            )


def _interval(bounds: list[float] | None, signed: bool = True) -> str:
    """A 95 % interval as text ("—" where there is none)."""
    form = "+.4f" if signed else ".4f"
    return "—" if bounds is None else f"[{bounds[0]:{form}}, {bounds[1]:{form}}]"


def _size(n: int) -> str:
    """Bytes in decimal units (1 MB = 10^6 B), as `gain` reports them."""
    scaled, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB"):
        if scaled < 1000 or unit == "GB":
            break
        scaled /= 1000
    return f"{n:,} B" if unit == "B" else f"{scaled:.1f} {unit}"


def print_cut_ratios(source: str, saved: str | None, before: int, after: int) -> None:
    """What a cut buys, at once: parameters and weight bytes as ratios to the source; speed is `gain`'s job.

    Bytes are counted only where both checkpoints are local directories (a hub id has none on disk here).
    """
    parts = [f"parameters {before:,} → {after:,} ({after / before:.1%})"]
    old, new = weight_bytes(source), (weight_bytes(saved) if saved is not None else None)
    if old and new is not None:
        parts.append(f"weight bytes {_size(old)} → {_size(new)} ({new / old:.1%})")
    command = f"layerprobe gain {source} {saved} --out DIR" if saved is not None else "layerprobe gain"
    out.print(f"{'; '.join(parts)}; for speed and memory run `{command}`", highlight=False, markup=False)
