"""prune_drop.json from recorded evaluations: ΔP per metric, its paired stderr, and the angular agreement.

A prune-drop run records each (task, variant) evaluation as it finishes (`state.py`) and each
evaluation's per-document values beside it (`samples.py`). Whether the evaluations come from this run,
from a resumed one or from the shards `layerprobe merge` joins, the result is assembled from those two
records alone, here, so that a merged run writes exactly what one unsharded run writes.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Protocol, cast

from layerprobe.core import ANSWER, CORPUS_TASK, DEFAULT_MULTIPLICITY, SIGNIFICANCE_LEVEL, PruneSpec, recorded_values
from layerprobe.evaluate import PairedColumns, paired_columns, paired_delta, within_range
from layerprobe.model import Remover
from layerprobe.prune.agreement import AngularSource, task_agreement
from layerprobe.prune.samples import SampleRow
from layerprobe.prune.state import PruneState, corpus_settings
from layerprobe.results import (
    FlipRate,
    JSONObject,
    MetricDrop,
    MetricSamples,
    ModelInfo,
    PruneDropResult,
    RunInfo,
    SequentialStop,
    TaskDrop,
    from_rows,
)
from layerprobe.stats import adjust_pvalues, wilson_interval

# The `settings` block of prune_drop.json, which the shards of one run must agree on to be merged: the
# tasks, the resolved blocks (`layers`: the starts of the removed units, in order) and each block's sublayer
# module paths (`sublayers`, unit attention or mlp), then every setting PruneSpec declares recorded
# (`core.recorded_values`), `corpus` for `--task corpus` (`state.corpus_settings`) and `corpus_metric`, which
# corpus metric scored the model and why (`evaluate.corpus_metric_record`).
PruneSettings = dict[str, Any]


class RowSource(Protocol):
    """Where a run's per-document rows are read from: its `SampleLog`, or the rows of joined shards."""

    def read(self, task: str) -> dict[int | None, list[SampleRow]]:
        """The rows of `task`, by variant (None: the baseline)."""
        ...


def prune_settings(spec: PruneSpec, layers: list[int], remover: Remover) -> PruneSettings:
    """The `settings` block of prune_drop.json (also what shards must agree on to be merged)."""
    settings: PruneSettings = {
        "tasks": list(spec.tasks),
        "layers": layers,
        **recorded_values(spec),
        "sublayers": remover.module_paths(),
    }
    if CORPUS_TASK in spec.tasks:
        settings["corpus"] = corpus_settings(spec.corpus)
    return settings


def assemble_result(
    info: ModelInfo,
    settings: PruneSettings,
    state: PruneState,
    run: RunInfo,
    samples: RowSource,
    angular: AngularSource | None,
) -> PruneDropResult:
    """prune_drop.json from a state holding every (task, variant) of the run and their per-document rows."""
    tasks, layers = settings["tasks"], settings["layers"]
    engines = sorted({state.get(t, v).engine for t in tasks for v in [None, *layers]})
    multiplicity = settings.get("multiplicity", DEFAULT_MULTIPLICITY)
    return PruneDropResult(
        model=info,
        engine="+".join(engines),
        settings={**settings, "multiplicity": multiplicity},
        tasks=adjust_significance(
            {
                # A sublayer's ΔP is not what a block's angular distance predicts: no agreement block for it.
                task: assemble_task(
                    state,
                    task,
                    layers,
                    settings["limit"],
                    samples,
                    None if settings.get("unit", "block") != "block" else angular,
                    settings.get("span", 1),
                )
                for task in tasks
            },
            multiplicity,
        ),
        run=replace(run, prefix_reuse=prefix_reuse_status(state, tuple(tasks), [None, *layers])),
    )


