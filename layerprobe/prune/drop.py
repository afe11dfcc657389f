"""`layerprobe prune-drop`: ΔP(l) = P_pruned(l) − P_original, the score lost when block l alone is removed.

(Mix-LN eq. 9.) The model is loaded once. The baseline is scored, then each selected block is taken out
of the model in memory (`model.removed_blocks`: nothing copied, nothing reloaded, every other weight
untouched), the model is scored again and the block is put back. Every finished (task, variant) is saved
at once (`state.py`, `samples.py`), so `--resume` continues an interrupted run without recomputing
anything; the result is assembled from those records (`assemble.py`), or a shard of them is written
(`shards.py`). This module only runs the experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from layerprobe.core import CORPUS_TASK, LayerprobeError, PruneSpec, ResultError, Share, parse_layer_ranges
from layerprobe.data import check_chat_template, images_before_loading
from layerprobe.evaluate import (
    PreparedTasks,
    check_sequential_tasks,
    check_tasks_fit_model,
    corpus_estimator_for,
    corpus_metric_line,
    corpus_metric_record,
    keyed_by_task_name,
    make_scorers,
    prepare_tasks,
)
from layerprobe.model import (
    EvaluationEvent,
    LayerStack,
    LoadedModel,
    Progress,
    Remover,
    World,
    check_loadable,
    find_layers,
    image_only_blocks,
    load_config,
    load_model,
    load_tokenizer,
    model_info,
    model_kind,
    skeleton_stack,
)
from layerprobe.model import world as distributed_world
from layerprobe.prune.agreement import (
    AngularSource,
    angular_model_mismatch,
    check_angular_fits,
    find_angular,
    load_angular_for,
)
from layerprobe.prune.assemble import assemble_result, prune_settings
from layerprobe.prune.resume import finished_result, resumed_line
from layerprobe.prune.samples import SampleLog, SampleRow
from layerprobe.prune.sequential import SequentialScorer, longer_baseline, run_sequential_task, with_baseline
from layerprobe.prune.shards import write_shard
from layerprobe.prune.state import PruneState, check_state_paths, fingerprint, variant_key
from layerprobe.results import (
    JSONObject,
    PruneDropResult,
    RunDir,
    RunTimer,
    rank_suffix,
    read_json,
    to_rows,
    write_json,
)


def _without_image_only(layers: list[int], span: int, stack: LayerStack, progress: Progress | None) -> list[int]:
    """The starts whose span holds no image-only block (mllama's cross-attention), saying which are left out.

    A text-only pass skips such a block, so removing it changes nothing there: its variant would be the baseline
    (or, in a longer span, the span without it), and evaluating it would only spend time.
    """
    skipped = set(image_only_blocks(stack))
    if not skipped:
        return layers
    kept = [l for l in layers if not skipped & set(range(l, l + span))]
    if progress is not None and len(kept) < len(layers):
        left_out = ", ".join(str(l) for l in layers if l not in kept)
        blocks = ", ".join(map(str, sorted(skipped)))
        progress.note(
            f"Start(s) {left_out} not evaluated: their span holds block(s) {blocks}, cross-attention that runs only "
            "with an image, so removing it changes nothing text-only."
        )
    return kept


def run_prune_drop(
    spec: PruneSpec,
    out_dir: Path,
    resume: bool = False,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
    shard: Share | None = None,
    world: World | None = None,
) -> PruneDropResult | None:
    """Score the baseline and every selected block removed; write prune_drop.json into `out_dir`.

    `shard` (i of N, also 0/1) scores only that share of the variants and writes prune_drop.shard.json
    for `layerprobe merge` instead, returning None. Under `accelerate launch`/`torchrun` every rank
    scores a share of the variants (of the shard's), rank 0 gathers them and writes; every rank returns
    the result. With `resume`, a run that already finished in `out_dir` is returned as it is when it is
    this very run's (`resume.py`).
    """
    progress = progress or Progress()
    spec = keyed_by_task_name(spec)  # a task given by its YAML path is keyed by its task name everywhere
    sharded = shard is not None  # `--shard 0/1` is a shard too: its file is what merge reads
    shard = shard or Share()
    world = world or distributed_world()
    timer = RunTimer()
    out_dir = Path(out_dir)
    if loaded is None:
        check_loadable(spec.model, progress.note)  # e.g. bitsandbytes missing for --load-in-4bit: before any loading
    config = load_config(spec.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(spec.tasks, model_kind(config), spec.model.model, spec.engine)
    skeleton = skeleton_stack(spec.model) if loaded is None else None
    if skeleton is not None:
        parse_layer_ranges(spec.layers, skeleton.num_layers)  # fail before minutes of loading
    elif isinstance(getattr(config, "num_hidden_layers", None), int) and not spec.model.layers_path:
        parse_layer_ranges(spec.layers, config.num_hidden_layers)
    check_state_paths(out_dir)
    angular_path = find_angular(spec.angular, out_dir)
    known_layers = skeleton.num_layers if skeleton is not None else None
    if known_layers is None and not spec.model.layers_path:
        known_layers = getattr(config, "num_hidden_layers", None)
    # An angular.json found in --out, not asked for, may be another model's: judged once the model is known.
    checked_layers = known_layers if spec.angular is not None else None
    angular = (
        None if angular_path is None else AngularSource(angular_path, load_angular_for(angular_path, checked_layers))
    )
    if spec.corpus.chat_template and CORPUS_TASK not in spec.tasks:
        raise LayerprobeError(
            f"--chat-template wraps the documents of --task {CORPUS_TASK}; it does not change lm-eval tasks' prompts.",
            hint=f"Add --task {CORPUS_TASK}, or leave --chat-template out.",
        )
    # Everything cheap before any weight: the tokenizer, then the tasks (names, YAML, data, few-shot pools).
    estimator = corpus_estimator_for(spec.model, config, loaded) if CORPUS_TASK in spec.tasks else None
    if estimator is not None and world.is_main:
        progress.note(corpus_metric_line(estimator))
    images = None
    if estimator is not None and estimator.reads_images and loaded is None:  # a vision stack: its images, first
        images = images_before_loading(spec.model, spec.corpus)
    if images is not None:
        tokenizer = images[0]  # the image processor stands in for the tokenizer, as in angular
    else:
        tokenizer = load_tokenizer(spec.model) if loaded is None else loaded.tokenizer
    if spec.corpus.chat_template:
        check_chat_template(tokenizer)
    # A finished run of these tasks in --out may be reused (--resume): the tasks are then prepared only if
    # it is not (lm-eval's task index and data: the largest fixed cost of a resume that evaluates nothing).
    reusable = resume and not sharded and _finished_with(RunDir(out_dir), spec.tasks)
    prepared = None if reusable else _prepared(spec, progress)
    if loaded is None:
        progress.stage("Loading model")
        purpose = estimator.purpose if estimator is not None else "head"
        loaded = load_model(spec.model, purpose=purpose, lm_eval=images is None, tokenizer=tokenizer)
    stack = find_layers(loaded.model, spec.model.layers_path)
    remover = Remover.for_model(loaded.model, stack, spec.unit, spec.span)
    selected = parse_layer_ranges(spec.layers, stack.num_layers)
    layers = remover.ablation.starts(stack.num_layers, selected)
    if spec.layers is not None and len(layers) < len(selected) and layers and world.is_main:
        left_out = ", ".join(str(l) for l in selected if l not in layers)
        progress.note(
            f"--span {spec.span}: start(s) {left_out} cannot hold {spec.span} blocks inside the model's "
            f"{stack.num_layers} (l ≤ {stack.num_layers - spec.span}); left out."
        )
    layers = _without_image_only(layers, spec.span, stack, progress if world.is_main else None)
    if not layers:
        raise LayerprobeError(
            f"No selected start leaves a span of {spec.span} blocks inside the model's {stack.num_layers}.",
            hint=f"Select starts l <= {stack.num_layers - spec.span} with --layers.",
        )
    info = model_info(loaded, stack)
    if angular is not None:
        if spec.angular is not None:
            check_angular_fits(angular.result, angular.path, stack.num_layers)
        mismatch = angular_model_mismatch(angular.result.model, info)
        if mismatch is not None and spec.angular is not None:
            raise LayerprobeError(
                f"{angular.path} measured another model ({mismatch}).",
                hint="Pass the angular.json of this model (layerprobe angular MODEL --out DIR), or omit --angular.",
            )
        if mismatch is not None:  # found in --out, not asked for: the run goes on without the comparison
            if world.is_main:
                progress.note(f"{angular.path} measured another model ({mismatch}); no agreement with it is recorded.")
            angular, angular_path = None, None
    print_ = fingerprint(spec, info)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir, suffix = RunDir(out_dir), rank_suffix(world.rank, world.size)  # each rank its own progress files
    settings = prune_settings(spec, layers, remover)
    if estimator is not None:
        settings["corpus_metric"] = corpus_metric_record(estimator, spec.seed)
    if resume and not sharded and run_dir.prune_drop_json.is_file() and not run_dir.partial_jsons():
        finished, reuse_line = finished_result(run_dir.prune_drop_json, settings, info)
        if world.is_main:
            progress.note(reuse_line)
        if finished is not None:
            return finished
    if prepared is None:
        prepared = _prepared(spec, progress)
    if images is not None:
        prepared.corpus_items = images[1]
    state = PruneState.open(out_dir, print_, resume, run_dir.partial_json(suffix).name)
    samples = SampleLog.open(out_dir, resume, suffix)
    unpaired = samples.reconcile(state)
    world.barrier()  # every rank has read the progress files before any rank writes its own
    shard_variants = shard.of([None, *layers])
    variants = world.share.of(shard_variants)
    if spec.precision is not None:  # every share scores the baseline on the documents its own variants use
        shard_variants = with_baseline(shard_variants)
        variants = with_baseline(world.share.of(shard_variants[1:]))
    total = len(spec.tasks) * len(variants)
    remaining = sum(not state.has(t, v) for t in spec.tasks for v in variants)
    mine_layers = [v for v in variants if v is not None]  # this rank's (and shard's) share only
    scorers = make_scorers(loaded, stack, spec, mine_layers, progress, remover, prepared) if remaining else []
    journals = [
        scorer.keep_answers(run_dir.journal(suffix), print_, resume)
        for scorer, _ in scorers
        if hasattr(scorer, "keep_answers")
    ]
    if resume:
        batches = sum(journal.reused for journal in journals)
        damaged = state.damaged + unpaired + sum(journal.dropped for journal in journals)
        progress.note(resumed_line(total - remaining, total, batches, damaged, out_dir))
    progress.stage("Evaluating (task × variant)", remaining, "eval")
    with progress.watching_blocks(stack):
        for scorer, tasks in scorers if spec.precision is None else []:
            for layer in variants:
                pending = [t for t in tasks if not state.has(t, layer)]
                if not pending:
                    continue
                with scorer.variant(layer):
                    for task in pending:
                        evaluation = scorer.score(task)
                        new_rows = to_rows(layer, evaluation.per_sample)
                        samples.append(task, new_rows)  # rows first: see samples.py
                        state.record(task, layer, evaluation, new_rows)
                        if not scorer.reports_progress:
                            progress.on_advance(1)
                        progress.on_evaluation(EvaluationEvent(task, layer, scorer.engine, evaluation, scorer))
        for scorer, tasks in scorers if spec.precision is not None else []:
            _run_sequential(
                spec, cast(SequentialScorer, scorer), tasks, mine_layers, run_dir, suffix, state, samples, progress
            )
    mine: dict[str, tuple[dict[str, JSONObject], list[SampleRow]]] = {
        t: ({variant_key(v): state.done[t][variant_key(v)] for v in variants}, _rows_of(samples, t, variants))
        for t in spec.tasks
    }
    result = None
    pieces = world.gather(mine)
    if world.is_main:
        for rank, piece in enumerate(pieces):
            for task, (evaluations, rows) in piece.items():
                if rank and spec.precision is not None:  # one baseline: the one scored on the most documents
                    evaluations, rows = longer_baseline(state.done.get(task, {}), evaluations, rows)
                state.done.setdefault(task, {}).update(evaluations)
                if rank:  # rank 0's rows are in its own log already
                    samples.append(task, rows)
        run = timer.finish(loaded.device_label)
        if not sharded:
            result = assemble_result(info, settings, state, run, samples, angular)
            write_json(run_dir.prune_drop_json, result.to_dict())
        else:
            rows = {t: _rows_of(samples, t, shard_variants) for t in spec.tasks}
            write_shard(out_dir, shard, print_, info, settings, state.done, rows, run, angular_path, shard_variants)
        samples.finish(list(spec.tasks), keep=spec.log_samples and not sharded)
        if samples.stale_removed:
            progress.note(
                f"removed {len(samples.stale_removed)} per-document file(s) an earlier run left in "
                f"{run_dir.samples_dir} (they described other variants): "
                + ", ".join(p.name for p in samples.stale_removed)
            )
    world.barrier()  # the result is on disk before any progress file goes
    if not world.is_main:
        samples.finish([], keep=False, main=False)
    state.remove()
    for journal in journals:
        journal.remove()
    if world.is_main:  # also a journal the simple engine never opened (a shared run resumed with --engine simple)
        for leftover in run_dir.journals():
            leftover.unlink(missing_ok=True)
    return result if world.size == 1 or sharded else world.gather(result)[0]


def _run_sequential(
    spec: PruneSpec,
    scorer: SequentialScorer,
    tasks: list[str],
    layers: list[int],
    run_dir: RunDir,
    suffix: str,
    state: PruneState,
    samples: SampleLog,
    progress: Progress,
) -> None:
    """--precision: score each task in rounds until every variant has stopped (`sequential.py`)."""
    assert spec.precision is not None
    for task in tasks if layers else []:  # a share without variants scores nothing, not even the baseline
        if all(state.has(task, v) for v in [None, *layers]):
            continue
        for variant, evaluation in run_sequential_task(
            scorer,
            task,
            layers,
            precision=spec.precision,
            round_size=spec.round_size,
            seed=spec.seed,
            run_dir=run_dir,
            suffix=suffix,
            state=state,
            samples=samples,
        ):
            progress.on_advance(1)
            progress.on_evaluation(EvaluationEvent(task, variant, scorer.engine, evaluation, scorer))


def _rows_of(samples: SampleLog, task: str, variants: list[int | None]) -> list[SampleRow]:
    """The per-document rows of `variants`, baseline first (what merge and rank 0 need of a share)."""
    by_variant = samples.read(task)
    return [row for v in variants for row in by_variant.get(v, [])]


def _prepared(spec: PruneSpec, progress: Progress) -> PreparedTasks:
    """The tasks built once (names, YAML, data, few-shot pools), checked for a sequential run."""
    progress.stage("Preparing tasks")
    prepared = prepare_tasks(spec)
    if spec.precision is not None:
        check_sequential_tasks(prepared.task_sets)
    return prepared


def _finished_with(run_dir: RunDir, tasks: tuple[str, ...]) -> bool:
    """Whether `run_dir` holds a finished prune_drop.json of exactly `tasks` and no run in progress."""
    if not run_dir.prune_drop_json.is_file() or run_dir.partial_jsons():
        return False
    try:
        recorded = read_json(run_dir.prune_drop_json).get("tasks")
    except ResultError:
        return False
    return isinstance(recorded, dict) and list(recorded) == list(tasks)
