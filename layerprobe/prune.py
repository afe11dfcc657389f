"""ΔP(l) = P_pruned(l) − P_original: the score lost when block l alone is removed (Mix-LN eq. 9).

The model is loaded once. The baseline is scored, then each selected block is taken out of the model in
memory (`layers.removed_blocks`: nothing copied, nothing reloaded, every other weight untouched), the
model is scored again and the block is put back. Every finished (task, variant) is saved at once, so
`--resume` continues an interrupted run without recomputing anything.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from layerprobe.ablation import Remover
from layerprobe.agreement import check_angular_fits, find_angular, load_angular_for, task_agreement
from layerprobe.errors import LayerprobeError
from layerprobe.evaluate.samples import from_rows, paired_columns, to_rows
from layerprobe.evaluate.scorer import check_tasks_fit_model, make_scorers, prepare_tasks
from layerprobe.layers import find_layers
from layerprobe.models import (
    LoadedModel,
    check_loadable,
    load_config,
    load_model,
    load_tokenizer,
    model_kind,
    skeleton_stack,
)
from layerprobe.progress import EvaluationEvent, Progress
from layerprobe.provenance import RunTimer, model_info
from layerprobe.prune_state import PruneState, corpus_settings, fingerprint
from layerprobe.results import PRUNE_DROP_JSON, AngularResult, MetricDrop, PruneDropResult, TaskDrop, write_json
from layerprobe.sample_log import SampleLog
from layerprobe.specs import CORPUS_TASK, PruneSpec, parse_layer_ranges

__all__ = ["check_tasks_fit_model", "run_prune_drop"]


def run_prune_drop(
    spec: PruneSpec,
    out_dir: Path,
    resume: bool = False,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
) -> PruneDropResult:
    """Score the baseline and every selected block removed; write prune_drop.json into `out_dir`."""
    progress = progress or Progress()
    timer = RunTimer()
    if loaded is None:
        check_loadable(spec.model)  # e.g. bitsandbytes missing for --load-in-4bit: before any loading
    config = load_config(spec.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(spec.tasks, model_kind(config), spec.model.model, spec.engine)
    skeleton = skeleton_stack(spec.model) if loaded is None else None
    if skeleton is not None:
        parse_layer_ranges(spec.layers, skeleton.num_layers)  # fail before minutes of loading
    elif isinstance(getattr(config, "num_hidden_layers", None), int) and not spec.model.layers_path:
        parse_layer_ranges(spec.layers, config.num_hidden_layers)
    angular = find_angular(spec.angular, Path(out_dir))
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
    state = PruneState.open(Path(out_dir), fingerprint(spec, info), resume)
    samples = SampleLog.open(Path(out_dir), resume)
    samples.reconcile(state)
    variants: list[int | None] = [None, *layers]
    remaining = sum(not state.has(t, v) for t in spec.tasks for v in variants)
    scorers = make_scorers(loaded, stack, spec, layers, progress, remover, prepared) if remaining else []
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
    engines = sorted({state.get(t, v).engine for t in spec.tasks for v in variants})
    result = PruneDropResult(
        model=info,
        engine="+".join(engines),
        settings={
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
        },
        tasks={
            # A sublayer's ΔP is not what a block's angular distance predicts: no agreement block for it.
            task: assemble_task(
                state,
                task,
                layers,
                spec.limit,
                samples,
                None if spec.unit != "block" else angular_result,
                angular,
                spec.span,
            )
            for task in spec.tasks
        },
        run=replace(timer.finish(loaded.device_label), prefix_reuse=prefix_reuse_status(state, spec.tasks, variants)),
    )
    write_json(Path(out_dir) / PRUNE_DROP_JSON, result.to_dict())
    samples.finish(list(spec.tasks), keep=spec.log_samples)
    state.remove()
    return result


def prefix_reuse_status(state: PruneState, tasks: tuple[str, ...], variants: list[int | None]) -> str | None:
    """How the shared engine treated shared prompt prefixes ("on", "off", "unavailable: …"); None if unused."""
    found = {state.get(t, v).prefix_reuse for t in tasks for v in variants} - {None}
    return "; ".join(sorted(found)) or None


def assemble_task(
    state: PruneState,
    task: str,
    layers: list[int],
    limit: float | None,
    samples: SampleLog,
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
