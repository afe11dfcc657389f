"""prune-drop's preflight: everything cheap is read and checked before any weight is loaded.

The config (tasks fit the model's kind, the selected blocks exist), `--out` (no stray progress file),
the angular.json to compare with, the tokenizer (and its chat template), and the tasks themselves (lm-eval's
names, YAML, data, few-shot pools) — unless `--resume` finds this run already finished in `--out`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerprobe.core import CORPUS_TASK, LayerprobeError, PruneSpec, ResultError, UnsupportedModel, parse_layer_ranges
from layerprobe.data import check_chat_template, images_before_loading
from layerprobe.evaluate import (
    PreparedTasks,
    check_sequential_tasks,
    check_tasks_fit_model,
    corpus_estimator_for,
    prepare_tasks,
)
from layerprobe.model import (
    CorpusEstimator,
    LayerStack,
    LoadedModel,
    Progress,
    check_loadable,
    find_layers,
    image_only_blocks,
    load_config,
    load_skeleton,
    load_tokenizer,
    memory_refusal,
    model_kind,
    skeleton_stack,
    untraceable_image_block,
)
from layerprobe.prune.agreement import (
    AngularSource,
    find_angular,
    load_angular_for,
)
from layerprobe.prune.state import check_state_paths
from layerprobe.results import (
    RunDir,
    read_json,
)


@dataclass(frozen=True)
class Checked:
    """What preflight read before any weight: the config, the tokenizer, the angular result, the tasks."""

    config: Any
    tokenizer: Any  # an image processor where the corpus metric reads images (a vision stack)
    angular: AngularSource | None
    prepared: PreparedTasks | None  # None: a finished run in --out may be reused (--resume); prepared if not
    estimator: CorpusEstimator | None  # what `--task corpus` scores on this model (model.corpus_estimator)
    images: Any  # (processor, image items) of a vision stack's corpus, read before any weight; else None


def preflight(
    spec: PruneSpec, out_dir: Path, may_reuse: bool, loaded: LoadedModel | None, progress: Progress
) -> Checked:
    """Everything cheap, before any weight: config, blocks selected, --out, angular.json, tokenizer, tasks."""
    if loaded is None:
        check_loadable(spec.model, progress.note)  # e.g. bitsandbytes missing for --load-in-4bit: before any loading
    config = load_config(spec.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(spec.tasks, model_kind(config), spec.model.model, spec.engine)
    skeleton = skeleton_stack(spec.model) if loaded is None else None
    if skeleton is not None:
        parse_layer_ranges(spec.layers, skeleton.num_layers)  # fail before minutes of loading
    elif isinstance(getattr(config, "num_hidden_layers", None), int) and not spec.model.layers_path:
        parse_layer_ranges(spec.layers, config.num_hidden_layers)
    if spec.unit != "block":  # a weightless skeleton's stack says which blocks run only with an image
        root = loaded.model if loaded is not None else load_skeleton(spec.model)[0]
        refuse_untraceable_units(skeleton or find_layers(root, spec.model.layers_path))
    check_state_paths(out_dir)
    angular_path = find_angular(spec.angular, out_dir)
    known_layers = skeleton.num_layers if skeleton is not None else None
    if known_layers is None and not spec.model.layers_path:
        known_layers = getattr(config, "num_hidden_layers", None)
    if isinstance(known_layers, int) and spec.unit == "block":
        refuse_variants_no_design_runs(spec, config, known_layers)
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
    reusable = may_reuse and finished_with(RunDir(out_dir), spec.tasks)
    prepared = None if reusable else prepared_tasks(spec, progress)
    return Checked(config, tokenizer, angular, prepared, estimator, images)


def refuse_variants_no_design_runs(spec: PruneSpec, config: Any, num_layers: int) -> None:
    """A selected variant that its design cannot run (KV sharing without the block that stores), before any weight."""
    stack_config = getattr(config, "text_config", None) or config
    if getattr(stack_config, "num_hidden_layers", None) != num_layers:
        return  # another stack than the config's text blocks (a tower, a chosen --layers-path)
    for start in parse_layer_ranges(spec.layers, num_layers):
        removed = range(start, start + spec.span)
        if removed.stop > num_layers:
            continue  # left out later, with its own note
        refused = memory_refusal(stack_config, [i for i in range(num_layers) if i not in removed])
        if refused is not None:
            raise UnsupportedModel(refused[0], hint=refused[1])


def refuse_untraceable_units(stack: LayerStack) -> None:
    """Sublayer units on a stack with image-only blocks (mllama), refused from the weightless skeleton.

    A text-only pass never calls such a block, so its attention and MLP cannot be traced (or scored);
    the same refusal would otherwise come only after the weights load, at the trace.
    """
    skipped = image_only_blocks(stack)
    if skipped:
        raise untraceable_image_block(stack.path, skipped[0])


def prepared_tasks(spec: PruneSpec, progress: Progress) -> PreparedTasks:
    """The tasks built once (names, YAML, data, few-shot pools), checked for a sequential run."""
    progress.stage("Preparing tasks")
    prepared = prepare_tasks(spec)
    if spec.sequential:
        check_sequential_tasks(prepared.task_sets)
    return prepared


def finished_with(run_dir: RunDir, tasks: tuple[str, ...]) -> bool:
    """Whether `run_dir` holds a finished prune_drop.json of exactly `tasks` and no run in progress."""
    if not run_dir.prune_drop_json.is_file() or run_dir.partial_jsons():
        return False
    try:
        recorded = read_json(run_dir.prune_drop_json).get("tasks")
    except ResultError:
        return False
    return isinstance(recorded, dict) and list(recorded) == list(tasks)
