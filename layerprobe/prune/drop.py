"""`layerprobe prune-drop`: ΔP(l) = P_pruned(l) − P_original, the score lost when block l alone is removed.

(Mix-LN eq. 9.) The model is loaded once. The baseline is scored, then each selected block is taken out
of the model in memory (`model.removed_blocks`: nothing copied, nothing reloaded, every other weight
untouched), the model is scored again and the block is put back. Every finished (task, variant) is saved
at once (`state.py`, `samples.py`), so `--resume` continues an interrupted run without recomputing
anything; the result is assembled from those records (`assemble.py`), or a shard of them is written
(`shards.py`). This module only runs the experiment: preflight (`preflight.py`: everything cheap, before
any weight) → the model and its variants → the plan (shards × ranks × schedule, chosen once) → execute →
finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from layerprobe.core import LayerprobeError, PruneSpec, Share, parse_layer_ranges
from layerprobe.evaluate import (
    PreparedTasks,
    corpus_metric_line,
    corpus_metric_record,
    keyed_by_task_name,
    make_scorers,
)
from layerprobe.model import (
    EvaluationEvent,
    LayerStack,
    LoadedModel,
    Progress,
    Remover,
    World,
    find_layers,
    image_only_blocks,
    load_model,
    model_info,
)
from layerprobe.model import world as distributed_world
from layerprobe.prune.agreement import (
    AngularSource,
    angular_model_mismatch,
    check_angular_fits,
)
from layerprobe.prune.assemble import assemble_result, prune_settings
from layerprobe.prune.preflight import Checked, preflight, prepared_tasks
from layerprobe.prune.resume import finished_result, resumed_line
from layerprobe.prune.samples import SampleLog, SampleRow
from layerprobe.prune.sequential import SequentialScorer, longer_baseline, run_sequential_task, with_baseline
from layerprobe.prune.shards import write_shard
from layerprobe.prune.state import PruneState, fingerprint, variant_key
from layerprobe.results import (
    JSONObject,
    ModelInfo,
    PruneDropResult,
    RunDir,
    RunTimer,
    rank_suffix,
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


@dataclass(frozen=True)
class Variants:
    """The loaded model's stack, what a variant removes, and the variants the run selects."""

    loaded: LoadedModel
    stack: Any
    remover: Remover
    layers: list[int]