def flip_rates(values: dict[int | None, dict[str, MetricSamples]], layers: list[int]) -> dict[str, FlipRate] | None:
    """Per filter of a generating task: how many documents' answers differ from the full model's, per variant.

    The answers are the "answer,<filter>" samples the harness keeps for generating tasks (None for other
    tasks). A filter whose variants do not answer exactly the baseline's documents is left out.
    """
    out = {}
    for label, base in values[None].items():
        if base.aggregation != ANSWER:
            continue
        docs = [(task, doc) for task in sorted(base.values) for doc in base.values[task]]
        flips = []
        for layer in layers:
            found = answer_flips(base, values[layer].get(label))
            if found is None:
                break
            flips.append(found)
        else:
            if docs:
                intervals = [wilson_interval(k, len(docs)) or (0.0, 1.0) for k in flips]
                out[label.split(",", 1)[1]] = FlipRate(
                    list(layers), flips, len(docs), [k / len(docs) for k in flips], [list(c) for c in intervals]
                )
    return out or None


def answer_flips(base: MetricSamples, other: MetricSamples | None) -> int | None:
    """How many documents' answers (one filter's `answer,<filter>` samples) differ between two evaluations.

    None when `other` is missing or did not answer exactly the documents `base` answered.
    """
    if other is None or {t: set(d) for t, d in other.values.items()} != {t: set(d) for t, d in base.values.items()}:
        return None
    return sum(other.values[t][d] != base.values[t][d] for t in base.values for d in base.values[t])


def adjust_significance(tasks: dict[str, TaskDrop], method: str) -> dict[str, TaskDrop]:
    """Every metric's `p_adjusted` and `significant`, adjusted over all variants × tasks × metrics of the run.

    The family is every p-value the run has (`MetricDrop.p_value`; missing ones are left out of it);
    `significant` becomes adjusted p < 0.05 (None where no p-value exists). Nothing measured changes.
    A sequential run's metrics (`--precision`) keep the flags of their anytime-valid intervals (interval
    excludes 0, each at 95 %): their fixed-n p-values would not be valid at a data-dependent stopping time,
    so they are neither recorded nor adjusted.
    """
    places = [
        (task, name, i)
        for task, drop in tasks.items()
        for name, metric in drop.metrics.items()
        if not metric.sequential
        for i in range(len(metric.layers))
    ]
    raw = [_pvalues(tasks[t].metrics[m])[i] for t, m, i in places]
    adjusted = dict(zip(places, adjust_pvalues(raw, method).pvalues, strict=True))
    out = {}
    for task, drop in tasks.items():
        metrics = {}
        for name, metric in drop.metrics.items():
            if metric.sequential:
                metrics[name] = metric
                continue
            found = [adjusted[task, name, i] for i in range(len(metric.layers))]
            metrics[name] = replace(
                metric,
                p_adjusted=found,
                significant=[None if p is None else p < SIGNIFICANCE_LEVEL for p in found],
            )
        out[task] = replace(drop, metrics=metrics)
    return out


def _pvalues(metric: MetricDrop) -> list[float | None]:
    return metric.p_value if metric.p_value is not None else [None] * len(metric.layers)


def prefix_reuse_status(state: PruneState, tasks: tuple[str, ...], variants: list[int | None]) -> str | None:
    """How the shared engine treated shared prompt prefixes ("on", "off", "unavailable: …"); None if unused."""
    found = {state.get(t, v).prefix_reuse for t in tasks for v in variants}
    return "; ".join(sorted(status for status in found if status is not None)) or None


def with_stops(drop: MetricDrop, stops: list[SequentialStop | None]) -> MetricDrop:
    """A sequential run's metric: how each variant stopped, its anytime interval, significance read from it."""
    intervals = [None if s is None else list(s.interval) for s in stops]
    return replace(
        drop,
        items=[None if s is None else s.items for s in stops],
        stop=[None if s is None else s.stop for s in stops],
        delta_cs95=intervals,
        significant=[None if i is None else i[0] > 0 or i[1] < 0 for i in intervals],
    )


