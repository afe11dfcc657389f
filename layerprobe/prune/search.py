"""The strategies that score the model to choose: `delta` (each unit alone) and `greedy` (one unit at a time).

Both are driven by one task and metric (`Driver`). `delta` scores every candidate unit removed alone
and removes the n least harmful together (or reads each block's ΔP from a prune_drop.json of the same
model); `greedy` (SLEB; with sublayers as candidates, BlockPruner's search) removes, at each step, the
candidate whose removal on top of those already removed leaves the best score, re-scoring every
remaining candidate on the already-pruned model. Each returns n → the chosen set and what the search
cost: the sets it had to score and the block × token evaluations it ran (sets another strategy had
scored already are reused and counted apart).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from layerprobe.core import ResultError
from layerprobe.model import Progress
from layerprobe.prune.strategies import (
    BLOCK,
    Unit,
    Variant,
    best_candidate,
    least_harm_order,
    nested_sets,
    variant_of,
)
from layerprobe.prune.variants import VariantScorer
from layerprobe.results import JSONObject, PruneDropResult


@dataclass(frozen=True)
class Driver:
    """The task and metric whose score chooses the sets, and its direction."""

    task: str
    metric: str
    higher_is_better: bool

    def value(self, scorer: VariantScorer, variant: Variant) -> float:
        """The driving metric's score of the model without `variant` (NaN if the metric is missing)."""
        score = scorer.value(self.task, variant, self.metric)
        return math.nan if score is None else score

    def to_dict(self) -> JSONObject:
        return {"task": self.task, "metric": self.metric, "higher_is_better": self.higher_is_better}


@dataclass(frozen=True)
class SearchResult:
    """One strategy's sets (n → removed units) and its cost block for prune_curve.json."""

    sets: dict[int, Variant]
    cost: JSONObject


def measured_cost(scorer: VariantScorer, wanted: Sequence[Variant], driver: Driver, work_before: int) -> JSONObject:
    """The cost block of a search that needed `wanted` scored (some perhaps reused from another search).

    A sequential run (`--precision`) adds `documents`: the documents those sets were scored on, summed.
    """
    cost: JSONObject = {
        "variants_scored": len(set(wanted)),
        "block_tokens": scorer.work - work_before,
        "task": driver.task,
        "metric": driver.metric,
    }
    if scorer.prune.precision is not None:
        cost["documents"] = sum(scorer.evaluation(driver.task, v).samples or 0 for v in set(wanted))
    return cost


def delta_measured(
    scorer: VariantScorer, candidates: Sequence[Unit], max_n: int, driver: Driver, progress: Progress
) -> SearchResult:
    """Score every candidate removed alone; n → the n least harmful together."""
    singles = [variant_of([u]) for u in candidates]
    before, reused = scorer.work, len(singles) - scorer.missing(singles, [driver.task])
    progress.stage("Scoring each unit alone (delta)", scorer.missing(singles, [driver.task]), "eval")
    scorer.score(singles, [driver.task])
    values = {u: driver.value(scorer, variant_of([u])) for u in candidates}
    order = least_harm_order(values, driver.higher_is_better)
    cost = {**measured_cost(scorer, singles, driver, before), "reused": reused, "source": "measured"}
    return SearchResult(nested_sets(order, max_n), cost)


def delta_from_file(result: PruneDropResult, path: str, max_n: int, driver: Driver) -> SearchResult:
    """N → the n blocks with the least harmful single-block ΔP recorded in a prune_drop.json."""
    metric = result.tasks[driver.task].metrics[driver.metric]
    values = {(layer, BLOCK): pruned for layer, pruned in zip(metric.layers, metric.pruned, strict=True)}
    order = least_harm_order(values, metric.higher_is_better)
    cost: JSONObject = {"variants_scored": 0, "block_tokens": 0, "task": driver.task, "metric": driver.metric}
    return SearchResult(nested_sets(order, max_n), {**cost, "source": path})


def check_prune_drop_for(result: PruneDropResult, path: str, driver_task: str, driver_metric: str | None) -> str:
    """Refuse a prune_drop.json that cannot drive `delta`; return the metric it is read for."""
    settings = result.settings
    if settings.get("unit", "block") != BLOCK or settings.get("span", 1) != 1:
        raise ResultError(
            f"{path} removed {settings.get('unit')} units (span {settings.get('span')}); delta reads single blocks.",
            hint="Pass a prune_drop.json of single blocks (--unit block --span 1), or leave --prune-drop out.",
        )
    task = result.tasks.get(driver_task)
    if task is None:
        raise ResultError(
            f"{path} has no task {driver_task!r} (it has {', '.join(result.tasks)}).",
            hint="Drive the choice with a task the file scored (--metric TASK:METRIC), or leave --prune-drop out.",
        )
    metric = driver_metric or task.primary_metric
    if metric not in task.metrics:
        raise ResultError(
            f"{path} has no metric {metric!r} for {driver_task} (it has {', '.join(task.metrics)}).",
            hint="Pick one of its metrics with --metric TASK:METRIC.",
        )
    return metric


def greedy(
    scorer: VariantScorer, candidates: Sequence[Unit], max_n: int, driver: Driver, progress: Progress
) -> SearchResult:
    """Remove one unit at a time: at each step, re-score every remaining candidate on the pruned model."""
    chosen: list[Unit] = []
    sets: dict[int, Variant] = {}
    before, reused = scorer.work, 0
    wanted: list[Variant] = []
    steps = min(max_n, len(candidates))
    progress.stage("Greedy search (step × candidate)", sum(len(candidates) - k for k in range(steps)), "eval")
    for n in range(1, steps + 1):
        remaining = [u for u in candidates if u not in chosen]
        trials = {u: variant_of([*chosen, u]) for u in remaining}
        missing = scorer.missing(list(trials.values()), [driver.task])
        reused += len(trials) - missing
        scorer.score(list(trials.values()), [driver.task])
        progress.on_advance(len(trials) - missing)  # what was reused counts as done
        wanted += trials.values()
        best = best_candidate({u: driver.value(scorer, v) for u, v in trials.items()}, driver.higher_is_better)
        chosen.append(best)
        sets[n] = trials[best]
    return SearchResult(sets, {**measured_cost(scorer, wanted, driver, before), "reused": reused, "steps": steps})