@dataclass(frozen=True)
class Plan:
    """Who scores what, chosen once: the shard's variants, this rank's share of them, and the schedule.

    `sequential` is None for a full evaluation of each variant, else (precision, round size, seed) of
    the rounds (`sequential.py`); a sequential share then scores the baseline too, on the documents its
    own variants use.
    """

    sharded: bool  # `--shard 0/1` is a shard too: its file is what merge reads
    shard: Share
    shard_variants: list[int | None]
    variants: list[int | None]  # this rank's (and shard's)
    sequential: tuple[float, int, int] | None

    @classmethod
    def choose(cls, spec: PruneSpec, layers: list[int], shard: Share | None, world: World) -> Plan:
        share = shard or Share()
        shard_variants = share.of([None, *layers])
        variants = world.share.of(shard_variants)
        sequential = None if spec.precision is None else (spec.precision, spec.round_size, spec.seed)
        if sequential is not None:
            shard_variants = with_baseline(shard_variants)
            variants = with_baseline(world.share.of(shard_variants[1:]))
        return cls(shard is not None, share, shard_variants, variants, sequential)

    @property
    def layers(self) -> list[int]:
        """The blocks this rank removes (the baseline left out)."""
        return [v for v in self.variants if v is not None]


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

    preflight (everything cheap, before any weight) → the model and its variants → the plan (shards ×
    ranks × schedule, chosen once) → execute (score and record) → finish (gather, write, clean up).
    """
    progress = progress or Progress()
    spec = keyed_by_task_name(spec)  # a task given by its YAML path is keyed by its task name everywhere
    world = world or distributed_world()
    timer = RunTimer()
    out_dir = Path(out_dir)
    checked = preflight(spec, out_dir, resume and shard is None, loaded, progress)
    if checked.estimator is not None and world.is_main:
        progress.note(corpus_metric_line(checked.estimator))
    model = _model_and_variants(spec, checked, loaded, world, progress)
    info = model_info(model.loaded, model.stack)
    angular = _angular_of_this_model(spec, checked.angular, model.stack.num_layers, info, world, progress)
    print_ = fingerprint(spec, info)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir, suffix = RunDir(out_dir), rank_suffix(world.rank, world.size)  # each rank its own progress files
    settings = prune_settings(spec, model.layers, model.remover)
    if checked.estimator is not None:
        settings["corpus_metric"] = corpus_metric_record(checked.estimator, spec.seed)
    if resume and shard is None and run_dir.prune_drop_json.is_file() and not run_dir.partial_jsons():
        finished, reuse_line = finished_result(run_dir.prune_drop_json, settings, info)
        if world.is_main:
            progress.note(reuse_line)
        if finished is not None:
            return finished
    prepared = checked.prepared if checked.prepared is not None else prepared_tasks(spec, progress)
    if checked.images is not None:
        prepared.corpus_items = checked.images[1]
    plan = Plan.choose(spec, model.layers, shard, world)
    state = PruneState.open(out_dir, print_, resume, run_dir.partial_json(suffix).name)
    samples = SampleLog.open(out_dir, resume, suffix)
    unpaired = samples.reconcile(state)
    world.barrier()  # every rank has read the progress files before any rank writes its own
    journals = _execute(
        spec, plan, model, prepared, print_, resume, run_dir, suffix, state, samples, unpaired, progress
    )
    result = None
    pieces = world.gather(_share_of(spec, plan, state, samples))
    if world.is_main:
        _join(pieces, plan, state, samples)
        run = timer.finish(model.loaded.device_label)
        if not plan.sharded:
            result = assemble_result(info, settings, state, run, samples, angular)
            write_json(run_dir.prune_drop_json, result.to_dict())
        else:
            rows = {t: _rows_of(samples, t, plan.shard_variants) for t in spec.tasks}
            angular_path = angular.path if angular is not None else None
            write_shard(
                out_dir, plan.shard, print_, info, settings, state.done, rows, run, angular_path, plan.shard_variants
            )
        samples.finish(list(spec.tasks), keep=spec.log_samples and not plan.sharded)
        if samples.stale_removed:
            progress.note(
                f"removed {len(samples.stale_removed)} per-document file(s) an earlier run left in "
                f"{run_dir.samples_dir} (they described other variants): "
                + ", ".join(p.name for p in samples.stale_removed)
            )
    _clean_up(world, run_dir, state, samples, journals)
    return result if world.size == 1 or plan.sharded else world.gather(result)[0]


def _model_and_variants(
    spec: PruneSpec, checked: Checked, loaded: LoadedModel | None, world: World, progress: Progress
) -> Variants:
    """The model loaded (unless given), its stack, and the starts of the units each variant removes."""
    if loaded is None:
        progress.stage("Loading model")
        purpose = checked.estimator.purpose if checked.estimator is not None else "head"
        loaded = load_model(spec.model, purpose=purpose, lm_eval=checked.images is None, tokenizer=checked.tokenizer)
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
    return Variants(loaded, stack, remover, layers)


def _angular_of_this_model(
    spec: PruneSpec, angular: AngularSource | None, num_layers: int, info: ModelInfo, world: World, progress: Progress
) -> AngularSource | None:
    """The angular result to compare with, once the model is known: refused (asked for) or dropped (found)."""
    if angular is None:
        return None
    if spec.angular is not None:
        check_angular_fits(angular.result, angular.path, num_layers)
    mismatch = angular_model_mismatch(angular.result.model, info)
    if mismatch is not None and spec.angular is not None:
        raise LayerprobeError(
            f"{angular.path} measured another model ({mismatch}).",
            hint="Pass the angular.json of this model (layerprobe angular MODEL --out DIR), or omit --angular.",
        )
    if mismatch is not None:  # found in --out, not asked for: the run goes on without the comparison
        if world.is_main:
            progress.note(f"{angular.path} measured another model ({mismatch}); no agreement with it is recorded.")
        return None
    return angular


def _execute(
    spec: PruneSpec,
    plan: Plan,
    model: Variants,
    prepared: PreparedTasks,
    print_: dict[str, object],
    resume: bool,
    run_dir: RunDir,
    suffix: str,
    state: PruneState,
    samples: SampleLog,
    unpaired: int,
    progress: Progress,
) -> list[Any]:
    """Score this rank's variants not yet recorded, each recorded as it finishes; the answer journals opened."""
    total = len(spec.tasks) * len(plan.variants)
    remaining = sum(not state.has(t, v) for t in spec.tasks for v in plan.variants)
    scorers = (
        make_scorers(model.loaded, model.stack, spec, plan.layers, progress, model.remover, prepared)
        if remaining
        else []
    )
    journals = [
        scorer.keep_answers(run_dir.journal(suffix), print_, resume)
        for scorer, _ in scorers
        if hasattr(scorer, "keep_answers")
    ]
    if resume:
        batches = sum(journal.reused for journal in journals)
        damaged = state.damaged + unpaired + sum(journal.dropped for journal in journals)
        progress.note(resumed_line(total - remaining, total, batches, damaged, run_dir.path))
    progress.stage("Evaluating (task × variant)", remaining, "eval")
    with progress.watching_blocks(model.stack):
        for scorer, tasks in scorers:
            if plan.sequential is None:
                _run_full(scorer, tasks, plan.variants, state, samples, progress)
            else:
                _run_sequential(
                    plan.sequential,
                    cast(SequentialScorer, scorer),
                    tasks,
                    plan.layers,
                    run_dir,
                    suffix,
                    state,
                    samples,
                    progress,
                )
    return journals