def sequential_pruned(baseline: float, base: MetricSamples | None, pruned: list[MetricSamples | None]) -> list[float]:
    """A sequential run's `pruned`: the baseline plus each variant's mean paired difference on its own documents.

    Computed here from the rows, not taken from the variant's evaluation, so that it pairs with the
    baseline this result reports, whichever share of a split run that baseline came from.
    """
    out = []
    for variant in pruned:
        found = None if base is None or variant is None else paired_delta(restricted(base, variant), variant)
        out.append(math.nan if found is None else baseline + found.delta)
    return out


def sequential_columns(base: MetricSamples | None, pruned: list[MetricSamples | None]) -> PairedColumns:
    """`paired_columns` of a sequential run: each variant paired with the baseline on its own documents.

    The baseline is scored on every document any variant used; a variant stopped earlier is compared on
    the first `items` documents only, which are its own. (These are the fixed-n paired fields, kept for
    reference; the anytime interval `delta_cs95` is the one to read.)
    """
    columns = [paired_columns(None if base is None or p is None else restricted(base, p), [p]) for p in pruned]
    methods = {c["delta_method"] for c in columns if c["delta_method"] is not None}
    return {
        "delta_stderr": [c["delta_stderr"][0] for c in columns],
        "delta_ci95": [c["delta_ci95"][0] for c in columns],
        "significant": [c["significant"][0] for c in columns],
        "p_value": [None] * len(columns),  # fixed-n p-values are not valid at a sequential stopping time
        "delta_method": methods.pop() if len(methods) == 1 else None,
        "bootstrap": None,
    }


def restricted(base: MetricSamples, to: MetricSamples) -> MetricSamples:
    """`base`'s values on the documents `to` has, only."""
    values = {task: {d: docs[d] for d in to.values.get(task, {}) if d in docs} for task, docs in base.values.items()}
    return MetricSamples(base.aggregation, {t: docs for t, docs in values.items() if docs}, base.weight_by_size)


def assemble_task(
    state: PruneState,
    task: str,
    layers: list[int],
    limit: float | None,
    samples: RowSource,
    angular: AngularSource | None = None,
    span: int = 1,
) -> TaskDrop:
    """Turn the recorded scores of one task into per-metric baseline/pruned/delta lists.

    The paired uncertainty of each ΔP comes from the per-document rows of the baseline and of the variant
    (`samples`); with an angular result, each metric also gets its agreement block.
    """
    baseline = state.get(task, None)
    variants = [state.get(task, layer) for layer in layers]
    rows = samples.read(task)
    values = {
        variant: from_rows(rows.get(variant, []), {m: s.spec() for m, s in evaluation.per_sample.items()})
        for variant, evaluation in zip([None, *layers], [baseline, *variants], strict=True)
    }
    metrics = {}
    sequential = any(v.sequential for v in variants)
    for name, base in baseline.metrics.items():
        pruned = [v.metrics[name] for v in variants]
        paired = (sequential_columns if sequential else paired_columns)(
            values[None].get(name), [values[layer].get(name) for layer in layers]
        )
        paired["delta_ci95"] = within_range(name, base.value, paired["delta_ci95"])
        drop = MetricDrop(
            baseline=base.value,
            baseline_stderr=base.stderr,
            higher_is_better=base.higher_is_better is not False,
            layers=list(layers),
            pruned=sequential_pruned(base.value, values[None].get(name), [values[l].get(name) for l in layers])
            if sequential
            else [p.value for p in pruned],
            stderr=[p.stderr for p in pruned],
            **paired,
        )
        metrics[name] = with_stops(drop, [v.sequential.get(name) for v in variants]) if sequential else drop
    return TaskDrop(
        metrics=metrics,
        num_fewshot=baseline.num_fewshot,
        limit=limit,
        samples=baseline.samples,
        nonfinite=baseline.nonfinite + sum(v.nonfinite for v in variants),
        version=baseline.version,
        flip_rate=flip_rates(values, layers),
        # task_agreement builds JSON-ready values only (numbers, strings, lists of them).
        agreement=None
        if angular is None
        else cast(dict[str, JSONObject], task_agreement(angular.result, metrics, str(angular.path), span)),
    )
