"""The one shape every evaluator reports a metric in, so prune-drop treats lm-eval and SQuAD alike."""

from __future__ import annotations

from dataclasses import dataclass


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
