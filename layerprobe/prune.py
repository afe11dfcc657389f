"""ΔP(l) = P_pruned(l) − P_original: the score lost when block l alone is removed (Mix-LN eq. 9).

The model is loaded once. The baseline is scored, then each selected block is taken out of the model in
memory (`layers.removed_blocks`: nothing copied, nothing reloaded, every other weight untouched), the
model is scored again and the block is put back. Every finished (task, variant) is saved at once, so
`--resume` continues an interrupted run without recomputing anything.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from layerprobe.errors import TaskError
from layerprobe.layers import LayerStack, find_layers, removed_blocks
from layerprobe.models import (
    CAUSAL_LM,
    EXTRACTIVE_QA,
    LoadedModel,
    check_loadable,
    load_config,
    load_model,
    model_kind,
)
from layerprobe.progress import Progress
from layerprobe.provenance import library_versions, model_info
from layerprobe.prune_state import PruneState
from layerprobe.results import MetricDrop, ModelInfo, PruneDropResult, RunInfo, TaskDrop, write_json
from layerprobe.specs import SQUAD_TASK, PruneSpec, parse_layer_ranges

RESULT_NAME = "prune_drop.json"


def check_tasks_fit_model(tasks: tuple[str, ...], kind: str, model: str, engine: str = "auto") -> None:
    """Refuse task/model pairs that cannot be scored, before spending minutes loading weights."""
    if engine == "shared" and SQUAD_TASK in tasks:
        raise TaskError(
            "--engine shared scores lm-eval loglikelihood tasks; squad has no shared-prefix engine.",
            hint="Use --engine auto or simple for squad.",
        )
    for task in tasks:
        if task == SQUAD_TASK and kind == CAUSAL_LM:
            raise TaskError(
                f"'{SQUAD_TASK}' here scores extractive-QA encoders; {model} is a causal LM.",
                hint="For a causal LM use lm-eval's generative SQuAD task: --task squad_completion "
                "(or --task squadv2).",
            )
        if task == SQUAD_TASK and kind != EXTRACTIVE_QA:
            raise TaskError(
                f"{model} has no question-answering head, so it cannot be scored on SQuAD.",
                hint="Use a checkpoint fine-tuned for SQuAD (…ForQuestionAnswering), e.g. "
                "csarron/bert-base-uncased-squad-v1.",
            )
        if task != SQUAD_TASK and kind != CAUSAL_LM:
            raise TaskError(
                f"{task!r} is an lm-evaluation-harness task and needs a causal LM; {model} is an {kind} model.",
                hint="Score extractive-QA encoders with --task squad.",
            )


class HarnessScorer:
    """lm-eval tasks, built once, scored on whatever state the model is in (the simple engine)."""

    engine = "simple"

    def __init__(
        self, loaded: LoadedModel, stack: LayerStack, spec: PruneSpec, task_sets: dict[str, Any], layers: list[int]
    ) -> None:
        self.loaded, self.stack, self.spec, self.task_sets, self.layers = loaded, stack, spec, task_sets, layers
        self.lm = self.make_lm()

    def make_lm(self) -> Any:
        from layerprobe.evaluate.harness import make_lm

        return make_lm(self.loaded.model, self.loaded.tokenizer, self.spec.batch_size)

    @contextlib.contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        with removed_blocks(self.stack, [] if layer is None else [layer]):
            yield

    def score(self, task: str) -> dict[str, Any]:
        from layerprobe.evaluate.harness import evaluate

        scores = evaluate(self.lm, self.task_sets[task], limit=lm_eval_limit(self.spec.limit), seed=self.spec.seed)
        return scores_to_dict(scores[task].metrics, scores[task].num_fewshot, scores[task].samples, self.engine)


class SquadTaskScorer:
    """SQuAD v1.1 exact match and F1 for an extractive-QA model; questions tokenized once."""

    engine = "simple"

    def __init__(self, loaded: LoadedModel, stack: LayerStack, spec: PruneSpec) -> None:
        from layerprobe.evaluate.squad import SquadScorer
        from layerprobe.evaluate.squad_data import load_squad

        if spec.limit is not None and spec.limit < 1:  # a fraction of the questions, rounded up like lm-eval
            examples = load_squad(spec.squad_data)
            examples = examples[: math.ceil(len(examples) * spec.limit)]
        else:
            examples = load_squad(spec.squad_data, None if spec.limit is None else int(spec.limit))
        batch = spec.batch_size if isinstance(spec.batch_size, int) else 32
        self.stack = stack
        # The usual 384-token windows (stride 128), shortened for a model with fewer positions.
        positions = getattr(loaded.model.config, "max_position_embeddings", None)
        max_length = min(384, positions) if isinstance(positions, int) else 384
        self.scorer = SquadScorer(
            loaded.model,
            loaded.tokenizer,
            examples,
            max_length=max_length,
            doc_stride=min(128, max_length // 2),
            batch_size=batch,
        )

    @contextlib.contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        with removed_blocks(self.stack, [] if layer is None else [layer]):
            yield

    def score(self, task: str) -> dict[str, Any]:
        scores = self.scorer()
        samples = next(iter(scores.metrics.values())).samples
        return scores_to_dict(scores.metrics, 0, samples, self.engine, nonfinite=scores.nonfinite_windows)


def scores_to_dict(
    metrics: dict[str, Any], num_fewshot: int | None, samples: int | None, engine: str, nonfinite: int = 0
) -> dict[str, Any]:
    """The JSON form of one evaluation, as kept in the progress file (with the engine that made it)."""
    return {
        "metrics": {
            name: {"value": m.value, "stderr": m.stderr, "higher_is_better": m.higher_is_better}
            for name, m in metrics.items()
        },
        "num_fewshot": num_fewshot,
        "samples": samples,
        "engine": engine,
        "nonfinite": nonfinite,
    }


def lm_eval_limit(limit: float | None) -> int | float | None:
    """lm-eval reads an int as a document count and a float below 1 as a fraction."""
    if limit is None:
        return None
    return int(limit) if float(limit).is_integer() else limit


def fingerprint(spec: PruneSpec, info: ModelInfo) -> dict[str, Any]:
    """Everything that changes a score; two runs may share a progress file only if these agree.

    A hub model is pinned by its commit; a local checkpoint (commit None) by a digest of its files, so a
    retrained `./ckpt` is never mixed with the old one. Local task folders and SQuAD files are digested
    the same way, and library versions are included: a new lm-eval can change prompts.
    """
    versions = library_versions()
    return {
        "model": info.id,
        "revision": info.revision,
        "commit": info.commit,
        "files": files_digest(info.id) if info.commit is None and os.path.isdir(info.id) else None,
        "dtype": info.dtype,
        "quantization": info.quantization,
        "attn_implementation": info.attn_implementation,
        "model_args": info.model_args,
        "num_layers": info.num_layers,
        "layer_path": info.layer_path,
        "limit": spec.limit,
        "num_fewshot": spec.num_fewshot,
        "seed": spec.seed,
        "batch_size": spec.batch_size,
        "max_state_bytes": spec.max_state_bytes,  # splits the shared engine's batches: padding, so rounding
        "include_path": files_digest(spec.include_path) if spec.include_path else None,
        "squad_data": files_digest(spec.squad_data) if spec.squad_data else None,
        "versions": {k: versions.get(k) for k in ("torch", "transformers", "lm_eval")},
    }


def files_digest(path: str) -> str:
    """sha256 over the names, sizes and modification times of the files under `path` (or of `path`)."""
    import hashlib

    root = Path(path)
    if not root.exists():  # reported by the loader that needs it, with a proper message
        return f"{os.path.abspath(path)}@missing"
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(
            f"{file.relative_to(root) if root.is_dir() else file.name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode()
        )
    return f"{os.path.abspath(path)}@{digest.hexdigest()[:16]}"


def make_scorers(
    loaded: LoadedModel, stack: LayerStack, spec: PruneSpec, layers: list[int]
) -> list[tuple[Any, list[str]]]:
    """Pick the scorer (and engine) for each task."""
    harness_tasks = [t for t in spec.tasks if t != SQUAD_TASK]
    scorers: list[tuple[Any, list[str]]] = []
    if harness_tasks:
        scorers.append((make_harness_scorer(loaded, stack, spec, harness_tasks, layers), harness_tasks))
    if SQUAD_TASK in spec.tasks:
        scorers.append((SquadTaskScorer(loaded, stack, spec), [SQUAD_TASK]))
    return scorers


def make_harness_scorer(
    loaded: LoadedModel, stack: LayerStack, spec: PruneSpec, tasks: list[str], layers: list[int]
) -> HarnessScorer:
    """The simple engine, or the shared-prefix one where it applies (see evaluate/shared.py)."""
    from layerprobe.evaluate.harness import build_tasks

    task_sets = {task: build_tasks([task], spec.include_path, spec.num_fewshot, spec.seed) for task in tasks}
    if spec.engine == "simple":
        return HarnessScorer(loaded, stack, spec, task_sets, layers)
    from layerprobe.evaluate.shared import SharedPrefixScorer, unsupported_reason

    reason = unsupported_reason(loaded, task_sets)
    if reason is None:
        return SharedPrefixScorer(loaded, stack, spec, task_sets, layers)
    if spec.engine == "shared":
        raise TaskError(f"--engine shared cannot score this run: {reason}.", hint="Use --engine simple.")
    return HarnessScorer(loaded, stack, spec, task_sets, layers)


def run_prune_drop(
    spec: PruneSpec,
    out_dir: Path,
    resume: bool = False,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
) -> PruneDropResult:
    """Score the baseline and every selected block removed; write prune_drop.json into `out_dir`."""
    progress = progress or Progress()
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    if loaded is None:
        check_loadable(spec.model)
    config = load_config(spec.model) if loaded is None else loaded.model.config
    check_tasks_fit_model(spec.tasks, model_kind(config), spec.model.model, spec.engine)
    if isinstance(getattr(config, "num_hidden_layers", None), int) and not spec.model.layers_path:
        parse_layer_ranges(spec.layers, config.num_hidden_layers)  # fail before minutes of loading
    if loaded is None:
        progress.stage("Loading model")
        loaded = load_model(spec.model, purpose="head")
    stack = find_layers(loaded.model, spec.model.layers_path)
    layers = parse_layer_ranges(spec.layers, stack.num_layers)
    info = model_info(loaded, stack)
    state = PruneState.open(Path(out_dir), fingerprint(spec, info), resume)
    variants: list[int | None] = [None, *layers]
    remaining = sum(not state.has(t, v) for t in spec.tasks for v in variants)
    progress.stage("Preparing tasks")
    scorers = make_scorers(loaded, stack, spec, layers) if remaining else []
    progress.stage("Evaluating (task × variant)", remaining, "eval")
    for scorer, tasks in scorers:
        for layer in variants:
            pending = [t for t in tasks if not state.has(t, layer)]
            if not pending:
                continue
            with scorer.variant(layer):
                for task in pending:
                    state.record(task, layer, scorer.score(task))
                    progress.on_advance(1)
    engines = sorted({state.get(t, v).get("engine", "simple") for t in spec.tasks for v in variants})
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
        },
        tasks={task: assemble_task(state, task, layers, spec.limit) for task in spec.tasks},
        run=RunInfo(
            started_at=started.isoformat(timespec="seconds"),
            seconds=time.perf_counter() - clock,
            versions=library_versions(),
            device=loaded.device_label,
        ),
    )
    write_json(Path(out_dir) / RESULT_NAME, result.to_dict())
    state.remove()
    return result


def assemble_task(state: PruneState, task: str, layers: list[int], limit: float | None) -> TaskDrop:
    """Turn the recorded scores of one task into per-metric baseline/pruned/delta lists."""
    baseline = state.get(task, None)
    metrics = {}
    for name, base in baseline["metrics"].items():
        pruned = [state.get(task, layer)["metrics"][name] for layer in layers]
        metrics[name] = MetricDrop(
            baseline=base["value"],
            baseline_stderr=base["stderr"],
            higher_is_better=base["higher_is_better"] is not False,
            layers=list(layers),
            pruned=[p["value"] for p in pruned],
            stderr=[p["stderr"] for p in pruned],
        )
    nonfinite = sum(state.get(task, v).get("nonfinite", 0) for v in [None, *layers])
    return TaskDrop(
        metrics=metrics,
        num_fewshot=baseline["num_fewshot"],
        limit=limit,
        samples=baseline["samples"],
        nonfinite=nonfinite,
    )
