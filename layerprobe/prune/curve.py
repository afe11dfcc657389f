"""`layerprobe prune-curve`: score vs number of consecutive blocks removed, for several ways of choosing them.

For n = 1 … ⌊max_fraction · L⌋ blocks, Gromov et al.'s rule removes the span [l*, l*+n) with
l* = argmin_l d(x^l, x^(l+n)) (the angular distance between the span's input and output; from a given
angular.json or measured first on the same corpus options). Baselines: the last n blocks before the
final one ([L-1-n, L-1)), and with `baseline_seeds` k, k random spans per n (seed `seed + i` for
the i-th, recorded). Every distinct span is scored once with prune-drop's scorers; `--task corpus`
scores all spans in one shared-prefix pass, the other tasks remove the span in memory (simple engine).
"""

from __future__ import annotations

import math
import os
import random
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.core import CORPUS_TASK, AngularSpec, LayerprobeError, PruneSpec, ResultError
from layerprobe.data import check_chat_template
from layerprobe.evaluate import CorpusScorer, check_tasks_fit_model, make_scorers, paired_delta
from layerprobe.measure import run_angular
from layerprobe.model import (
    LayerStack,
    LoadedModel,
    Progress,
    find_layers,
    load_config,
    load_model,
    load_tokenizer,
    model_info,
    model_kind,
    removed_blocks,
)
from layerprobe.prune.agreement import check_angular_fits, load_angular_for
from layerprobe.prune.state import corpus_settings
from layerprobe.results import (
    AngularResult,
    CurveMethod,
    CurveMetric,
    PruneCurveResult,
    RunDir,
    RunTimer,
    write_json,
)

if TYPE_CHECKING:
    from layerprobe.results import Evaluation

Span = tuple[int, ...]
GROMOV, LAST = "angular", "last"


@dataclass(frozen=True)
class PruneCurveSpec:
    """One `layerprobe prune-curve` run: the prune-drop options (tasks, corpus…) plus the curve's own."""

    prune: PruneSpec
    max_fraction: float = 0.5
    baseline_seeds: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.max_fraction <= 1:
            raise LayerprobeError(f"--max-fraction must be in (0, 1], got {self.max_fraction}.")
        if self.baseline_seeds < 0:
            raise LayerprobeError(f"--baseline-seeds must be >= 0, got {self.baseline_seeds}.")


def gromov_start(distance: list[list[float]], n: int) -> int:
    """l* = argmin_l d(x^l, x^(l+n)) over l = 0 … L-n (the first on ties)."""
    size = len(distance) - 1
    return min(range(size - n + 1), key=lambda l: (distance[l][l + n], l))


def choose_spans(distance: list[list[float]], max_n: int, seeds: list[int]) -> dict[str, dict[int, int]]:
    """Method → n → start of the removed span, for Gromov's rule, the last-blocks baseline and each seed."""
    size = len(distance) - 1
    methods: dict[str, dict[int, int]] = {GROMOV: {}, LAST: {}}
    for n in range(1, max_n + 1):
        methods[GROMOV][n] = gromov_start(distance, n)
        if n <= size - 1:
            methods[LAST][n] = size - 1 - n
    for seed in seeds:
        rng = random.Random(seed)
        methods[f"random_{seed}"] = {n: rng.randrange(size - n + 1) for n in range(1, max_n + 1)}
    return methods


