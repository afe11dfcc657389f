"""Score one in-memory model, again and again, with lm-evaluation-harness tasks built once.

`prune-drop` scores the baseline and then the same model object with each block removed in turn. That
is only right if nothing survives from one evaluation to the next, so this module calls lm-eval's
lower-level `evaluate` with:
- one `HFLM` wrapping the live model object (it reads the model at every call, so an edited model is
  seen as edited) and never a response cache: lm-eval's `CachingLM` keys answers by the request alone,
  so it would hand a pruned model the unpruned model's answers;
- the same `TaskSet` (tasks built once: see `tasks.py`), whose requests lm-eval rebuilds at every call;
- python/numpy/torch and every task's few-shot sampler re-seeded before each call exactly as
  `lm_eval.simple_evaluate` seeds them, so every variant sees the very same prompts.
With those, `evaluate` gives exactly what `simple_evaluate` gives for the same model, settings and seeds
(`lm_eval --seed N`: one seed for python, numpy, torch and few-shot sampling).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from layerprobe.core import ANSWER
from layerprobe.evaluate.documents import Document, Population, build_population, score_documents
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval, seed_everything
from layerprobe.evaluate.tasks import GENERATION
from layerprobe.model import Remover, module_device
from layerprobe.results import Evaluation, MetricSamples, MetricScore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lm_eval.api.model import LM
    from lm_eval.models.huggingface import HFLM
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from layerprobe.core import PruneSpec
    from layerprobe.evaluate.tasks import TaskSet
    from layerprobe.model import LayerStack, LoadedModel

T = TypeVar("T")

# Bootstrap draws for the stderr of metrics without a closed form (perplexity, f1, bleu…; acc has one).
# lm-eval's default is 100000, run L+1 times here; 1000 draws pin a stderr to a few percent.
DEFAULT_BOOTSTRAP_ITERS = 1000


@dataclass(frozen=True)
class TaskScores:
    """Every metric lm-eval reports for one task or group, in lm-eval's order.

    Metric names are lm-eval's without its filter suffix when the filter is "none" (`acc`, `acc_norm`,
    `word_perplexity`, `bits_per_byte`); other filters keep it (`exact_match,strict-match`).

    Attributes:
        metrics: Metric name → score.
        num_fewshot: Few-shot examples per document (None for a group whose subtasks differ).
        samples: Documents evaluated (for a group: over all its tasks).
        subtasks: For a group, the scores of its direct children (tasks or subgroups), by name.
        per_sample: Metric name → the per-document values lm-eval aggregated into it (from its
            `log_samples` output; for a group, those of all its leaf tasks). Empty for a subgroup.
    """

    metrics: dict[str, MetricScore]
    num_fewshot: int | None
    samples: int
    subtasks: dict[str, TaskScores] = field(default_factory=dict)
    per_sample: dict[str, MetricSamples] = field(default_factory=dict)
    version: str | None = None


def make_lm(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int | str = 1) -> HFLM:
    """Wrap an already loaded causal LM in one lm-eval `HFLM`, to be reused for every variant of it.

    HFLM keeps a reference to `model`, so blocks removed from (or restored to) that object in place are
    seen by the next `evaluate`. It takes the model's device as is, except where `--device-map` left even
    the first weights on "meta" (offloaded): inputs then go where the embedding computes. With
    `batch_size="auto"`, lm-eval 0.4.13 detects the batch size again at every evaluation (a variant may get
    a different one, which can change results in the last float digits); an int keeps variants exactly
    comparable.

    Args:
        model: A `transformers` causal LM (`…ForCausalLM`), in eval mode.
        tokenizer: Its tokenizer.
        batch_size: Requests per forward pass, or "auto".
    """
    from lm_eval.models.huggingface import HFLM

    with quiet_lm_eval():
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    if lm.device.type == "meta":  # HFLM takes the first weight's device; lm-eval has no other way to set it
        embeddings = model.get_input_embeddings()
        lm._device = module_device(embeddings) if embeddings is not None else lm.device
    return lm


def evaluate(
    lm: LM,
    task_set: TaskSet,
    *,
    limit: int | float | None = None,
    seed: int | None = None,
    bootstrap_iters: int = DEFAULT_BOOTSTRAP_ITERS,
) -> dict[str, TaskScores]:
    """Score the model behind `lm` on every task of `task_set`, as `lm_eval.simple_evaluate` would.

    Args:
        lm: From `make_lm` (any lm-eval `LM` but a `CachingLM`).
        task_set: From `build_tasks`; reused as is, its requests are rebuilt at every call.
        limit: At most this many documents per task (a fraction < 1: that share of them); for testing.
        seed: Seed for python/numpy/torch and every few-shot sampler (lm-eval's `--seed N`); None
            uses the TaskSet's. The same seed gives every variant the same prompts.
        bootstrap_iters: Bootstrap draws for stderrs without a closed form; 0 skips them.

    Returns:
        Scores by the names given to `build_tasks`, in that order. A group's metrics are its aggregate.
    """
    from lm_eval.api.model import CachingLM
    from lm_eval.evaluator import evaluate as lm_eval_evaluate

    if isinstance(lm, CachingLM):
        raise TypeError(
            "a CachingLM answers from a cache keyed by request only: every model variant "
            "would get the first variant's answers; pass the HFLM itself"
        )
    seed = task_set.seed if seed is None else seed
    with quiet_lm_eval():
        seed_everything(seed)
        for task in task_set.tasks.values():
            task.set_fewshot_seed(seed=seed)
        results = lm_eval_evaluate(
            lm=lm,
            task_dict=task_set.loaded,
            limit=limit,
            cache_requests=False,
            bootstrap_iters=bootstrap_iters,
            log_samples=True,  # the per-document values, for paired ΔP uncertainty
        )
    out = {}
    for name in task_set.names:
        scores = task_scores(results, task_set.loaded["group_map"], task_set.result_names[name])
        per_sample = per_sample_values(results.get("samples", {}), task_set, name, scores.metrics)
        out[name] = dataclasses.replace(scores, per_sample=per_sample)
    return out


def per_sample_values(
    logged: dict[str, list[dict[str, Any]]], task_set: TaskSet, name: str, metrics: dict[str, MetricScore]
) -> dict[str, MetricSamples]:
    """Per-document values of every metric in `metrics`, read from lm-eval's `log_samples` output.

    Each logged sample of a leaf task carries its `doc_id`, the `filter` its responses went through and
    one value per metric (what `process_results` returned, before aggregation). Labels follow `task_scores`:
    the bare metric name for the "none" filter, `metric,filter` otherwise. A generating task also gets
    its answers after each filter, `answer,<filter>` (aggregation "answer"), from which flip rates count.
    """
    leaves = task_set.members[name]
    group = task_set.loaded["groups"].get(task_set.result_names[name])
    weight_by_size = {
        config.metric: bool(config.weight_by_size) for config in getattr(group, "aggregate_metric_list", None) or []
    }
    values: dict[str, dict[str, dict[object, object]]] = {}  # label → leaf task → doc id → value
    aggregations: dict[str, str] = {}
    for leaf in leaves:
        functions = task_set.tasks[leaf].aggregation()
        for sample in logged.get(leaf, []):
            filter_name = sample.get("filter", "none")
            for metric in sample.get("metrics", []):
                label = metric if filter_name == "none" else f"{metric},{filter_name}"
                if label not in metrics or metric not in sample:
                    continue
                aggregations.setdefault(label, getattr(functions.get(metric), "__name__", "mean"))
                values.setdefault(label, {}).setdefault(leaf, {})[sample["doc_id"]] = sample[metric]
            if task_set.output_types[leaf] == GENERATION:  # the answer after the filter: for flip rates
                label = f"{ANSWER},{filter_name}"
                aggregations[label] = ANSWER
                values.setdefault(label, {}).setdefault(leaf, {})[sample["doc_id"]] = filtered_answer(sample)
    return {
        label: MetricSamples(
            aggregations[label], docs, None if group is None else weight_by_size.get(label.split(",")[0], True)
        )
        for label, docs in values.items()
    }


def filtered_answer(sample: dict[str, Any]) -> object:
    """A logged sample's answer after its filter: the one filtered response (a list if a filter kept several)."""
    responses = sample.get("filtered_resps", [])
    answer = responses[0] if isinstance(responses, list) and len(responses) == 1 else responses
    return answer if isinstance(answer, str | int | float) or answer is None else [str(a) for a in answer]


def task_scores(results: dict[str, Any], group_map: dict[str, list[str]], name: str) -> TaskScores:
    """TaskScores for `name` from the results dict lm-eval's `evaluate` returns (recursing into a group's children)."""
    subtasks = {child: task_scores(results, group_map, child) for child in group_map.get(name, [])}
    reported = results["results"].get(name, {})
    samples = reported.get("sample_len")
    if samples is None:  # a subgroup without aggregate metrics reports no size of its own
        samples = sum(scores.samples for scores in subtasks.values())
    # lm-eval 0.4.13 propagates directions and n-shot from children to a group parents-first, so a group
    # of groups (mmlu → mmlu_stem → subjects) gets neither: take them from the children when they agree.
    directions = results.get("higher_is_better", {}).get(name, {})
    counts = reported.get("sample_count") or {}
    metrics = {}
    for key, value in reported.items():
        metric, _, filter_name = key.partition(",")
        if not filter_name or metric.endswith("_stderr") or not isinstance(value, numbers.Real):
            continue  # alias, name, sample_len, sample_count, stderr entries
        label = metric if filter_name == "none" else key
        stderr = reported.get(f"{metric}_stderr,{filter_name}")
        metrics[label] = MetricScore(
            value=float(value),
            stderr=float(stderr) if isinstance(stderr, numbers.Real) else None,
            higher_is_better=directions[metric]
            if metric in directions
            else _agreed(sub.metrics[label].higher_is_better for sub in subtasks.values() if label in sub.metrics),
            samples=int(counts.get(key, samples)),
        )
    num_fewshot = results.get("n-shot", {}).get(name)
    if num_fewshot is None and subtasks:
        num_fewshot = _agreed(sub.num_fewshot for sub in subtasks.values())
    version = results.get("versions", {}).get(name)
    version = None if version in (None, "N/A") else str(version)
    return TaskScores(metrics, num_fewshot, int(samples), subtasks, version=version)


def _agreed(values: Iterable[T]) -> T | None:
    """The one value all of `values` share, else None."""
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else None


def lm_eval_limit(limit: float | None) -> int | float | None:
    """lm-eval reads an int as a document count and a float below 1 as a fraction."""
    if limit is None:
        return None
    return int(limit) if float(limit).is_integer() else limit


class HarnessScorer:
    """lm-eval tasks, built once, scored on whatever state the model is in (the simple engine).

    Each variant takes its block (span, sublayer: `model.Remover`) out of the live model and puts it back after.
    """

    engine = "simple"
    reports_progress = False

    def __init__(
        self,
        loaded: LoadedModel,
        stack: LayerStack,
        spec: PruneSpec,
        task_sets: dict[str, TaskSet],
        layers: list[int],
        remover: Remover | None = None,
    ) -> None:
        self.loaded, self.stack, self.spec, self.task_sets, self.layers = loaded, stack, spec, task_sets, layers
        self.remover = remover or Remover(stack)
        self.lm = self.make_lm()
        self.populations: dict[str, Population] = {}

    def population(self, task: str) -> Population:
        """Every document of `task` and its requests, built once (a sequential run scores them in rounds)."""
        if task not in self.populations:
            self.populations[task] = build_population(
                self.task_sets[task], task, lm_eval_limit(self.spec.limit), self.spec.seed
            )
        return self.populations[task]

    def score_documents(self, task: str, documents: list[Document]) -> dict[str, MetricSamples]:
        """Per-document values of `task`'s metrics for `documents`, on the current variant."""
        return score_documents(self.lm, self.task_sets[task], self.population(task), documents)

    def restrict(self, layers: list[int]) -> None:
        """Only `layers` are still scored (the shared engine then computes no other variant)."""

    def reuse_status(self) -> str | None:
        """The shared engine's prefix reuse ("on", "off", "unavailable: …"); None for this engine."""
        return None

    def make_lm(self) -> HFLM:
        return make_lm(self.loaded.model, self.loaded.tokenizer, self.spec.batch_size)

    @contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        with self.remover.variant(layer):
            yield

    def score(self, task: str) -> Evaluation:
        scores = evaluate(self.lm, self.task_sets[task], limit=lm_eval_limit(self.spec.limit), seed=self.spec.seed)[
            task
        ]
        return Evaluation(
            scores.metrics,
            scores.num_fewshot,
            scores.samples,
            self.engine,
            per_sample=scores.per_sample,
            version=scores.version,
        )
