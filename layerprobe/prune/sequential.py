"""Sequential prune-drop (`--precision H`): each variant is scored only until its ΔP is known.

A task's documents are scored in one seeded random order (`stats.scoring_order`), `--round-size` at a
time. Each round the baseline is scored on the round's documents, and so is every variant still
running; each of a variant's metrics gets the anytime-valid 95 % interval of its paired ΔP
(`stats.ConfidenceSequence`, sampling without replacement from the task's N documents). A variant stops
when every one of its metrics has stopped (`stats.stop_reason`): half-width ≤ H ("precision"), the
interval excludes 0 ("settled"), or all documents scored ("exhausted"). The baseline is thereby scored
on every document any variant uses, and every difference stays paired.

Every finished round is appended to a round log (rows, then a marker line, synced) before it counts;
`--resume` replays the log, which rebuilds exactly the same intervals and stops (they are a function of
the differences and their order), and goes on with the next round. When a task's last variant stops,
each variant's evaluation is recorded like any other (`state.py`, `samples.py`), with how it stopped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from layerprobe.core import LayerprobeError
from layerprobe.prune.state import BASELINE_KEY
from layerprobe.results import (
    BASELINE,
    Evaluation,
    MetricSamples,
    MetricScore,
    RunDir,
    SequentialStop,
    from_rows,
    to_rows,
    write_text,
)
from layerprobe.stats import ConfidenceSequence, scoring_order

if TYPE_CHECKING:
    from layerprobe.prune.samples import SampleLog, SampleRow
    from layerprobe.prune.state import PruneState

Document = tuple[str, Any]  # (leaf task, doc id)
ROW_KEYS = ("round", "variant", "task", "doc_id")  # the keys of a round-log row that are not metrics
MEAN = "mean"
LOW, HIGH = -1.0, 1.0  # the range of a paired difference of two per-document values in [0, 1]
K = TypeVar("K", bound=Hashable)  # what identifies a variant: prune-drop's block index, prune-curve's set of units


class PopulationLike(Protocol):
    """What the sequential loop reads of a task's documents (`evaluate.documents.Population`)."""

    documents: list[Document]
    directions: dict[str, bool | None]
    num_fewshot: int | None
    version: str | None
    weight_by_size: bool | None


class SequentialScorer(Protocol):
    """A scorer that can score chosen documents of a task (`evaluate.HarnessScorer` and the shared one)."""

    engine: str

    def variant(self, layer: int | None) -> AbstractContextManager[None]: ...

    def population(self, task: str) -> PopulationLike: ...

    def score_documents(self, task: str, documents: list[Document]) -> dict[str, MetricSamples]: ...

    def restrict(self, layers: list[int]) -> None: ...

    def reuse_status(self) -> str | None: ...


