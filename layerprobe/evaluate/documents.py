"""Chosen documents of an lm-eval task scored with exactly the prompts a full run gives them.

A sequential prune-drop (`--precision`) scores a task's documents in rounds, a few at a time. lm-eval's
few-shot sampler draws the examples of each document from one seeded generator in document order, so
evaluating a subset (`samples=`) would give a document other examples than a full run does. Instead,
every request of the task is built once, as `harness.evaluate` builds them for a full run (same seeds,
same `--limit`): the `Population`. A round then sends only the chosen documents' requests to the model,
applies the task's filters and `process_results` to them, and returns their per-document values: the
very values a full run's `log_samples` holds for those documents.

Only tasks whose reported metrics are means of per-document values (acc, acc_norm, exact_match…), and
groups that weigh their tasks by size, have a ΔP that is the mean of per-document differences; others
are refused before any weight loads (`check_sequential_tasks`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerprobe.core import TaskError
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval, seed_everything
from layerprobe.results import MetricSamples

if TYPE_CHECKING:
    from lm_eval.api.instance import Instance
    from lm_eval.api.model import LM

    from layerprobe.evaluate.tasks import TaskSet

MEAN = "mean"
Document = tuple[str, Any]  # (leaf task, doc id)


@dataclass
class Population:
    """Every document of one task (or group) and its requests, built once as a full run builds them.

    Attributes:
        name: The task or group as asked for.
        documents: (leaf task, doc id) of every document, leaves in lm-eval's order, ids ascending.
        requests: The requests of each document (templates: copied before each use).
        labels: For a group, label → (metric, filter) of the aggregate metrics it reports; empty for a
            plain task (it reports every metric it computes).
        directions: Metric (without filter) → higher_is_better, agreed over the task's leaves (None if
            they disagree).
        num_fewshot: Few-shot examples per document (None for a group whose tasks differ).
        version: The task's version as lm-eval reports it.
        weight_by_size: For a group, lm-eval's rule (True: every document weighs the same); None for a task.
    """

    name: str
    documents: list[Document]
    requests: dict[Document, list[Instance]]
    labels: dict[str, tuple[str, str]]  # label → (metric, filter) of the metrics a full run reports
    directions: dict[str, bool | None]
    num_fewshot: int | None
    version: str | None
    weight_by_size: bool | None


def check_sequential_tasks(task_sets: dict[str, TaskSet]) -> None:
    """Refuse, before any weight loads, a task whose ΔP is not a mean of per-document differences in [−1, 1].

    Every metric of a plain task must be aggregated by a mean (perplexities and bits per byte are not);
    a group must aggregate its tasks by size-weighted means (then its score is the mean over all its
    documents).
    """
    for name, task_set in task_sets.items():
        group = task_set.loaded["groups"].get(task_set.result_names[name])
        if group is not None:
            for config in getattr(group, "aggregate_metric_list", None) or []:
                if config.aggregation != MEAN or not config.weight_by_size:
                    raise TaskError(
                        f"--precision needs a group whose score is the mean over all its documents; group {name} "
                        f"aggregates {config.metric} by an unweighted mean of its tasks.",
                        hint=f"Run {name} without --precision, or name its tasks one by one.",
                    )
            continue
        for leaf in task_set.members[name]:
            for metric, function in task_set.tasks[leaf].aggregation().items():
                if getattr(function, "__name__", "") != MEAN:
                    raise TaskError(
                        f"--precision needs per-document metrics with a known range; {metric} of task {leaf} is "
                        f"aggregated by {getattr(function, '__name__', function)}, not a mean.",
                        hint=f"Score {leaf} in a run without --precision.",
                    )


def build_population(task_set: TaskSet, name: str, limit: int | float | None, seed: int) -> Population:
    """Build every request of `name` exactly as `harness.evaluate` does before scoring a full run."""
    from lm_eval.evaluator_utils import get_sample_size

    requests: dict[Document, list[Instance]] = {}
    with quiet_lm_eval():
        seed_everything(seed)
        for task in task_set.tasks.values():
            task.set_fewshot_seed(seed=seed)
        for leaf, task in task_set.tasks.items():  # every task, in lm-eval's order: the seeds are shared
            task.build_all_requests(limit=get_sample_size(task, limit), rank=0, world_size=1, cache_requests=False)
            if leaf not in task_set.members[name]:
                continue
            for instance in task.instances:
                requests.setdefault((leaf, instance.doc_id), []).append(instance)
    for found in requests.values():
        found.sort(key=lambda instance: instance.idx)
    documents = sorted(requests, key=lambda d: (task_set.members[name].index(d[0]), d[1]))
    group = task_set.loaded["groups"].get(task_set.result_names[name])
    leaves = [task_set.tasks[leaf] for leaf in task_set.members[name]]
    shots = {task.get_config("num_fewshot") for task in leaves}
    version = getattr(group, "version", None) if group is not None else getattr(leaves[0], "VERSION", None)
    directions: dict[str, set[bool | None]] = {}
    for task in leaves:
        for metric, direction in task.higher_is_better().items():
            directions.setdefault(metric, set()).add(direction)
    return Population(
        name=name,
        documents=documents,
        requests=requests,
        labels=_reported_labels(task_set, name),
        directions={m: found.pop() if len(found) == 1 else None for m, found in directions.items()},
        num_fewshot=shots.pop() if len(shots) == 1 else None,
        version=None if version in (None, "N/A") else str(version),
        weight_by_size=None if group is None else True,
    )


def _reported_labels(task_set: TaskSet, name: str) -> dict[str, tuple[str, str]]:
    """The labels of a group's aggregate metrics (empty for a plain task: every metric it computes)."""
    group = task_set.loaded["groups"].get(task_set.result_names[name])
    labels: dict[str, tuple[str, str]] = {}
    for config in (getattr(group, "aggregate_metric_list", None) or []) if group is not None else []:
        filters = config.filter_list or ["none"]
        for filter_name in [filters] if isinstance(filters, str) else filters:
            label = config.metric if filter_name == "none" else f"{config.metric},{filter_name}"
            labels[label] = (config.metric, filter_name)
    return labels