def run_prune_curve(
    spec: PruneCurveSpec,
    out_dir: Path,
    angular: str | None = None,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
) -> PruneCurveResult:
    """Choose the spans, score the baseline and every span, write prune_curve.json into `out_dir`."""
    progress = progress or Progress()
    timer = RunTimer()
    prune = spec.prune
    config = load_config(prune.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(prune.tasks, model_kind(config), prune.model.model, prune.engine)
    known = None if prune.model.layers_path else getattr(config, "num_hidden_layers", None)
    angular_result = None
    if angular is not None:
        angular_result = load_angular_for(Path(angular), known)
        _check_same_model(angular_result, Path(angular), prune.model.model)
    if isinstance(known, int) and math.floor(spec.max_fraction * known) < 1:  # fail before loading weights
        raise LayerprobeError(f"--max-fraction {spec.max_fraction} of {known} blocks removes none.")
    tokenizer = None
    if prune.corpus.chat_template:  # the corpus is read when angular is measured here, or for --task corpus
        if angular is not None and CORPUS_TASK not in prune.tasks:
            raise LayerprobeError(
                f"--chat-template wraps the corpus documents, but with --angular and no --task {CORPUS_TASK} "
                "no corpus is read.",
                hint=f"Leave --chat-template out (the angular.json records how it was measured), or add --task "
                f"{CORPUS_TASK}.",
            )
        tokenizer = load_tokenizer(prune.model) if loaded is None else loaded.tokenizer
        check_chat_template(tokenizer)
    if loaded is None:
        progress.stage("Loading model")
        loaded = load_model(prune.model, purpose="head", tokenizer=tokenizer)
    stack = find_layers(loaded.model, prune.model.layers_path)
    size = stack.num_layers
    max_n = math.floor(spec.max_fraction * size)
    if max_n < 1:
        raise LayerprobeError(f"--max-fraction {spec.max_fraction} of {size} blocks removes none.")
    if angular_result is None:
        angular_result = run_angular(AngularSpec(prune.model, prune.corpus), progress, loaded)
    check_angular_fits(angular_result, Path(angular or "angular"), size)
    seeds = [prune.seed + i for i in range(spec.baseline_seeds)]
    chosen = choose_spans(angular_result.distance, max_n, seeds)
    spans = sorted({tuple(range(s, s + n)) for per_n in chosen.values() for n, s in per_n.items()})
    progress.stage("Evaluating (task × variant)", len(prune.tasks) * (len(spans) + 1), "eval")
    scores = _score_all(loaded, stack, prune, spans, progress)
    result = PruneCurveResult(
        model=model_info(loaded, stack),
        settings=_settings(spec, angular, seeds),
        selection={
            "n": list(range(1, max_n + 1)),
            "start": [chosen[GROMOV][n] for n in range(1, max_n + 1)],
            "distance": [angular_result.distance[s][s + n] for n, s in sorted(chosen[GROMOV].items())],
        },
        tasks={task: _task_curve(scores[task], chosen) for task in prune.tasks},
        run=timer.finish(loaded.device_label),
    )
    write_json(RunDir(out_dir).prune_curve_json, result.to_dict())
    return result


def _check_same_model(angular: AngularResult, path: Path, model: str) -> None:
    """Refuse an angular.json measured on another checkpoint (local paths compared resolved)."""
    same = angular.model.id == model or (
        os.path.exists(model) and os.path.abspath(angular.model.id) == os.path.abspath(model)
    )
    if not same:
        raise ResultError(
            f"{path} measured {angular.model.id}, not {model}.",
            hint="Pass the angular.json of the same model, or leave --angular out to measure it first.",
        )


def _score_all(
    loaded: LoadedModel, stack: LayerStack, prune: PruneSpec, spans: list[Span], progress: Progress
) -> dict[str, dict[Span, Evaluation]]:
    """Every task's Evaluation for the baseline (()) and every span."""
    scores: dict[str, dict[Span, Evaluation]] = {task: {} for task in prune.tasks}
    others = tuple(t for t in prune.tasks if t != CORPUS_TASK)
    if CORPUS_TASK in prune.tasks:
        corpus = CorpusScorer(loaded, stack, prune.corpus, list(spans), prune.batch_size, prune.engine)
        for span in [(), *spans]:
            with corpus.variant(span or None):
                scores[CORPUS_TASK][span] = corpus.score(CORPUS_TASK)
            progress.on_advance(1)
    if others:  # lm-eval / SQuAD: the span is removed in memory around the scorer's baseline
        simple = replace(prune, tasks=others, engine="simple")
        for scorer, tasks in make_scorers(loaded, stack, simple, [], progress):
            for span in [(), *spans]:
                context: AbstractContextManager[LayerStack | None] = (
                    removed_blocks(stack, list(span)) if span else nullcontext()
                )
                with context, scorer.variant(None):
                    for task in tasks:
                        scores[task][span] = scorer.score(task)
                        if not scorer.reports_progress:
                            progress.on_advance(1)
    return scores


def _task_curve(evaluations: dict[Span, Evaluation], chosen: dict[str, dict[int, int]]) -> dict[str, CurveMetric]:
    """Each metric's curve: per method, the score and ΔP (with its paired stderr) of every n it chose."""
    base = evaluations[()]
    metrics = {}
    for name, score in base.metrics.items():
        methods = {}
        for method, per_n in chosen.items():
            scores: list[float] = []
            stderrs: list[float | None] = []
            deltas: list[float] = []
            delta_stderrs: list[float | None] = []
            for n, start in sorted(per_n.items()):
                evaluation = evaluations[tuple(range(start, start + n))]
                pruned = evaluation.metrics[name]
                pair = None
                if name in base.per_sample and name in evaluation.per_sample:
                    pair = paired_delta(base.per_sample[name], evaluation.per_sample[name])
                scores.append(pruned.value)
                stderrs.append(pruned.stderr)
                deltas.append(pruned.value - score.value)
                delta_stderrs.append(None if pair is None else pair.stderr)
            ns, starts = sorted(per_n), [per_n[n] for n in sorted(per_n)]
            methods[method] = CurveMethod(ns, starts, scores, stderrs, deltas, delta_stderrs)
        metrics[name] = CurveMetric(score.value, score.stderr, score.higher_is_better is not False, methods)
    return metrics


def _settings(spec: PruneCurveSpec, angular: str | None, seeds: list[int]) -> dict[str, object]:
    """The `settings` block of prune_curve.json."""
    prune = spec.prune
    return {
        "tasks": list(prune.tasks),
        "max_fraction": spec.max_fraction,
        "baseline_seeds": seeds,
        "angular": angular,  # None: measured in this run on the corpus below
        "corpus": corpus_settings(prune.corpus),
        "limit": prune.limit,
        "num_fewshot": prune.num_fewshot,
        "seed": prune.seed,
        "batch_size": prune.batch_size,
        "engine": prune.engine,
    }
