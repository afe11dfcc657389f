"""What one evaluation of one model variant produced, typed, and its JSON form in the resume state.

Every scorer (lm-eval's harness, the shared-prefix engine, SQuAD, the corpus metric) reports an
`Evaluation`: per metric a `MetricScore`, and per document the values (`MetricSamples`) from which
prune-drop pairs each variant with the baseline. They live here, on the results floor, because the
resume state, the shards and the assembled prune_drop.json all read and write them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from layerprobe.results.json_types import JSONObject
from layerprobe.results.validate import Node

# Document id (an int or a str, as the evaluator keys them) → its value (a float, or a list such as
# [log-likelihood, words]); the evaluators build these with their own key and value types.
DocValues = dict[Any, Any]
# One JSON-lines row of the sample log: {"variant", "task", "doc_id", <metric>: value, …}.
Row = dict[str, object]


class SampleSpec(TypedDict):
    """How a metric's per-document values make up its score (kept with each evaluation)."""

    aggregation: str
    weight_by_size: bool | None


@dataclass(frozen=True)
class MetricSamples:
    """Per-document values of one metric of one evaluation.

    Attributes:
        aggregation: lm-eval's aggregation name ("mean" for acc, exact_match, f1…; `weighted_perplexity`,
            `bits_per_byte`, `perplexity` for corpus-level metrics).
        values: Leaf task → document id → value (a float, or a list such as [log-likelihood, words]).
        weight_by_size: For a group, whether lm-eval weighs its leaf tasks by their size (None: one task).
    """

    aggregation: str
    values: dict[str, DocValues]
    weight_by_size: bool | None = None

    def spec(self) -> SampleSpec:
        """The small part kept with each evaluation (the values themselves go to JSON lines)."""
        return {"aggregation": self.aggregation, "weight_by_size": self.weight_by_size}


def to_rows(variant: int | None, samples: dict[str, MetricSamples]) -> list[Row]:
    """One JSON-ready row per (leaf task, document): `{"variant", "task", "doc_id", <metric>: value, …}`."""
    rows: dict[tuple[str, object], Row] = {}
    for metric, found in samples.items():
        for task, docs in found.values.items():
            for doc_id, value in docs.items():
                row = rows.setdefault((task, doc_id), {"variant": variant, "task": task, "doc_id": doc_id})
                row[metric] = list(value) if isinstance(value, tuple) else value
    return list(rows.values())


def from_rows(rows: Iterable[Row], specs: dict[str, SampleSpec]) -> dict[str, MetricSamples]:
    """The inverse of `to_rows` for one variant, given each metric's `MetricSamples.spec()`."""
    values: dict[str, dict[str, DocValues]] = {metric: {} for metric in specs}
    for row in rows:
        for metric in specs:
            if metric in row:
                values[metric].setdefault(str(row["task"]), {})[row["doc_id"]] = row[metric]
    return {
        metric: MetricSamples(spec["aggregation"], values[metric], spec.get("weight_by_size"))
        for metric, spec in specs.items()
    }


@dataclass(frozen=True)
class MetricScore:
    """One metric of one evaluation, with its standard error.

    Attributes:
        value: The metric (lm-eval accuracies are fractions in 0-1; SQuAD EM/F1 are 0-100; for an lm-eval
            group, its aggregate over subtasks, e.g. MMLU's size-weighted mean acc).
        stderr: Standard error of `value`; None where none is defined (lm-eval's "N/A", one question).
        higher_is_better: The metric's direction; None if an lm-eval group's subtasks disagree.
        samples: Documents (questions) the value is computed from.
    """

    value: float
    stderr: float | None
    higher_is_better: bool | None
    samples: int


@dataclass(frozen=True)
class Evaluation:
    """One finished evaluation of one task on one model variant, typed until results.py writes it.

    Attributes:
        metrics: Metric name → score, in the evaluator's order.
        num_fewshot: Few-shot examples per document (0 for SQuAD; None for an lm-eval group that mixes).
        samples: Documents (questions) scored.
        engine: The engine that produced it ("simple" or "shared").
        nonfinite: Inputs whose scores were NaN/inf (SQuAD windows; 0 for lm-eval).
        per_sample: Metric name → its per-document values (lm-eval's `log_samples`, SQuAD's per
            question), from which prune-drop pairs each variant with the baseline. Read back from a
            progress file, the values are empty: they live in the run's sample log.
        prefix_reuse: The shared engine's prefix reuse: "on", "off" or "unavailable: <why>" (None: not
            the shared engine).
    """

    metrics: dict[str, MetricScore]
    num_fewshot: int | None
    samples: int | None
    engine: str
    nonfinite: int = 0
    per_sample: dict[str, MetricSamples] = field(default_factory=dict)
    prefix_reuse: str | None = None  # the shared engine's few-shot prefix reuse: "on", "off", "unavailable: …"
    version: str | None = None  # the task's version as lm-eval reports it (a new version may change prompts)
    sequential: dict[str, SequentialStop] = field(default_factory=dict)  # --precision: metric → how it stopped


