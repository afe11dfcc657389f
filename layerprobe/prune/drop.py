"""ΔP(l) = P_pruned(l) − P_original: the score lost when block l alone is removed (Mix-LN eq. 9).

The model is loaded once. The baseline is scored, then each selected block is taken out of the model in
memory (`layers.removed_blocks`: nothing copied, nothing reloaded, every other weight untouched), the
model is scored again and the block is put back. Every finished (task, variant) is saved at once, so
`--resume` continues an interrupted run without recomputing anything.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from layerprobe.core import CORPUS_TASK, LayerprobeError, PruneSpec, Share, parse_layer_ranges
from layerprobe.evaluate import check_tasks_fit_model, make_scorers, paired_columns, prepare_tasks
from layerprobe.model import (
    EvaluationEvent,
    LoadedModel,
    Progress,
    Remover,
    World,
    check_loadable,
    find_layers,
    load_config,
    load_model,
    load_tokenizer,
    model_info,
    model_kind,
    skeleton_stack,
)
from layerprobe.model import world as distributed_world
from layerprobe.prune.agreement import check_angular_fits, find_angular, load_angular_for, task_agreement
from layerprobe.prune.samples import SampleLog
from layerprobe.prune.shards import join_shards, write_shard
from layerprobe.prune.state import PruneState, corpus_settings, fingerprint, variant_key
from layerprobe.results import (
    AngularResult,
    MetricDrop,
    ModelInfo,
    PruneDropResult,
    RunDir,
    RunInfo,
    RunTimer,
    TaskDrop,
    from_rows,
    rank_suffix,
    to_rows,
    write_json,
)

__all__ = ["check_tasks_fit_model", "run_prune_drop"]


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

    `shard` (i of N) scores only that share of the variants and writes prune_drop.shard.json for
    `layerprobe merge` instead, returning None. Under `accelerate launch`/`torchrun` every rank scores
    a share of the variants (of the shard's), rank 0 gathers them and writes; every rank returns the result.
    """
    progress = progress or Progress()
    shard = shard or Share()
    world = world or distributed_world()
    timer = RunTimer()
    out_dir = Path(out_dir)
    if loaded is None:
        check_loadable(spec.model)  # e.g. bitsandbytes missing for --load-in-4bit: before any loading
    config = load_config(spec.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(spec.tasks, model_kind(config), spec.model.model, spec.engine)
    skeleton = skeleton_stack(spec.model) if loaded is None else None
    if skeleton is not None:
        parse_layer_ranges(spec.layers, skeleton.num_layers)  # fail before minutes of loading
    elif isinstance(getattr(config, "num_hidden_layers", None), int) and not spec.model.layers_path:
        parse_layer_ranges(spec.layers, config.num_hidden_layers)
    angular = find_angular(spec.angular, out_dir)
    known_layers = skeleton.num_layers if skeleton is not None else None
    if known_layers is None and not spec.model.layers_path:
        known_layers = getattr(config, "num_hidden_layers", None)
    angular_result = None if angular is None else load_angular_for(angular, known_layers)
    # Everything cheap before any weight: the tokenizer, then the tasks (names, YAML, data, few-shot pools).
    tokenizer = load_tokenizer(spec.model) if loaded is None else loaded.tokenizer
    progress.stage("Preparing tasks")
    prepared = prepare_tasks(spec)
    if loaded is None:
        progress.stage("Loading model")
        loaded = load_model(spec.model, purpose="head", lm_eval=True, tokenizer=tokenizer)
    stack = find_layers(loaded.model, spec.model.layers_path)
    remover = Remover.for_model(loaded.model, stack, spec.unit, spec.span)
    layers = remover.ablation.starts(stack.num_layers, parse_layer_ranges(spec.layers, stack.num_layers))
    if not layers:
        raise LayerprobeError(
            f"No selected start leaves a span of {spec.span} blocks inside the model's {stack.num_layers}.",
            hint=f"Select starts l <= {stack.num_layers - spec.span} with --layers.",
        )
    info = model_info(loaded, stack)
    if angular_result is not None:
        check_angular_fits(angular_result, angular, stack.num_layers)
    print_ = fingerprint(spec, info)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir, suffix = RunDir(out_dir), rank_suffix(world.rank, world.size)  # each rank its own progress files
    state = PruneState.open(out_dir, print_, resume, run_dir.partial_json(suffix).name)
    samples = SampleLog.open(out_dir, resume, suffix)
    samples.reconcile(state)
    world.barrier()  # every rank has read the progress files before any rank writes its own
    variants = world.share.of(shard.of([None, *layers]))
    remaining = sum(not state.has(t, v) for t in spec.tasks for v in variants)
    mine_layers = [v for v in variants if v is not None]  # this rank's (and shard's) share only
    scorers = make_scorers(loaded, stack, spec, mine_layers, progress, remover, prepared) if remaining else []
    journals = [
        scorer.keep_answers(run_dir.journal(suffix), print_, resume)
        for scorer, _ in scorers
        if hasattr(scorer, "keep_answers")
    ]
    progress.stage("Evaluating (task × variant)", remaining, "eval")
    with progress.watching_blocks(stack):
        for scorer, tasks in scorers:
            for layer in variants:
                pending = [t for t in tasks if not state.has(t, layer)]
                if not pending:
                    continue
                with scorer.variant(layer):
                    for task in pending:
                        evaluation = scorer.score(task)
                        samples.append(task, to_rows(layer, evaluation.per_sample))  # rows first: sample_log.py
                        state.record(task, layer, evaluation)
                        if not scorer.reports_progress:
                            progress.on_advance(1)
                        progress.on_evaluation(EvaluationEvent(task, layer, scorer.engine, evaluation, scorer))
    mine = {
        t: ({variant_key(v): state.done[t][variant_key(v)] for v in variants}, _rows_of(samples, t, variants))
        for t in spec.tasks
    }
    result = None
    pieces = world.gather(mine)
    if world.is_main:
        for rank, piece in enumerate(pieces):
            for task, (evaluations, rows) in piece.items():
                state.done.setdefault(task, {}).update(evaluations)
                if rank:  # rank 0's rows are in its own log already
                    samples.append(task, rows)
        settings = prune_settings(spec, layers, remover)
        run = timer.finish(loaded.device_label)
        if shard.whole:
            result = assemble_result(info, settings, state, run, samples, angular_result, angular)
            write_json(run_dir.prune_drop_json, result.to_dict())
        else:
            rows = {t: _rows_of(samples, t, shard.of([None, *layers])) for t in spec.tasks}
            write_shard(out_dir, shard, print_, info, settings, state.done, rows, run, angular)
        samples.finish(list(spec.tasks), keep=spec.log_samples and shard.whole)
    world.barrier()  # the result is on disk before any progress file goes
    if not world.is_main:
        samples.finish([], keep=False)
    state.remove()
    for journal in journals:
        journal.remove()
    return result if world.size == 1 or not shard.whole else world.gather(result)[0]


def _rows_of(samples: SampleLog, task: str, variants: list[int | None]) -> list[dict]:
    """The per-document rows of `variants`, baseline first (what merge and rank 0 need of a share)."""
    by_variant = samples.read(task)
    return [row for v in variants for row in by_variant.get(v, [])]


class _Rows:
    """Per-document rows held in memory (joined shards), read like a SampleLog."""

    def __init__(self, rows: dict[str, list[dict]]) -> None:
        self.rows = rows

    def read(self, task: str) -> dict[int | None, list[dict]]:
        by_variant: dict[int | None, list[dict]] = {}
        for row in self.rows.get(task, []):
            by_variant.setdefault(row["variant"], []).append(row)
        return by_variant


def prune_settings(spec: PruneSpec, layers: list[int], remover: Remover) -> dict:
    """The `settings` block of prune_drop.json (also what shards must agree on to be merged)."""
    return {
        "tasks": list(spec.tasks),
        "layers": layers,
        "limit": spec.limit,
        "num_fewshot": spec.num_fewshot,
        "seed": spec.seed,
        "batch_size": spec.batch_size,
        "max_state_bytes": spec.max_state_bytes,
        "include_path": spec.include_path,
        "squad_data": spec.squad_data,
        "unit": spec.unit,
        "span": spec.span,
        "sublayers": remover.module_paths(),
        "prefix_reuse": spec.prefix_reuse,
        **({"corpus": corpus_settings(spec.corpus)} if CORPUS_TASK in spec.tasks else {}),
    }


def merge_shards(paths: list[Path], out_dir: Path) -> PruneDropResult:
    """Join the shards of one `--shard i/N` run into `out_dir`/prune_drop.json, as one unsharded run writes it."""
    print_, info, settings, done, rows, run, angular = join_shards(paths)
    angular_result = None
    if angular is not None:
        angular = Path(angular)
        angular_result = load_angular_for(angular, info.num_layers)
    state = PruneState(Path(out_dir) / "unused", print_, done)
    result = assemble_result(info, settings, state, run, _Rows(rows), angular_result, angular)
    write_json(RunDir(out_dir).prune_drop_json, result.to_dict())
    return result


def assemble_result(
    info: ModelInfo,
    settings: dict,
    state: PruneState,
    run: RunInfo,
    samples: SampleLog | _Rows,
    angular_result: AngularResult | None,
    angular: Path | None,
) -> PruneDropResult:
    """prune_drop.json from a state holding every (task, variant) of the run and their per-document rows."""
    tasks, layers = settings["tasks"], settings["layers"]
    engines = sorted({state.get(t, v).engine for t in tasks for v in [None, *layers]})
    return PruneDropResult(
        model=info,
        engine="+".join(engines),
        settings=dict(settings),
        tasks={
            # A sublayer's ΔP is not what a block's angular distance predicts: no agreement block for it.
            task: assemble_task(
                state,
                task,
                layers,
                settings["limit"],
                samples,
                None if settings.get("unit", "block") != "block" else angular_result,
                angular,
                settings.get("span", 1),
            )
            for task in tasks
        },
        run=replace(run, prefix_reuse=prefix_reuse_status(state, tuple(tasks), [None, *layers])),
    )


def prefix_reuse_status(state: PruneState, tasks: tuple[str, ...], variants: list[int | None]) -> str | None:
    """How the shared engine treated shared prompt prefixes ("on", "off", "unavailable: …"); None if unused."""
    found = {state.get(t, v).prefix_reuse for t in tasks for v in variants} - {None}
    return "; ".join(sorted(found)) or None


def assemble_task(
    state: PruneState,
    task: str,
    layers: list[int],
    limit: float | None,
    samples: SampleLog | _Rows,
    angular: AngularResult | None = None,
    angular_path: Path | None = None,
    span: int = 1,
) -> TaskDrop:
    """Turn the recorded scores of one task into per-metric baseline/pruned/delta lists.

    The paired uncertainty of each ΔP comes from the per-document rows of the baseline and of the variant
    (`samples`); with an angular result, each metric also gets its agreement block.
    """
    baseline = state.get(task, None)
    variants = [state.get(task, layer) for layer in layers]
    rows = samples.read(task)
    values = {
        variant: from_rows(rows.get(variant, []), {m: s.spec() for m, s in evaluation.per_sample.items()})
        for variant, evaluation in zip([None, *layers], [baseline, *variants], strict=True)
    }
    metrics = {}
    for name, base in baseline.metrics.items():
        pruned = [v.metrics[name] for v in variants]
        metrics[name] = MetricDrop(
            baseline=base.value,
            baseline_stderr=base.stderr,
            higher_is_better=base.higher_is_better is not False,
            layers=list(layers),
            pruned=[p.value for p in pruned],
            stderr=[p.stderr for p in pruned],
            **paired_columns(values[None].get(name), [values[layer].get(name) for layer in layers]),
        )
    return TaskDrop(
        metrics=metrics,
        num_fewshot=baseline.num_fewshot,
        limit=limit,
        samples=baseline.samples,
        nonfinite=baseline.nonfinite + sum(v.nonfinite for v in variants),
        version=baseline.version,
        agreement=None if angular is None else task_agreement(angular, metrics, str(angular_path), span),
    )