class RoundLog:
    """The rounds of one task scored so far, as JSON lines: each round's rows, then `{"round_done": r}`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[int | None, list[SampleRow]]]:
        """The finished rounds, in order: variant → its rows (a round cut short by a crash is dropped)."""
        rounds: list[dict[int | None, list[SampleRow]]] = []
        pending: dict[int | None, list[SampleRow]] = {}
        if not self.path.exists():
            return rounds
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a crash: its round is redone
                    break
                if "round_done" in row:
                    if row["round_done"] != len(rounds):
                        break
                    rounds.append(pending)
                    pending = {}
                elif row.get("round") == len(rounds):
                    pending.setdefault(row["variant"], []).append(row)
        return rounds

    def append(self, index: int, scored: dict[int | None, dict[str, MetricSamples]]) -> None:
        """Write round `index`'s rows and its marker, synced before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            for variant, samples in scored.items():
                for row in to_rows(variant, samples):
                    handle.write(json.dumps({"round": index, **row}, allow_nan=True) + "\n")
            handle.write(json.dumps({"round_done": index}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def truncate_to(self, rounds: int) -> None:
        """Drop whatever follows the marker of the first `rounds` rounds (a round cut short by a crash)."""
        if not self.path.exists():
            return
        kept: list[str] = []
        done = 0
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                if done == rounds:
                    break
                kept.append(line)
                if line.startswith('{"round_done"'):
                    done += 1
        write_text(self.path, "".join(kept))


class TaskRounds(Generic[K]):
    """One task's sequential state: the baseline's values and every variant's confidence sequences."""

    def __init__(
        self, task: str, population: PopulationLike, layers: Sequence[K], precision: float, round_size: int, seed: int
    ) -> None:
        self.task, self.population, self.precision, self.round_size = task, population, precision, round_size
        self.order = [population.documents[i] for i in scoring_order(len(population.documents), seed)]
        self.labels: list[str] = []
        self.baseline: dict[str, dict[Document, float]] = {}
        self.raw: dict[K | None, dict[str, dict[Document, object]]] = {BASELINE: {}, **{v: {} for v in layers}}
        self.sequences: dict[K, dict[str, ConfidenceSequence]] = {v: {} for v in layers}
        self.active = list(layers)
        self.stops: dict[K, dict[str, SequentialStop]] = {}
        self.rounds = 0

    def next_documents(self) -> list[Document]:
        """The documents of the next round (empty when every variant has stopped)."""
        if not self.active:
            return []
        start = self.rounds * self.round_size
        return self.order[start : start + self.round_size]

    def apply(self, documents: list[Document], scored: dict[K | None, dict[str, MetricSamples]]) -> None:
        """Take one round's per-document values: update every running variant's intervals and stops."""
        base = scored[BASELINE]
        if not self.labels:
            self.labels = list(base)
        for variant in [BASELINE, *self.active]:
            for label in self.labels:
                values = scored[variant].get(label)
                if values is None:
                    raise LayerprobeError(
                        f"--precision: metric {label} of task {self.task} has no per-document values."
                    )
                column = self.raw[variant].setdefault(label, {})
                for doc in documents:
                    column[doc] = values.values[doc[0]][doc[1]]
        still = []
        for layer in self.active:
            for label in self.labels:
                sequence = self.sequences[layer].setdefault(
                    label, ConfidenceSequence(LOW, HIGH, population=len(self.order))
                )
                sequence.update([self._value(layer, label, d) - self._value(BASELINE, label, d) for d in documents])
            reasons = {label: self.sequences[layer][label].stop(self.precision) for label in self.labels}
            if all(reasons.values()):
                self.stops[layer] = {
                    label: SequentialStop(
                        self.sequences[layer][label].seen, str(reasons[label]), self._interval(layer, label)
                    )
                    for label in self.labels
                }
            else:
                still.append(layer)
        self.active = still
        self.rounds += 1

    def _interval(self, layer: K, label: str) -> tuple[float, float]:
        interval = self.sequences[layer][label].interval
        assert interval is not None  # set by the round just applied
        return interval

    def _value(self, variant: K | None, label: str, doc: Document) -> float:
        """One per-document value as a number in [0, 1] (refused otherwise: its ΔP would have no known range)."""
        value = self.raw[variant][label][doc]
        number = float(value) if isinstance(value, (bool, int, float)) else math.nan
        if not 0.0 <= number <= 1.0:
            raise LayerprobeError(
                f"--precision needs per-document values in [0, 1]; {label} of task {self.task} has {value!r} "
                f"(document {doc[1]} of {doc[0]}).",
                hint=f"Score {self.task} in a run without --precision.",
            )
        return number

    def evaluations(self, engine: str, reuse: str | None) -> dict[K | None, Evaluation]:
        """The baseline's and every variant's evaluation once all have stopped (see `MetricDrop` for `pruned`)."""
        used = self.order[: self.rounds * self.round_size]
        base_means = {label: float(np.mean([self._value(BASELINE, label, d) for d in used])) for label in self.labels}
        out: dict[K | None, Evaluation] = {BASELINE: self._evaluation(BASELINE, used, base_means, engine, reuse)}
        for layer, stops in self.stops.items():
            items = self.order[: next(iter(stops.values())).items]
            means = {
                label: base_means[label]
                + float(np.mean([self._value(layer, label, d) - self._value(BASELINE, label, d) for d in items]))
                for label in self.labels
            }
            out[layer] = self._evaluation(layer, items, means, engine, reuse, stops)
        return out

    def _evaluation(
        self,
        variant: K | None,
        documents: list[Document],
        values: dict[str, float],
        engine: str,
        reuse: str | None,
        stops: dict[str, SequentialStop] | None = None,
    ) -> Evaluation:
        metrics, per_sample = {}, {}
        for label in self.labels:
            numbers = np.asarray([self._value(variant, label, d) for d in documents])
            stderr = float(numbers.std(ddof=1) / math.sqrt(len(numbers))) if len(numbers) > 1 else None
            direction = self.population.directions.get(label.split(",")[0])
            metrics[label] = MetricScore(values[label], stderr, direction, len(documents))
            by_leaf: dict[str, dict[Any, object]] = {}
            for doc in documents:
                by_leaf.setdefault(doc[0], {})[doc[1]] = self.raw[variant][label][doc]
            per_sample[label] = MetricSamples(MEAN, by_leaf, self.population.weight_by_size)
        return Evaluation(
            metrics,
            self.population.num_fewshot,
            len(documents),
            engine,
            per_sample=per_sample,
            prefix_reuse=reuse,
            version=self.population.version,
            sequential=stops or {},
        )


def with_baseline(variants: list[int | None]) -> list[int | None]:
    """A sequential share of variants: the baseline (scored on the documents its variants use), then its blocks.

    A share without blocks scores nothing. Every share of a sequential run has its own baseline; they
    are prefixes of one seeded order, so the longest holds the others (`longer_baseline`).
    """
    layers = [v for v in variants if v is not None]
    return [BASELINE, *layers] if layers else []


def longer_baseline(
    current: dict[str, Any], evaluations: dict[str, Any], rows: list[SampleRow]
) -> tuple[dict[str, Any], list[SampleRow]]:
    """Joining another share of a sequential run: keep whichever baseline was scored on more documents.

    `current` and `evaluations` map variant keys to evaluations (progress-file form); `rows` are the other
    share's per-document rows. Returns that share's evaluations and rows without its baseline when ours
    is at least as long (else unchanged: appended last, its rows replace ours in the sample log).
    """
    ours, theirs = current.get(BASELINE_KEY), evaluations.get(BASELINE_KEY)
    if theirs is None or ours is None or (theirs.get("samples") or 0) > (ours.get("samples") or 0):
        return evaluations, rows
    return (
        {k: v for k, v in evaluations.items() if k != BASELINE_KEY},
        [row for row in rows if row["variant"] is not BASELINE],
    )


def replayed(rows: dict[int | None, list[SampleRow]], labels: list[str]) -> dict[int | None, dict[str, MetricSamples]]:
    """A logged round's rows back as per-variant `MetricSamples` (labels: every metric key of the rows)."""
    specs = {label: {"aggregation": MEAN, "weight_by_size": None} for label in labels}
    return {variant: from_rows(found, specs) for variant, found in rows.items()}  # type: ignore[arg-type]


def row_labels(rows: dict[int | None, list[SampleRow]]) -> list[str]:
    """The metric labels of a logged round, in the order they were written (the first is the primary)."""
    first = rows[BASELINE][0]
    return [key for key in first if key not in ROW_KEYS]


def run_sequential_task(
    scorer: SequentialScorer,
    task: str,
    layers: list[int],
    *,
    precision: float,
    round_size: int,
    seed: int,
    run_dir: RunDir,
    suffix: str,
    state: PruneState,
    samples: SampleLog,
) -> Iterator[tuple[int | None, Evaluation]]:
    """Score `task` sequentially (resuming from its round log) and record every variant; yield each recorded.

    Rounds after the last one logged are scored on the model; the ones logged are replayed.
    """
    population = scorer.population(task)
    rounds = TaskRounds(task, population, layers, precision, round_size, seed)
    log = RoundLog(run_dir.partial_round_file(task, suffix))
    logged = log.read()
    log.truncate_to(len(logged))
    for found in logged:
        documents = rounds.next_documents()
        rounds.apply(documents, replayed(found, rounds.labels or row_labels(found)))
    while documents := rounds.next_documents():
        scored: dict[int | None, dict[str, MetricSamples]] = {}
        scorer.restrict(rounds.active)
        for variant in [BASELINE, *rounds.active]:
            with scorer.variant(variant):
                scored[variant] = scorer.score_documents(task, documents)
        log.append(rounds.rounds, scored)
        rounds.apply(documents, scored)
    scorer.restrict(layers)
    for variant, evaluation in rounds.evaluations(scorer.engine, scorer.reuse_status()).items():
        if state.has(task, variant):
            continue
        samples.append(task, to_rows(variant, evaluation.per_sample))
        state.record(task, variant, evaluation)
        yield variant, evaluation
