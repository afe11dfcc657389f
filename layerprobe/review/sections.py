"""One run's part of the report: provenance, the angular heatmap, ΔP bars, agreement, pruning curves, depth.

Every section is there for every run (a kind the directory lacks says so), so a reader and a test find
the same structure whatever was measured. Every string that comes from a result file is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from layerprobe.plots import depth_figure, figure_svg, heal_figure, prune_curve_figure, prune_drop_figure
from layerprobe.results import (
    HEAL_METRICS,
    HEAL_MODELS,
    REVIEWED_FILES,
    AngularResult,
    DepthResult,
    HealResult,
    ModelInfo,
    PruneCurveResult,
    PruneDropResult,
    RunInfo,
    agreement_span,
    depth_summary,
    span_distance_label,
)
from layerprobe.review.heatmap import heatmap_svg
from layerprobe.review.runs import RunResults
from layerprobe.review.table import number, with_interval

SECTIONS = ("provenance", "angular", "prune-drop", "agreement", "prune-curve", "depth", "heal")
TITLES = {
    "provenance": "Provenance",
    "angular": "Angular distance between blocks",
    "prune-drop": "ΔP: what removing each block costs",
    "agreement": "Do angular distance and ΔP agree?",
    "prune-curve": "Pruning curves",
    "depth": "Depth: why blocks are lazy",
    "heal": "Heal: original, pruned and healed on held-out text",
}


def esc(value: object) -> str:
    """Any value as HTML text, quotes included: the page's one escaping of what result files hold."""
    return html.escape(str(value), quote=True)


def section(prefix: str, kind: str, body: str) -> str:
    """A run's section of `kind` (id `<prefix>-<kind>`), with its heading."""
    return f'<section class="{kind}" id="{prefix}-{kind}">\n<h3>{TITLES[kind]}</h3>\n{body}\n</section>'


def missing(run: RunResults, kind: str) -> str:
    """What a section says when the run directory lacks the file of `kind`."""
    where = f'<span class="path">{esc(run.directory)}</span>'
    return f'<p class="missing">Not measured: no {esc(REVIEWED_FILES[kind])} in {where}.</p>'


def run_sections(run: RunResults, prefix: str) -> str:
    """Every section of one run, in `SECTIONS` order."""
    bodies = {
        "provenance": provenance(run),
        "angular": angular_body(run.angular, prefix) if run.angular else missing(run, "angular"),
        "prune-drop": drop_body(run.prune_drop, prefix) if run.prune_drop else missing(run, "prune_drop"),
        "agreement": agreement_body(run.prune_drop) if run.prune_drop else missing(run, "prune_drop"),
        "prune-curve": curve_body(run.prune_curve, prefix) if run.prune_curve else missing(run, "prune_curve"),
        "depth": depth_body(run.depth, prefix) if run.depth else missing(run, "depth"),
        "heal": heal_body(run.heal, prefix) if run.heal else missing(run, "heal"),
    }
    return "\n".join(section(prefix, kind, bodies[kind]) for kind in SECTIONS)


def facts(rows: Sequence[tuple[str, object]]) -> str:
    """A definition list of the rows whose value is known."""
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v not in (None, "", {}))
    return f'<dl class="facts">{items}</dl>'


def provenance(run: RunResults) -> str:
    """The model (id, revision, commit, architecture…), and per result file its data, duration and versions."""
    model: ModelInfo = run.model
    body = facts(
        [
            ("model", model.label),
            ("revision", model.revision),
            ("commit", model.commit),
            ("architecture", f"{model.architecture} ({model.model_type}, {model.kind})"),
            ("blocks L", model.num_layers),
            ("dtype", model.dtype),
            ("read from", model.path),
            ("run directory", run.directory),
        ]
    )
    rows = []
    for kind, path in run.files.items():
        result = getattr(run, kind)
        info: RunInfo = result.run
        data = _data_text(result)
        versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
        seconds = f"{info.seconds:.1f} s" if info.seconds is not None else "—"
        rows.append(
            f'<tr><td class="file">{esc(path.name)}</td><td>{esc(data)}</td><td>{esc(info.started_at or "—")}</td>'
            f'<td class="num">{esc(seconds)}</td><td>{esc(info.device or "—")}</td><td>{esc(versions)}</td></tr>'
        )
    table = (
        '<div class="scroll"><table class="files"><thead><tr><th>file</th><th>data</th><th>started</th>'
        '<th class="num">duration</th><th>device</th><th>versions</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
    )
    return body + table