def _run_full(
    scorer: Any, tasks: list[str], variants: list[int | None], state: PruneState, samples: SampleLog, progress: Progress
) -> None:
    """Score every variant on every pending task in full, recording each evaluation as it finishes."""
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


def _share_of(
    spec: PruneSpec, plan: Plan, state: PruneState, samples: SampleLog
) -> dict[str, tuple[dict[str, JSONObject], list[SampleRow]]]:
    """This rank's evaluations and per-document rows, per task (what rank 0 gathers)."""
    return {
        t: ({variant_key(v): state.done[t][variant_key(v)] for v in plan.variants}, _rows_of(samples, t, plan.variants))
        for t in spec.tasks
    }


def _join(
    pieces: list[dict[str, tuple[dict[str, JSONObject], list[SampleRow]]]],
    plan: Plan,
    state: PruneState,
    samples: SampleLog,
) -> None:
    """Rank 0: every rank's evaluations into its state and rows into its log (one baseline when sequential)."""
    for rank, piece in enumerate(pieces):
        for task, (evaluations, rows) in piece.items():
            if rank and plan.sequential is not None:  # one baseline: the one scored on the most documents
                evaluations, rows = longer_baseline(state.done.get(task, {}), evaluations, rows)
            state.done.setdefault(task, {}).update(evaluations)
            if rank:  # rank 0's rows are in its own log already
                samples.append(task, rows)


def _clean_up(world: World, run_dir: RunDir, state: PruneState, samples: SampleLog, journals: list[Any]) -> None:
    """Once the result is on disk (every rank waits for it): the progress files, logs and journals go."""
    world.barrier()  # the result is on disk before any progress file goes
    if not world.is_main:
        samples.finish([], keep=False, main=False)
    state.remove()
    for journal in journals:
        journal.remove()
    if world.is_main:  # also a journal the simple engine never opened (a shared run resumed with --engine simple)
        for leftover in run_dir.journals():
            leftover.unlink(missing_ok=True)


def _run_sequential(
    schedule: tuple[float, int, int],
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
    precision, round_size, seed = schedule
    for task in tasks if layers else []:  # a share without variants scores nothing, not even the baseline
        if all(state.has(task, v) for v in [None, *layers]):
            continue
        for variant, evaluation in run_sequential_task(
            scorer,
            task,
            layers,
            precision=precision,
            round_size=round_size,
            seed=seed,
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