@dataclass(frozen=True)
class SequentialStop:
    """How a sequential run (`--precision`) stopped scoring one metric of one variant.

    Attributes:
        items: Documents the variant was scored on (the first `items` of the seeded order).
        stop: "precision" (half-width ≤ H), "settled" (the interval excludes 0) or "exhausted" (all documents).
        interval: The anytime-valid 95 % interval of ΔP it stopped with (`stats.confidence_interval`).
    """

    items: int
    stop: str
    interval: tuple[float, float]


STOP_REASONS = ("precision", "settled", "exhausted")  # why a sequential run stopped scoring a variant
BASELINE = None  # the variant with no block removed; any other variant is the removed block's index


def evaluation_to_dict(evaluation: Evaluation) -> dict[str, object]:
    """The JSON form of one evaluation, as kept in the prune-drop progress file (with its engine)."""
    return {
        "metrics": {
            name: {"value": m.value, "stderr": m.stderr, "higher_is_better": m.higher_is_better}
            for name, m in evaluation.metrics.items()
        },
        "num_fewshot": evaluation.num_fewshot,
        "samples": evaluation.samples,
        "engine": evaluation.engine,
        "nonfinite": evaluation.nonfinite,
        **({"prefix_reuse": evaluation.prefix_reuse} if evaluation.prefix_reuse is not None else {}),
        "version": evaluation.version,
        # How the per-document values (kept in the run's sample log, not here) make up each score.
        "per_sample": {name: found.spec() for name, found in evaluation.per_sample.items()},
        **(
            {
                "sequential": {
                    name: {"items": stop.items, "stop": stop.stop, "interval": list(stop.interval)}
                    for name, stop in evaluation.sequential.items()
                }
            }
            if evaluation.sequential
            else {}
        ),
    }


def evaluation_from_dict(data: JSONObject | Node, source: str = "evaluation") -> Evaluation:
    """Read back `evaluation_to_dict`'s form, checked field by field.

    Older progress files may lack engine, nonfinite, per_sample and version. `per_sample` comes back with
    each metric's aggregation rule and no values (those are in the sample log).
    """
    node = Node.of(data, source)
    samples = node.key("samples").integer(optional=True, minimum=0)
    metrics = {
        name: MetricScore(
            m.key("value").number(),
            m.key("stderr").number(optional=True, low=0.0),
            m.key("higher_is_better").flag(optional=True),
            samples or 0,
        )
        for name, m in node.key("metrics").entries(min_length=1)
    }
    per_sample_node = node.key("per_sample")
    per_sample = {}
    if per_sample_node.present and per_sample_node.value is not None:
        per_sample = {
            name: MetricSamples(spec.key("aggregation").text(), {}, spec.key("weight_by_size").flag(optional=True))
            for name, spec in per_sample_node.entries()
        }
    sequential_node = node.key("sequential")
    sequential = {
        name: SequentialStop(
            entry.key("items").integer(minimum=1),
            _stop(entry.key("stop")),
            _pair(entry.key("interval")),
        )
        for name, entry in (sequential_node.entries() if sequential_node.given else [])
    }
    return Evaluation(
        metrics,
        node.key("num_fewshot").integer(optional=True, minimum=0),
        samples,
        node.key("engine").text(default="simple"),
        node.key("nonfinite").integer(default=0, minimum=0),
        per_sample,
        prefix_reuse=node.key("prefix_reuse").text(optional=True),
        version=node.key("version").text(optional=True),
        sequential=sequential,
    )


def _stop(node: Node) -> str:
    """One of `STOP_REASONS`."""
    reason = node.text()
    if reason not in STOP_REASONS:
        node.fail(f"one of {', '.join(STOP_REASONS)}", repr(reason))
    return reason


def _pair(node: Node) -> tuple[float, float]:
    """A [low, high] interval."""
    values = [item.number() for item in node.items()]
    if len(values) != 2 or values[0] > values[1]:
        node.fail("an interval [low, high] with low ≤ high", f"got {values}")
    return values[0], values[1]