def _data_text(result: AngularResult | PruneDropResult | DepthResult | PruneCurveResult | HealResult) -> str:
    """What the result measured on: the corpus (angular, depth, heal) or the tasks and settings (prune-drop, curve)."""
    if isinstance(result, HealResult):
        healed = result.data
        calibration, held = healed.get("calibration") or {}, healed.get("held_out") or {}
        return (
            f"{healed.get('dataset')}; {calibration.get('tokens')} calibration + {held.get('tokens')} held-out "
            f"tokens, windows of {healed.get('seq_len')}"
        )
    if isinstance(result, AngularResult | DepthResult):
        data = result.data
        parts = [data.get("dataset"), data.get("config"), data.get("split")]
        corpus = "/".join(str(p) for p in parts if p)
        tokens = data.get("tokens")
        shown = f"{tokens:,}" if isinstance(tokens, int) else tokens
        return f"{corpus}; {shown} tokens, windows of {data.get('seq_len')}, positions={data.get('positions')}"
    tasks = ", ".join(result.tasks)
    limit = result.settings.get("limit")
    return f"tasks {tasks}" + (f"; limit {limit}" if limit is not None else "")


def angular_body(result: AngularResult, prefix: str) -> str:
    """The heatmap (hover: value ± stderr) and the summary line."""
    summary = result.summary or result.summarize()
    adjacent_se = summary["adjacent_stderr"]
    lazy = ", ".join(map(str, summary["lazy_layers"])) or "none"
    choice = summary["most_redundant"].get("1")
    similar = "no adjacent pair measured"
    if choice is not None:
        se = f" ± {choice['stderr']:.2g}" if choice["stderr"] is not None else ""
        clear = {True: ", a clear choice", False: f", within noise: blocks {choice['candidates']}", None: ""}
        pair = f"x^{choice['layer']} → x^{choice['layer'] + 1}"
        similar = f"most similar adjacent pair {pair} (d = {choice['distance']:.4f}{se}){clear[choice['clear']]}"
    threshold = summary["lazy_threshold"]
    lines = [
        similar,
        f"{summary['lazy_count']} of {result.num_layers} blocks lazy (d(x^l, x^(l+1)) < {threshold:g}): {lazy}",
        f"mean adjacent distance {number(summary['mean_adjacent'])}",
    ]
    if adjacent_se is None:
        lines.append("no standard errors in this file (written before they existed)")
    text = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return (
        '<div class="grid">'
        f'<figure class="heatmap">{heatmap_svg(result, prefix)}'
        f'<output class="readout" id="{prefix}-readout" aria-live="polite">hover a cell: d ± standard error</output>'
        "<figcaption>Start l across, span n up; red box: each span's minimum (Gromov et al.'s choice), dashed "
        "orange: starts not significantly above it (95 %).</figcaption></figure>"
        f"<ul>{text}</ul></div>"
    )


def drop_body(result: PruneDropResult, prefix: str) -> str:
    """One ΔP bar figure per task (primary metric, paired 95 % intervals)."""
    figures = []
    for k, task in enumerate(result.tasks):
        metric = result.tasks[task].primary_metric
        label = f"ΔP per removed block, {task} {metric}"
        svg = figure_svg(prune_drop_figure(result, task), f"{prefix}-drop{k}", label)
        figures.append(
            f"<figure>{svg}<figcaption>{esc(label)}; error bars: paired 95 % CI of ΔP.</figcaption></figure>"
        )
    return f'<div class="grid">{"".join(figures)}</div>'


