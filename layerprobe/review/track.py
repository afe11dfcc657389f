"""Several run directories → one `TrackResult`: their order, their provenance and their numbers with 95 % intervals.

`build_track` checks the runs belong together (order.py), orders them, picks the blocks whose ΔP is
watched (`--watch`, else each task's most harmful block in the first run that scored it) and collects each
run's numbers: angular (adjacent.py), each task's baseline and watched ΔP with the paired intervals of
prune_drop.json, residual growth and gradient norms from depth.json, ΔP along the pruning curves, and heal.json's healed
held-out values and recoveries.
"""

from __future__ import annotations

import math
from collections import Counter

from layerprobe.core import LayerprobeError, parse_layer_ranges
from layerprobe.results import (
    CurvePoints,
    DepthResult,
    HealResult,
    MetricDrop,
    PruneCurveResult,
    PruneDropResult,
    TrackCurve,
    TrackDepth,
    TrackHeal,
    TrackResult,
    TrackRun,
    TrackTask,
    WatchedDelta,
    depth_summary,
)
from layerprobe.review.adjacent import track_angular
from layerprobe.review.order import check_depths, check_one_model, order_runs, run_step
from layerprobe.review.runs import RunResults
from layerprobe.stats import score_interval95

Z95 = 1.96  # every interval of the history is a two-sided 95 % normal interval
WATCH_DEFAULT = "most harmful block of each task in the first run"
WATCH_GIVEN = "--watch"


def build_track(
    runs: list[RunResults],
    *,
    order: str = "step",
    align: str = "block",
    allow_mixed: bool = False,
    watch: str | None = None,
) -> TrackResult:
    """The history of `runs` (see the module docstring).

    Raises:
        LayerprobeError: mixed models without `allow_mixed`, different depths without `align="relative"`,
            or a `watch` that cannot be read or names a block the runs do not have.
    """
    mixed = check_one_model(runs, allow_mixed)
    check_depths(runs, align)
    ordered, order_used, order_note = order_runs(runs, order)
    watched, source = watched_blocks(ordered, watch)
    reference = {task: first_scoring(ordered, task).model.num_layers for task in watched}
    labels = run_labels(ordered)
    track_runs = [
        track_run(run, label, align=align, watched=watched, reference=reference)
        for run, label in zip(ordered, labels, strict=True)
    ]
    notes = [order_note] if order_note else []
    if mixed:
        notes.append(
            "runs of different models (--allow-mixed): " + ", ".join(dict.fromkeys(r.model for r in track_runs))
        )
    return TrackResult(
        order=order_used,
        align=align,
        runs=track_runs,
        watch=watched,
        watch_source=source,
        mixed=mixed,
        notes=notes,
        z=Z95,
    )


def run_labels(runs: list[RunResults]) -> list[str]:
    """`step 1000` where a step is known, else the revision, else the directory's name; repeats get ` (dir)`."""
    labels = []
    for run in runs:
        step = run_step(run.model).value
        labels.append(f"step {step}" if step is not None else run.model.revision or run.name)
    counts = Counter(labels)
    return [f"{label} ({run.name})" if counts[label] > 1 else label for label, run in zip(labels, runs, strict=True)]


def watched_blocks(runs: list[RunResults], watch: str | None) -> tuple[dict[str, list[int]], str]:
    """Task → the blocks whose ΔP is followed, and who chose them.

    With `watch` (the `--layers` syntax, `3,5` or `2-4`) every task follows those blocks of the first run
    that scored it; without, each task follows its most harmful block in that run.
    """
    tasks = list(dict.fromkeys(task for run in runs if run.prune_drop for task in run.prune_drop.tasks))
    if watch is not None:
        if not tasks:
            raise LayerprobeError(
                f"--watch {watch!r}: no run has a prune_drop.json to watch blocks in.",
                hint="Run layerprobe prune-drop into the run directories, or leave --watch out.",
            )
        blocks = {
            task: parse_layer_ranges(watch, first_scoring(runs, task).model.num_layers, "--watch") for task in tasks
        }
        return blocks, WATCH_GIVEN
    out = {}
    for task in tasks:
        summary = first_scoring(runs, task).summary or {}
        worst = summary[task]["most_harmful"] if task in summary else None
        out[task] = [int(worst["layer"])] if worst else []
    return out, WATCH_DEFAULT


def first_scoring(runs: list[RunResults], task: str) -> PruneDropResult:
    """The prune-drop result of the first run (in order) that scored `task`: where watched blocks are chosen."""
    return next(run.prune_drop for run in runs if run.prune_drop is not None and task in run.prune_drop.tasks)


def block_positions(num_layers: int, align: str) -> list[float]:
    """Where each block's value is drawn: at its index, or at relative depth (l + 0.5) / L."""
    return [(l + 0.5) / num_layers if align == "relative" else float(l) for l in range(num_layers)]