def score_documents(
    lm: LM, task_set: TaskSet, population: Population, documents: list[Document]
) -> dict[str, MetricSamples]:
    """Per-document values of every reported metric for `documents`, on the model as it stands now.

    The requests are fresh copies of the population's, so one population serves every variant and round.
    """
    chosen = {
        doc: [dataclasses.replace(i, resps=[], filtered_resps={}) for i in population.requests[doc]]
        for doc in documents
    }
    by_type: dict[str, list[Instance]] = defaultdict(list)
    for instances in chosen.values():
        for instance in instances:
            by_type[instance.request_type].append(instance)
    with quiet_lm_eval():
        for request_type, instances in by_type.items():
            cloned = [instance for instance in instances for _ in range(instance.repeats or 1)]
            for answer, instance in zip(getattr(lm, request_type)(cloned), cloned, strict=True):
                instance.resps.append(answer)
    values: dict[str, dict[str, dict[Any, object]]] = {}
    group = bool(population.labels)
    for leaf in dict.fromkeys(doc[0] for doc in documents):
        task = task_set.tasks[leaf]
        leaf_docs = [doc for doc in documents if doc[0] == leaf]
        task._instances = [instance for doc in leaf_docs for instance in chosen[doc]]
        task.apply_filters()
        for filter_name in chosen[leaf_docs[0]][0].filtered_resps:
            for doc in leaf_docs:
                instances = chosen[doc]
                results = task.process_results(instances[0].doc, [i.filtered_resps[filter_name] for i in instances])
                for metric, value in results.items():
                    label = metric if filter_name == "none" else f"{metric},{filter_name}"
                    if group and label not in population.labels:
                        continue
                    values.setdefault(label, {}).setdefault(leaf, {})[doc[1]] = value
        task._instances = []
    return {label: MetricSamples(MEAN, docs, population.weight_by_size) for label, docs in values.items()}