def agreement_body(result: PruneDropResult) -> str:
    """Per task and metric: Spearman ρ between d(x^l, x^(l+n)) and ΔP with its 95 % interval, and the top-k overlap.

    n is the run's span (`--span`): the distance column says which distance was compared.
    """
    rows = []
    for task, drop in result.tasks.items():
        for metric, record in (drop.agreement or {}).items():
            ci = record.get("spearman_ci95")
            rho = record.get("spearman")
            shown = "undefined" if not isinstance(rho, int | float) or not math.isfinite(rho) else f"{rho:+.2f}"
            if isinstance(ci, list) and len(ci) == 2:
                shown += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
            overlap = record.get("top_k_overlap")
            label = span_distance_label(agreement_span(record, result.settings))
            rows.append(
                f'<tr><td>{esc(task)}</td><td>{esc(metric)}</td><td>{esc(label)}</td><td class="num">{esc(shown)}</td>'
                f'<td>{esc(record.get("agree_when"))}</td><td class="num">{esc(record.get("top_k"))}</td>'
                f'<td class="num">{esc(number(overlap if isinstance(overlap, int | float) else None, 2))}</td>'
                f"<td>{esc(record.get('most_redundant_by_distance'))}</td><td>{esc(record.get('least_harmful_by_delta'))}</td></tr>"
            )
    if not rows:
        return (
            '<p class="missing">No agreement recorded: prune-drop ran without an angular.json of the same model '
            "in its --out (or --angular).</p>"
        )
    return (
        '<div class="scroll"><table class="agreement"><thead><tr><th>task</th><th>metric</th><th>d</th>'
        '<th class="num">Spearman ρ(d, ΔP) [95 % CI]</th><th>agree when ρ is</th><th class="num">k</th>'
        '<th class="num">top-k overlap</th><th>most redundant by d</th><th>least harmful by ΔP</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
    )


def curve_body(result: PruneCurveResult, prefix: str) -> str:
    """One pruning-curve figure per task (the metric that drove the choice, else its first; a line per method)."""
    figures = []
    for k, task in enumerate(result.baseline):
        label = f"pruning curve, {task}"
        svg = figure_svg(prune_curve_figure(result, task), f"{prefix}-curve{k}", label)
        figures.append(f"<figure>{svg}<figcaption>{esc(label)}; band: paired 95 % interval.</figcaption></figure>")
    return f'<div class="grid">{"".join(figures)}</div>'


def depth_body(result: DepthResult, prefix: str) -> str:
    """The depth figure and its summary: placement, residual growth, gradient ratio."""
    summary = result.summary or depth_summary(result)
    lines = [
        f"placement: {result.placement.summary}",
        f"residual growth RMS(x^L)/RMS(x^0) = {number(summary.get('rms_growth'), 3)}",
    ]
    if result.grad is not None:
        lines.append(f"gradient norm last/first block = {number(summary.get('grad_ratio_last_first'), 3)}")
    svg = figure_svg(depth_figure(result), f"{prefix}-depth", "depth figure: residual growth, updates, gradients")
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return f"<figure>{svg}</figure><ul>{items}</ul>"


def heal_body(result: HealResult, prefix: str) -> str:
    """The heal figure and a table: each model's held-out value per metric (95 % intervals) and the recovery."""
    rows = []
    for metric in HEAL_METRICS:
        entry = result.metrics[metric]
        rec = entry["recovery"]
        if rec["value"] is None:
            recovery = f"not defined ({rec['reason']})"
        else:
            recovery = f"{rec['value']:.1%} [{rec['ci95'][0]:.1%}, {rec['ci95'][1]:.1%}]"
        cells = "".join(
            f'<td class="num">{esc(with_interval(entry[m]["value"], entry[m]["ci95"]))}</td>' for m in HEAL_MODELS
        )
        rows.append(f"<tr><td>{esc(metric)}</td>{cells}<td>{esc(recovery)}</td></tr>")
    label = f"blocks {', '.join(map(str, result.removed))} removed, healed by {result.method}"
    svg = figure_svg(heal_figure(result), f"{prefix}-heal", label)
    before, after = result.parameters.get("original"), result.parameters.get("healed")
    size = f"parameters {before:,} → {after:,} ({after / before:.1%})" if before and after is not None else ""
    head = "".join(f'<th class="num">{m} [95 % CI]</th>' for m in HEAL_MODELS)
    return (
        f"<figure>{svg}<figcaption>{esc(label)}; error bars: 95 % intervals.</figcaption></figure>"
        f'<div class="scroll"><table class="heal"><thead><tr><th>metric</th>{head}'
        "<th>recovery [95 % bootstrap CI]</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
        + (f"<p>{esc(size)}</p>" if size else "")
    )