def mapped_block(block: int, reference_layers: int, num_layers: int) -> int:
    """The block of an L-block run at the relative depth of `block` in a `reference_layers`-block run."""
    if reference_layers == num_layers:
        return block
    return min(num_layers - 1, math.floor((block + 0.5) / reference_layers * num_layers))


def track_run(
    run: RunResults, label: str, *, align: str, watched: dict[str, list[int]], reference: dict[str, int]
) -> TrackRun:
    """One run's entry of the history."""
    model, step = run.model, run_step(run.model)
    return TrackRun(
        label=label,
        directory=str(run.directory),
        model=model.id,
        revision=model.revision,
        commit=model.commit,
        num_layers=model.num_layers,
        step=step.value,
        step_from=step.source,
        files={kind: str(path) for kind, path in run.files.items()},
        positions=block_positions(model.num_layers, align),
        angular=None if run.angular is None else track_angular(run.angular, Z95, str(run.files["angular"])),
        prune_drop=None if run.prune_drop is None else track_tasks(run.prune_drop, watched, reference),
        depth=None if run.depth is None else track_depth(run.depth),
        prune_curve=None if run.prune_curve is None else track_curves(run.prune_curve),
        heal=None if run.heal is None else track_heal(run.heal),
    )


def track_heal(result: HealResult) -> TrackHeal:
    """The three models' held-out values and the recovery, per metric, as heal.json recorded them."""
    metrics = {
        name: {
            "original": entry["original"]["value"],
            "pruned": entry["pruned"]["value"],
            "pruned_ci95": entry["pruned"]["ci95"],
            "healed": entry["healed"]["value"],
            "healed_ci95": entry["healed"]["ci95"],
            "recovery": entry["recovery"]["value"],
            "recovery_ci95": entry["recovery"]["ci95"],
        }
        for name, entry in result.metrics.items()
    }
    return TrackHeal(result.method, list(result.removed), metrics)


def track_tasks(
    result: PruneDropResult, watched: dict[str, list[int]], reference: dict[str, int]
) -> dict[str, TrackTask]:
    """Each task's primary metric: the baseline with its 95 % interval, and the watched blocks' ΔP."""
    out = {}
    for name, task in result.tasks.items():
        metric_name = task.primary_metric
        metric = task.metrics[metric_name]
        se = metric.baseline_stderr
        bounds = score_interval95(metric_name, metric.baseline, se, task.samples)  # as the report's figures
        ci = None if bounds is None else list(bounds)
        blocks = watched.get(name, [])
        deltas = [
            watched_delta(metric, block, mapped_block(block, reference[name], result.model.num_layers))
            for block in blocks
        ]
        out[name] = TrackTask(metric_name, metric.higher_is_better, metric.baseline, se, ci, deltas)
    return out


def watched_delta(metric: MetricDrop, watched: int, block: int) -> WatchedDelta:
    """ΔP of `block` with its 95 % interval as prune_drop.json recorded it (None where it has none).

    The interval is the one valid for how the run stopped (`MetricDrop.interval95`): after a `--precision`
    run's data-dependent stop only the anytime `delta_cs95` holds, not the fixed-n `delta_ci95`.
    """
    if block not in metric.layers:
        return WatchedDelta(watched, block, None, None, None)
    i = metric.layers.index(block)
    intervals = metric.interval95
    ci = intervals[i] if intervals is not None else None
    significant = metric.significant[i] if metric.significant is not None else None
    return WatchedDelta(watched, block, metric.delta[i], None if ci is None else list(ci), significant)


def track_depth(result: DepthResult) -> TrackDepth:
    """Residual growth, the traced placement and (with --grad) the per-block gradient norms."""
    summary = result.summary or depth_summary(result)
    grad = result.grad
    return TrackDepth(
        rms_growth=summary.get("rms_growth"),
        placement=result.placement.summary,
        grad=None if grad is None else list(grad.block),
        grad_loss=None if grad is None else grad.loss,
        grad_ratio_last_first=summary.get("grad_ratio_last_first"),
    )


def track_curves(result: PruneCurveResult) -> dict[str, TrackCurve]:
    """Per task (its first metric) and method: ΔP at each fraction removed, with its paired 95 % interval."""
    out = {}
    for task, metrics in result.tasks.items():
        name, metric = next(iter(metrics.items()))
        methods = {}
        for method, points in metric.methods.items():
            recorded = points.delta_ci95 or [None] * len(points.n)
            ci = [
                kept
                if kept is not None
                else None
                if se is None or not math.isfinite(se)
                else [d - Z95 * se, d + Z95 * se]
                for d, se, kept in zip(points.delta, points.delta_stderr, recorded, strict=True)
            ]
            methods[method] = CurvePoints(points.fractions(result.num_layers), list(points.delta), ci)
        out[task] = TrackCurve(name, metric.baseline, methods)
    return out
