"""The one shape every evaluator reports a metric in, so prune-drop treats lm-eval and SQuAD alike."""

from __future__ import annotations

from dataclasses import dataclass, field

from layerprobe.evaluate.samples import MetricSamples


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


BASELINE = None  # the variant with no block removed; any other variant is the removed block's index
