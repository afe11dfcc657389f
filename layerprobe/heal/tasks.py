"""`heal --task`: each task's score of the original, the pruned and the healed model, paired, with recovery.

The tasks are scored by the evaluate room as prune-drop scores them (lm-eval tasks built once before any
weight loads, the simple engine, the same per-document values), with two variants in place of "block l
removed": `PRUNED` takes the removed blocks out, `HEALED` also swaps in the healed weights. Each model's
score is lm-eval's; each difference to the original is prune-drop's paired ΔP (`evaluate.paired_delta`:
closed form for means, lm-eval's bootstrap otherwise); the task recovery is the held-out recovery's
paired bootstrap (recovery.py) over documents, for metrics whose per-document values are numbers.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layerprobe.core import CORPUS_TASK, HealSpec, PruneSpec, TaskError
from layerprobe.evaluate import (
    PreparedTasks,
    check_task_code,
    check_tasks_fit_model,
    make_scorers,
    paired_delta,
    prepare_tasks,
)
from layerprobe.heal.recovery import recovery
from layerprobe.model import CAUSAL_LM, Progress, Remover, removed_blocks

if TYPE_CHECKING:
    from layerprobe.model import LayerStack, LoadedModel
    from layerprobe.results import Evaluation, MetricSamples

PRUNED, HEALED = 0, 1  # the two variants' keys, as the scorers' "layer"
Heal = Callable[[], contextlib.AbstractContextManager[object]]


def task_spec(spec: HealSpec) -> PruneSpec:
    """The scoring settings of `heal --task` as the evaluate room reads them (the simple engine)."""
    return PruneSpec(
        model=spec.model,
        tasks=spec.tasks,
        limit=spec.limit,
        num_fewshot=spec.num_fewshot,
        batch_size=spec.batch_size,
        seed=spec.seed,
        include_path=spec.include_path,
        trust_task_code=spec.trust_task_code,
        engine="simple",
        corpus=spec.corpus,
    )


def check_heal_tasks(spec: HealSpec) -> PreparedTasks | None:
    """Refuse what cannot be scored and build every lm-eval task, before any weight loads (None: no --task)."""
    if not spec.tasks:
        return None
    if CORPUS_TASK in spec.tasks:
        raise TaskError(
            "heal always compares the three models on held-out corpus windows; --task corpus would score the "
            "calibration windows.",
            hint="Drop --task corpus (the held-out NLL, KL and top-1 agreement are in heal.json).",
        )
    check_tasks_fit_model(spec.tasks, CAUSAL_LM, spec.model.model)
    check_task_code(list(spec.tasks), spec.include_path, spec.trust_task_code)
    return prepare_tasks(task_spec(spec))


@dataclass(frozen=True)
class HealVariants(Remover):
    """Variant PRUNED: the removed blocks taken out; HEALED: also the healed weights swapped in."""

    removed: Sequence[int] = ()
    heal: Heal | None = field(default=None, compare=False)

    @contextlib.contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        if layer is None:
            yield
            return
        with contextlib.ExitStack() as stacked:
            if layer == HEALED and self.heal is not None:
                stacked.enter_context(self.heal())
            stacked.enter_context(removed_blocks(self.stack, list(self.removed)))
            yield


def _paired(delta: Any) -> dict[str, object] | None:
    if delta is None:
        return None
    return {
        "value": delta.delta,
        "stderr": delta.stderr,
        "ci95": list(delta.ci95) if delta.ci95 is not None else None,
        "method": delta.method,
    }


def _documents(samples: MetricSamples) -> list[float] | None:
    """Per-document values in a fixed order (leaf task, then document), None if any is not a finite number."""
    values = []
    for task in sorted(samples.values):
        for doc in sorted(samples.values[task]):
            value = samples.values[task][doc]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                return None
            values.append(float(value))
    return values


def task_entry(evaluations: dict[str, Evaluation], draws: int, seed: int) -> dict[str, Any]:
    """One task's record: per metric the three scores, the paired differences to the original, the recovery."""
    original, pruned, healed = (evaluations[m] for m in ("original", "pruned", "healed"))
    metrics: dict[str, Any] = {}
    for name, score in original.metrics.items():
        if name not in pruned.metrics or name not in healed.metrics:
            continue
        entry: dict[str, Any] = {"higher_is_better": score.higher_is_better}
        for label, evaluation in evaluations.items():
            s = evaluation.metrics[name]
            entry[label] = {"value": s.value, "stderr": s.stderr}
        base = original.per_sample.get(name)
        samples = {label: e.per_sample.get(name) for label, e in (("pruned", pruned), ("healed", healed))}
        for label in ("pruned", "healed"):
            other = samples[label]
            found = None if base is None or other is None else paired_delta(base, other, draws=draws, seed=seed)
            entry[f"{label}_delta"] = _paired(found)
        values = [None if s is None else _documents(s) for s in (base, samples["pruned"], samples["healed"])]
        if any(v is None for v in values) or len({len(v or []) for v in values}) != 1:
            entry["recovery"] = {
                "value": None,
                "ci95": None,
                "defined": False,
                "reason": "the per-document values do not pair as numbers",
            }
        else:
            o, p, h = (v or [] for v in values)
            found_recovery = recovery(o, p, h, draws=draws, seed=seed)
            entry["recovery"] = {
                "value": found_recovery.value,
                "ci95": list(found_recovery.ci95) if found_recovery.ci95 is not None else None,
                "defined": found_recovery.defined,
                "reason": found_recovery.reason,
            }
        metrics[name] = entry
    return {"samples": original.samples, "num_fewshot": original.num_fewshot, "metrics": metrics}


def score_tasks(
    loaded: LoadedModel,
    stack: LayerStack,
    spec: HealSpec,
    removed: Sequence[int],
    heal: Heal,
    prepared: PreparedTasks,
    progress: Progress,
    draws: int,
) -> dict[str, Any]:
    """Task → its record (`task_entry`), every task scored on the original, the pruned and the healed model."""
    remover = HealVariants(stack, removed=tuple(removed), heal=heal)
    settings = task_spec(spec)
    scorers = make_scorers(loaded, stack, settings, [PRUNED, HEALED], progress, remover, prepared)
    progress.stage("Scoring tasks", 3 * len(spec.tasks), "eval")
    found: dict[str, Any] = {}
    for scorer, tasks in scorers:
        for task in tasks:
            evaluations = {}
            for label, key in (("original", None), ("pruned", PRUNED), ("healed", HEALED)):
                with scorer.variant(key):
                    evaluations[label] = scorer.score(task)
                if not scorer.reports_progress:
                    progress.on_advance(1)
            found[task] = task_entry(evaluations, draws, spec.seed)
    return found
