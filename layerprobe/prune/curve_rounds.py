"""Sequential prune-curve (`--precision H`): every scored set stops once its ΔP is known.

The rule is prune-drop's (`sequential.py`, whose per-task state `TaskRounds` this reuses): an lm-eval
task's documents are scored in one seeded random order, `--round-size` at a time; every set asked for in
one call — delta's single units, one greedy step's candidates, the chosen sets of every method × n —
runs until each of its metrics has stopped: the anytime-valid 95 % interval of its paired ΔP has
half-width ≤ H ("precision"), excludes 0 ("settled"), or every document is scored ("exhausted").

The full model is scored once per round of that order, by whichever call first reaches the round, so
every set is paired with the baseline on its own documents and the baseline ends scored on every
document any set used. A set's reported score is the full model's (on all those documents) plus the
mean paired difference on the set's own documents, as prune-drop reports a sequential variant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from layerprobe.prune.sequential import Document, SequentialScorer, TaskRounds
from layerprobe.prune.strategies import Variant
from layerprobe.results import BASELINE

if TYPE_CHECKING:
    from layerprobe.results import Evaluation, MetricSamples


class SequentialSets:
    """One lm-eval task of a sequential prune-curve: the full model's rounds so far, shared by every call."""

    def __init__(self, scorer: SequentialScorer, task: str, precision: float, round_size: int, seed: int) -> None:
        self.scorer, self.task = scorer, task
        self.precision, self.round_size, self.seed = precision, round_size, seed
        self.population = scorer.population(task)
        self.baseline_rounds: list[dict[str, MetricSamples]] = []  # round r → the full model on its documents

    def _rounds(self, variants: Sequence[Variant]) -> TaskRounds[Variant]:
        return TaskRounds(self.task, self.population, list(variants), self.precision, self.round_size, self.seed)

    def _baseline_round(self, index: int, documents: list[Document]) -> dict[str, MetricSamples]:
        """The full model's values on round `index` (scored the first time any call reaches it)."""
        if index == len(self.baseline_rounds):
            with self.scorer.variant(None):
                self.baseline_rounds.append(self.scorer.score_documents(self.task, documents))
        return self.baseline_rounds[index]

    def score(
        self, variants: Sequence[Variant], removed: Callable[[Variant], AbstractContextManager[None]]
    ) -> dict[Variant, Evaluation]:
        """Score `variants` (the model with `removed(v)` applied) round by round until each has stopped."""
        rounds = self._rounds(variants)
        while documents := rounds.next_documents():
            scored: dict[Variant | None, dict[str, MetricSamples]] = {
                BASELINE: self._baseline_round(rounds.rounds, documents)
            }
            for variant in rounds.active:
                with removed(variant), self.scorer.variant(None):
                    scored[variant] = self.scorer.score_documents(self.task, documents)
            rounds.apply(documents, scored)
        return {v: e for v, e in rounds.evaluations(self.scorer.engine, None).items() if v is not BASELINE}

    def baseline(self) -> Evaluation:
        """The full model on every document scored so far (its first round scored if none was yet)."""
        rounds = self._rounds([])
        if not self.baseline_rounds:
            self._baseline_round(0, rounds.order[: self.round_size])
        for index, values in enumerate(self.baseline_rounds):
            rounds.apply(rounds.order[index * self.round_size : (index + 1) * self.round_size], {BASELINE: values})
        return rounds.evaluations(self.scorer.engine, None)[BASELINE]
