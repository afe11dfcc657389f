"""`layerprobe report`: one self-contained HTML page for one or several run directories.

Everything is inline (style, script, figures as SVG, the heatmap as SVG cells), so the page opens from a
CI artifact with no network. With several runs the history comes first (its table and figures, as
`layerprobe track` draws them), then each run in its own collapsible section, the last one open.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from layerprobe.plots import figure_svg, track_figures
from layerprobe.results import TrackResult, library_versions, write_text
from layerprobe.review.assets import SCRIPT, STYLE
from layerprobe.review.runs import RunResults
from layerprobe.review.sections import esc, run_sections
from layerprobe.review.table import track_notes, track_table

TRACK_LABELS = {
    "lazy": "lazy blocks per run, with the 95 % range surely below … possibly below the threshold",
    "adjacent": "mean adjacent distance per run, with its 95 % interval",
    "heat": "adjacent distance per block and run (heat strip)",
    "scores": "each task's full-model score per run, with its 95 % interval",
    "delta": "ΔP of the watched blocks per run, with paired 95 % intervals",
    "residual": "residual growth RMS(x^L)/RMS(x^0) per run",
    "grad": "gradient-norm signature per block, one line per run",
    "curve": "pruning curves per run, with paired 95 % bands",
    "heal": "held-out KL of the pruned and the healed model, and each metric's recovery, with 95 % intervals",
}


def report_html(runs: list[RunResults], labels: list[str], track: TrackResult | None = None) -> str:
    """The page for `runs` (in their order, named by `labels`), with the history view when `track` is given."""
    models = track.name if track is not None else ", ".join(dict.fromkeys(run.model.label for run in runs))
    nav = []
    if track is not None:
        nav.append('<li><a href="#track">History</a></li>')
    nav += [f'<li><a href="#run{i + 1}">{esc(label)}</a></li>' for i, label in enumerate(labels)]
    body = [track_section(track)] if track is not None else []
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        body.append(run_section(run, label, f"run{i + 1}", collapsible=len(runs) > 1, open_=i == len(runs) - 1))
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>layerprobe report: {esc(models)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body>",
            '<header class="page">',
            "<h1>layerprobe report</h1>",
            f'<p class="lede">{esc(models)} · {len(runs)} run{"s" if len(runs) != 1 else ""} · '
            f"written {esc(made)} by layerprobe {esc(library_versions().get('layerprobe', '(version unknown)'))}</p>",
            f'<nav aria-label="sections"><ul>{"".join(nav)}</ul></nav>',
            "</header>",
            "<main>",
            *body,
            "</main>",
            '<footer><p class="muted">Every interval on this page is a 95 % interval unless its caption says '
            "otherwise. Methods: docs/methods.md of layerprobe.</p></footer>",
            f"<script>{SCRIPT}</script>",
            "</body>",
            "</html>",
        ]
    )


def run_section(run: RunResults, label: str, prefix: str, *, collapsible: bool, open_: bool) -> str:
    """One run's section; with several runs a `<details>` (printing opens them all)."""
    heading = f'<h2>{esc(label)}</h2> <span class="muted path">{esc(run.directory)}</span>'
    inner = run_sections(run, prefix)
    if collapsible:
        opened = " open" if open_ else ""
        content = f"<details{opened}><summary>{heading}</summary>\n{inner}\n</details>"
    else:
        content = f"{heading}\n{inner}"
    return f'<section class="run" id="{prefix}" data-label="{esc(label)}">\n{content}\n</section>'


def track_section(track: TrackResult) -> str:
    """The history: its table (as track.md), what the intervals are, the notes, and the figures."""
    header, rows = track_table(track)
    numeric = ' class="num"'
    head = "".join(f"<th{numeric if i >= 2 else ''}>{esc(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f"<td{numeric if i >= 2 else ''}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    notes = track_notes(track)
    figures = "".join(
        f'<figure class="track-{what}">{figure_svg(fig, f"track-{what}", TRACK_LABELS[what])}'
        f"<figcaption>{esc(TRACK_LABELS[what])}</figcaption></figure>"
        for what, fig in track_figures(track).items()
    )
    order = "by training step" if track.order == "step" else "as given"
    return (
        '<section class="track" id="track">\n'
        f"<h2>History: {len(track.runs)} runs, {order}</h2>\n"
        f'<div class="scroll"><table class="track-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>\n"
        f'<ul class="notes">{"".join(f"<li>{esc(n)}</li>" for n in notes)}</ul>\n'
        f'<div class="grid">{figures}</div>\n'
        "</section>"
    )


def write_page(path: Path, runs: list[RunResults], labels: list[str], track: TrackResult | None) -> Path:
    """Write the page atomically to `path` (parents created)."""
    return write_text(path, report_html(runs, labels, track))
