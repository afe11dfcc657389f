"""`layerprobe prune-curve`: score vs number of units removed, for several strategies of choosing them.

For n = 1 … ⌊max_fraction · L⌋ (sublayers: ⌊max_fraction · 2L⌋), each strategy of `strategies.py` /
`search.py` chooses a set of n units: Gromov et al.'s span of least angular change (`angular`, from a
given angular.json or measured first on the same corpus options), the last blocks, random spans (one
draw per seed `seed + i`, i < `baseline_seeds`), the blocks of least adjacent change (`influence`), the
least harmful single units (`delta`) and a greedy search (`greedy`). `delta` and `greedy` are driven by
one task and metric (`--metric`); every chosen set is then scored on every task and metric, each
distinct set once (`variants.py`: `--task corpus` scores sets of whole blocks in one shared-prefix
pass, the other tasks and sublayer sets remove the set in memory around the simple engine).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.core import (
    ANSWER,
    CORPUS_TASK,
    CURVE_UNITS,
    AngularSpec,
    LayerprobeError,
    PruneCurveSpec,
    ResultError,
    named_values,
    recorded_values,
)
from layerprobe.data import check_chat_template, images_before_loading
from layerprobe.evaluate import (
    check_sequential_tasks,
    check_tasks_fit_model,
    corpus_estimator_for,
    corpus_metric_line,
    corpus_metric_record,
    keyed_by_task_name,
    paired_delta,
    prepare_tasks,
)
from layerprobe.measure import run_angular
from layerprobe.model import (
    LoadedModel,
    Progress,
    Remover,
    find_layers,
    load_config,
    load_model,
    load_skeleton,
    load_tokenizer,
    model_info,
    model_kind,
)
from layerprobe.prune.agreement import check_angular_fits, load_angular_for
from layerprobe.prune.assemble import answer_flips, restricted
from layerprobe.prune.preflight import refuse_untraceable_units
from layerprobe.prune.search import Driver, SearchResult, check_prune_drop_for, delta_from_file, delta_measured, greedy
from layerprobe.prune.state import corpus_settings
from layerprobe.prune.strategies import (
    ATTENTION,
    BLOCK,
    DELTA,
    GREEDY,
    GROMOV,
    INFLUENCE,
    LAST,
    RANDOM,
    Variant,
    block_candidates,
    choose_spans,
    gromov_start,
    influence_order,
    last_starts,
    nested_sets,
    random_seed_method,
    random_starts,
    span_sets,
    sublayer_candidates,
)
from layerprobe.prune.variants import VariantScorer
from layerprobe.results import (
    AngularResult,
    AnswerFlips,
    BaselineScore,
    CurveStrategy,
    JSONObject,
    PruneCurveResult,
    PruneDropResult,
    RemovedSet,
    RunDir,
    RunTimer,
    SetScore,
    load_result,
    normal_ci95,
    write_json,
)
from layerprobe.stats import wilson_interval

__all__ = ["PruneCurveSpec", "choose_spans", "gromov_start", "run_prune_curve"]

if TYPE_CHECKING:
    from layerprobe.results import Evaluation


def run_prune_curve(
    spec: PruneCurveSpec,
    out_dir: Path,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
) -> PruneCurveResult:
    """Choose every strategy's sets, score the baseline and every set, write prune_curve.json into `out_dir`."""
    progress = progress or Progress()
    timer = RunTimer()
    spec = dataclasses.replace(spec, prune=keyed_by_task_name(spec.prune))  # a YAML path → its task name
    prune, methods, angular = spec.prune, spec.chosen_methods, spec.angular
    config = load_config(prune.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(prune.tasks, model_kind(config), prune.model.model, prune.engine)
    known = None if prune.model.layers_path else getattr(config, "num_hidden_layers", None)
    task, metric = spec.driver_choice
    estimator = corpus_estimator_for(prune.model, config, loaded) if CORPUS_TASK in prune.tasks else None
    if estimator is not None and task == CORPUS_TASK and metric is not None and metric not in estimator.metrics:
        raise LayerprobeError(
            f"--metric {spec.metric}: the corpus task reports {', '.join(estimator.metrics)} for this model "
            f"({estimator.name}).",
            hint=f"e.g. --metric {CORPUS_TASK}:{estimator.metrics[-1]}",
        )
    if estimator is not None:
        progress.note(corpus_metric_line(estimator))
    reads_angular = bool({GROMOV, INFLUENCE} & set(methods))
    angular_result = None
    if angular is not None:
        if not reads_angular:
            raise LayerprobeError(
                f"--angular is read by the angular and influence methods; --methods {','.join(methods)} has neither.",
                hint="Leave --angular out, or add angular or influence to --methods.",
            )
        angular_result = load_angular_for(Path(angular), known)
        _check_same_model(angular_result.model.id, Path(angular), prune.model.model)
    drop = None
    if spec.prune_drop is not None:
        drop = _prune_drop_for(spec.prune_drop, known, prune.model.model)
        metric = check_prune_drop_for(drop, spec.prune_drop, task, metric)
    if isinstance(known, int) and math.floor(spec.max_fraction * known) < 1:  # fail before loading weights
        raise LayerprobeError(f"--max-fraction {spec.max_fraction} of {known} blocks removes none.")
    if spec.unit != CURVE_UNITS[0]:  # sublayers: a weightless skeleton says which blocks run only with an image
        root = loaded.model if loaded is not None else load_skeleton(prune.model)[0]
        refuse_untraceable_units(find_layers(root, prune.model.layers_path))
    tokenizer = None
    if prune.corpus.chat_template:  # the corpus is read when angular is measured here, or for --task corpus
        if (angular is not None or not reads_angular) and CORPUS_TASK not in prune.tasks:
            raise LayerprobeError(
                f"--chat-template wraps the corpus documents, but this run reads no corpus (no angular measured, "
                f"no --task {CORPUS_TASK}).",
                hint=f"Leave --chat-template out (an angular.json records how it was measured), or add --task "
                f"{CORPUS_TASK}.",
            )
        tokenizer = load_tokenizer(prune.model) if loaded is None else loaded.tokenizer
        check_chat_template(tokenizer)
    images = None
    if estimator is not None and estimator.reads_images and loaded is None:  # a vision stack: its images, first
        images = images_before_loading(prune.model, prune.corpus)
        tokenizer = images[0] if images is not None else tokenizer  # the image processor, as in angular
    prepared = None
    if prune.precision is not None:  # the tasks built and checked before any weight: each needs per-document means
        progress.stage("Preparing tasks")
        prepared = prepare_tasks(prune)
        check_sequential_tasks(prepared.task_sets)
    if loaded is None:
        progress.stage("Loading model")
        purpose = estimator.purpose if estimator is not None else "head"
        loaded = load_model(prune.model, purpose=purpose, tokenizer=tokenizer)
    stack = find_layers(loaded.model, prune.model.layers_path)
    size = stack.num_layers
    max_n = math.floor(spec.max_fraction * size)
    if max_n < 1:
        raise LayerprobeError(f"--max-fraction {spec.max_fraction} of {size} blocks removes none.")
    if drop is not None and drop.model.num_layers != size:
        raise ResultError(f"{spec.prune_drop} measured {drop.model.num_layers} blocks; this model has {size}.")
    searching = GREEDY in methods or (DELTA in methods and drop is None)
    sublayers = None
    if spec.unit != CURVE_UNITS[0] and searching:
        sublayers = Remover.for_model(loaded.model, stack, ATTENTION).sublayers
    windows = None if images is None else images[1]
    scorer = VariantScorer(loaded, stack, prune, progress, sublayers, windows, prepared=prepared)
    angular_work = 0
    if reads_angular and angular_result is None:
        with scorer.counting():
            angular_result = run_angular(AngularSpec(prune.model, prune.corpus), progress, loaded, windows=windows)
        angular_work = scorer.work
    if angular_result is not None:
        check_angular_fits(angular_result, Path(angular or "angular"), size)
    driver = None
    if searching:  # the full model first: the driving metric must exist and have a direction
        progress.stage("Scoring the full model", len(prune.tasks), "eval")
        scorer.score([], prune.tasks)
        driver = _driver(scorer, task, metric)
    elif drop is not None and metric is not None:
        driver = Driver(task, metric, drop.tasks[task].metrics[metric].higher_is_better)
    context = _Choice(spec, size, max_n, angular_result, angular, angular_work, drop, scorer, driver, progress)
    searches = {name: context.search(name) for name in _expanded(methods, spec.seeds)}
    variants = [v for _, found in searches.values() for v in found.sets.values()]
    progress.stage("Evaluating (task × variant)", scorer.missing([(), *variants], prune.tasks), "eval")
    scorer.score(variants, prune.tasks)
    driver = driver or _driver(scorer, task, metric)
    gromov = context.gromov()
    result = PruneCurveResult(
        model=model_info(loaded, stack),
        settings=curve_settings(spec, driver)
        | ({} if estimator is None else {"corpus_metric": corpus_metric_record(estimator, prune.seed)}),
        selection={}
        if angular_result is None
        else {
            "n": list(gromov),
            "start": list(gromov.values()),
            "distance": [angular_result.distance[s][s + n] for n, s in gromov.items()],
        },
        baseline={t: _baseline(scorer.evaluation(t, ()), prune.precision is not None) for t in prune.tasks},
        methods={
            name: CurveStrategy(
                unit, {n: _removed_set(scorer, prune.tasks, v) for n, v in found.sets.items()}, found.cost
            )
            for name, (unit, found) in searches.items()
        },
        run=timer.finish(loaded.device_label),
    )
    write_json(RunDir(out_dir).prune_curve_json, result.to_dict())
    return result


def _expanded(methods: tuple[str, ...], seeds: list[int]) -> list[str]:
    """The methods with random replaced by one entry per seed (`random_1234`, …)."""
    return [m for method in methods for m in ([random_seed_method(s) for s in seeds] if method == RANDOM else [method])]


@dataclass(frozen=True)
class _Choice:
    """What the strategies choose from: the model's size, the angular distances, the prune-drop file, the scorer."""

    spec: PruneCurveSpec
    size: int
    max_n: int
    angular: AngularResult | None
    angular_path: str | None
    angular_work: int
    drop: PruneDropResult | None
    scorer: VariantScorer
    driver: Driver | None
    progress: Progress

    def gromov(self) -> dict[int, int]:
        return (
            {}
            if self.angular is None
            else {n: gromov_start(self.angular.distance, n) for n in range(1, self.max_n + 1)}
        )

    def search(self, name: str) -> tuple[str, SearchResult]:
        """(unit, the sets and cost) of one strategy."""
        fixed: JSONObject = {"variants_scored": 0, "block_tokens": 0}
        seen: JSONObject = {"variants_scored": 0, "block_tokens": self.angular_work}
        seen["source"] = self.angular_path or "measured"
        if name == GROMOV:
            return BLOCK, SearchResult(span_sets(self.gromov()), seen)
        if name == INFLUENCE:
            assert self.angular is not None
            order = [(b, BLOCK) for b in influence_order(self.angular.distance)]
            return BLOCK, SearchResult(nested_sets(order, self.max_n), seen)
        if name == LAST:
            return BLOCK, SearchResult(span_sets(last_starts(self.size, self.max_n)), fixed)
        if name.startswith(RANDOM + "_"):
            seed = int(name.rpartition("_")[2])
            return BLOCK, SearchResult(span_sets(random_starts(self.size, self.max_n, seed)), {**fixed, "seed": seed})
        assert self.driver is not None
        sublayers = self.spec.unit != CURVE_UNITS[0]
        unit, per_block = ("sublayer", 2) if sublayers else (BLOCK, 1)
        max_n = math.floor(self.spec.max_fraction * per_block * self.size)
        candidates = sublayer_candidates(self.size) if sublayers else block_candidates(self.size)
        if name == DELTA and self.drop is not None:
            return unit, delta_from_file(self.drop, str(self.spec.prune_drop), max_n, self.driver)
        if name == DELTA:
            return unit, delta_measured(self.scorer, candidates, max_n, self.driver, self.progress)
        return unit, greedy(self.scorer, candidates, max_n, self.driver, self.progress)


def _driver(scorer: VariantScorer, task: str, metric: str | None) -> Driver:
    """The driving metric, checked against what the task reported on the full model."""
    base = scorer.evaluation(task, ())
    name = metric or next(iter(base.metrics))
    if name not in base.metrics:
        raise LayerprobeError(
            f"--metric {task}:{name}: {task} reports {', '.join(base.metrics)}.", hint="Pick one of those metrics."
        )
    direction = base.metrics[name].higher_is_better
    if direction is None:
        raise LayerprobeError(
            f"{task}'s {name} has no single direction (its subtasks disagree), so it cannot choose what to remove.",
            hint="Pick another metric or task with --metric TASK:METRIC.",
        )
    return Driver(task, name, direction)


def _prune_drop_for(path: str, known: int | None, model: str) -> PruneDropResult:
    """Read a prune_drop.json for delta: a prune-drop result of this model (same id, same block count)."""
    result = load_result(Path(path))
    if not isinstance(result, PruneDropResult):
        raise ResultError(f"{path} is not a prune-drop result.", hint="Pass the prune_drop.json of the same model.")
    _check_same_model(result.model.id, Path(path), model)
    if known is not None and result.model.num_layers != known:
        raise ResultError(f"{path} measured {result.model.num_layers} blocks; this model has {known}.")
    return result


def _baseline(evaluation: Evaluation, sequential: bool) -> dict[str, BaselineScore]:
    """The full model's scores (a sequential run's on every document any set used, counted in `items`)."""
    items = evaluation.samples if sequential else None
    return {
        name: BaselineScore(s.value, s.stderr, normal_ci95(s.value, s.stderr), s.higher_is_better is not False, items)
        for name, s in evaluation.metrics.items()
    }


def _removed_set(scorer: VariantScorer, tasks: tuple[str, ...], variant: Variant) -> RemovedSet:
    """One chosen set with every task's and metric's score and paired ΔP (95 % intervals).

    A set scored sequentially (`--precision`) also records how it stopped and its anytime interval; its
    score is the full model's plus the mean paired difference on its own documents.
    """
    scores: dict[str, dict[str, SetScore]] = {}
    for task in tasks:
        base, pruned = scorer.evaluation(task, ()), scorer.evaluation(task, variant)
        scores[task] = {}
        for name, score in base.metrics.items():
            value = pruned.metrics[name]
            stop = pruned.sequential.get(name)
            pair = None
            if name in base.per_sample and name in pruned.per_sample:
                samples = pruned.per_sample[name]
                pair = paired_delta(
                    base.per_sample[name] if stop is None else restricted(base.per_sample[name], samples), samples
                )
            interval = None if pair is None or pair.ci95 is None else list(pair.ci95)
            found = scorer.value(task, variant, name)
            number = value.value if found is None else found
            scores[task][name] = SetScore(
                number,
                value.stderr,
                normal_ci95(number, value.stderr),
                number - score.value,
                None if pair is None else pair.stderr,
                interval,
                *(() if stop is None else (stop.items, stop.stop, list(stop.interval))),
            )
    blocks = [b for b, kind in variant if kind == BLOCK]
    flips = {task: rates for task in tasks if (rates := _flip_rates(scorer, task, variant))}
    return RemovedSet(blocks, [(b, kind) for b, kind in variant if kind != BLOCK], scores, flips)


def _flip_rates(scorer: VariantScorer, task: str, variant: Variant) -> dict[str, AnswerFlips]:
    """Per filter of a generating task: the answers that differ from the full model's, with a Wilson 95 % interval."""
    base, pruned = scorer.evaluation(task, ()), scorer.evaluation(task, variant)
    out = {}
    for label, answers in base.per_sample.items():
        documents = sum(len(docs) for docs in answers.values.values())
        flips = answer_flips(answers, pruned.per_sample.get(label)) if answers.aggregation == ANSWER else None
        if flips is not None and documents:
            low, high = wilson_interval(flips, documents) or (0.0, 1.0)
            out[label.split(",", 1)[1]] = AnswerFlips(flips, documents, flips / documents, [low, high])
    return out


def _check_same_model(measured: str, path: Path, model: str) -> None:
    """Refuse a result measured on another checkpoint (local paths compared resolved)."""
    same = measured == model or (os.path.exists(model) and os.path.abspath(measured) == os.path.abspath(model))
    if not same:
        raise ResultError(
            f"{path} measured {measured}, not {model}.",
            hint="Pass a result of the same model, or leave the option out to measure it first.",
        )


def curve_settings(spec: PruneCurveSpec, driver: Driver) -> dict[str, object]:
    """The `settings` block of prune_curve.json: the tasks, the curve's recorded settings, the corpus, the scoring.

    --metric is recorded as what it resolved to: what delta and greedy maximise (or minimise).
    """
    prune = spec.prune
    return {
        "tasks": list(prune.tasks),
        **(recorded_values(spec) | {"metric": driver.to_dict()}),
        "corpus": corpus_settings(prune.corpus),
        **named_values(prune, spec.SCORING_RECORDED),
    }
