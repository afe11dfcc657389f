"""The history as a table: one row per run, one column per tracked number with its 95 % interval.

`track_table` gives the header and the rows as plain strings, which the terminal (rich), track.md
(GitHub markdown, for $GITHUB_STEP_SUMMARY) and the HTML report all lay out: the numbers are formatted
once, here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layerprobe.core import markdown_text
from layerprobe.results import INDEPENDENT_BLOCKS, TrackResult, TrackRun

INTERVALS = (
    "Every interval is a 95 % interval. Lazy blocks: the count below the threshold, then in parentheses "
    "the blocks surely below (upper bound d + 1.96·SE under it) to possibly below (lower bound under it). "
    "ΔP: paired 95 % intervals from prune_drop.json."
)
INDEPENDENT_NOTE = (
    "the standard error of the mean adjacent distance assumes the blocks' errors independent: the angular.json "
    "has no per-window values."
)


def number(value: float | None, digits: int = 4) -> str:
    """A value for a cell: `0.1234`, `nan` for a failed measurement, `—` where there is none."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if math.isfinite(value) else "nan"


def with_interval(value: float | None, ci: Sequence[float] | None, digits: int = 4, signed: bool = False) -> str:
    """`0.1234 [0.1200, 0.1268]`, or the value alone where no interval exists."""
    if value is None:
        return "—"
    shown = f"{value:+.{digits}f}" if signed and math.isfinite(value) else number(value, digits)
    if ci is None:
        return shown
    return f"{shown} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def track_table(track: TrackResult) -> tuple[list[str], list[list[str]]]:
    """The header and one row per run (in the history's order)."""
    runs = track.runs
    header = ["run", "model@revision", "L"]
    columns = []
    if any(r.angular for r in runs):
        threshold = next(r.angular.lazy_threshold for r in runs if r.angular)
        header += [f"lazy blocks, d < {threshold:g} (95 % range)", "mean d(x^l, x^(l+1)) [95 % CI]"]
        columns.append(_angular_cells)
    tasks = list(dict.fromkeys(t for r in runs if r.prune_drop for t in r.prune_drop))
    for task in tasks:
        metric = next(r.prune_drop[task].metric for r in runs if r.prune_drop and task in r.prune_drop)
        header.append(f"{task} {metric} [95 % CI]")
        for block in track.watch.get(task, []):
            header.append(f"ΔP {task}, block {block} [95 % CI]")
    if any(r.depth for r in runs):
        header += ["RMS growth x^L/x^0", "grad norm last/first"]
    healed = any(r.heal for r in runs)
    if healed:
        header += ["heal", "healed KL(original ‖ ·) [95 % CI]", "KL recovery [95 % CI]"]
    rows = []
    for run in runs:
        row = [run.label, _model_cell(run), str(run.num_layers)]
        for cells in columns:
            row += cells(run)
        for task in tasks:
            row += _task_cells(run, task, len(track.watch.get(task, [])))
        if any(r.depth for r in runs):
            depth = run.depth
            row += (
                ["—", "—"] if depth is None else [number(depth.rms_growth, 3), number(depth.grad_ratio_last_first, 3)]
            )
        if healed:
            row += _heal_cells(run)
        rows.append(row)
    return header, rows


def _model_cell(run: TrackRun) -> str:
    revision = f"@{run.revision}" if run.revision else ""
    commit = f" ({run.commit[:7]})" if run.commit and run.commit != run.revision else ""
    return f"{run.model}{revision}{commit}"


def _angular_cells(run: TrackRun) -> list[str]:
    angular = run.angular
    if angular is None:
        return ["—", "—"]
    lazy = str(angular.lazy_count)
    if angular.surely_below is not None:
        lazy += f" ({angular.surely_below}–{angular.possibly_below})"
    mean = with_interval(angular.mean_adjacent, angular.mean_adjacent_ci95)
    if angular.stderr_method == INDEPENDENT_BLOCKS:
        mean += " †"
    return [lazy, mean]


def _task_cells(run: TrackRun, task: str, watched: int) -> list[str]:
    entry = (run.prune_drop or {}).get(task)
    if entry is None:
        return ["—"] * (1 + watched)
    cells = [with_interval(entry.baseline, entry.baseline_ci95)]
    for delta in entry.watched:
        moved = f" (block {delta.block})" if delta.block != delta.watched else ""
        cells.append(with_interval(delta.delta, delta.delta_ci95, signed=True) + moved)
    return cells


def track_markdown(track: TrackResult) -> str:
    """The history as GitHub markdown: a heading, the table, what the intervals are, and the notes."""
    header, rows = track_table(track)
    order = "by training step" if track.order == "step" else "as given"
    lines = [f"### layerprobe track: {markdown_text(track.name)} · {len(rows)} runs, {order}", ""]
    lines.append("| " + " | ".join(markdown_text(h) for h in header) + " |")
    lines.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    lines += ["| " + " | ".join(markdown_text(cell) for cell in row) + " |" for row in rows]
    lines += [""] + [f"- {markdown_text(note)}" for note in track_notes(track)]
    return "\n".join(lines) + "\n"


def track_notes(track: TrackResult) -> list[str]:
    """What the table's marks and intervals mean, which blocks are watched, and the history's notes."""
    notes = [INTERVALS]
    if any(r.angular and r.angular.stderr_method == INDEPENDENT_BLOCKS for r in track.runs):
        notes.append(f"† {INDEPENDENT_NOTE}")
    watch = "; ".join(f"{task}: {', '.join(map(str, blocks)) or 'none'}" for task, blocks in track.watch.items())
    if watch:
        notes.append(f"Watched blocks ({track.watch_source}): {watch}.")
    return notes + [f"Note: {note}." for note in track.notes or []]


def _heal_cells(run: TrackRun) -> list[str]:
    heal = run.heal
    if heal is None:
        return ["—", "—", "—"]
    kl = heal.metrics["kl"]
    recovery = "not defined"
    if kl["recovery"] is not None:
        low, high = kl["recovery_ci95"]
        recovery = f"{kl['recovery']:.1%} [{low:.1%}, {high:.1%}]"
    cut = f"{heal.method}, removed {','.join(map(str, heal.removed))}"
    return [cut, with_interval(kl["healed"], kl["healed_ci95"]), recovery]
