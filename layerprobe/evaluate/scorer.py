"""Which scorer scores which task: the Scorer protocol, the task/model fit checks and the engine choice.

prune-drop's orchestrator asks `make_scorers` for one scorer per group of tasks and then only calls
`variant(layer)` and `score(task)`; everything about lm-eval, SQuAD and the shared-prefix engine stays
in this package. Heavy imports (torch, lm_eval) happen inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from layerprobe.core import CORPUS_TASK, SQUAD_TASK, TaskError
from layerprobe.evaluate.corpus_metric import CorpusScorer, no_corpus_metric
from layerprobe.evaluate.harness import HarnessScorer
from layerprobe.evaluate.shared import SharedPrefixScorer, unsupported_reason
from layerprobe.evaluate.squad import SquadTaskScorer, squad_examples
from layerprobe.evaluate.tasks import TaskSet, build_tasks
from layerprobe.model import CAUSAL_LM, EXTRACTIVE_QA, SEQ2SEQ

if TYPE_CHECKING:
    from layerprobe.core import PruneSpec
    from layerprobe.data import ImageWindow, SquadExample, Window
    from layerprobe.model import LayerStack, LoadedModel, Progress, Remover
    from layerprobe.results import Evaluation

__all__ = ["PreparedTasks", "Scorer", "check_tasks_fit_model", "make_scorers", "prepare_tasks"]


class Scorer(Protocol):
    """Scores tasks on the model as one variant (None: the baseline; l: block l removed) leaves it.

    `reports_progress` is True when `score` advances the progress bar itself (SQuAD, per window);
    otherwise the caller advances it by one per evaluation.
    """

    engine: str
    reports_progress: bool

    def variant(self, layer: int | None) -> AbstractContextManager[None]: ...

    def score(self, task: str) -> Evaluation: ...


def check_tasks_fit_model(tasks: tuple[str, ...], kind: str, model: str, engine: str = "auto") -> None:
    """Refuse task/model pairs that cannot be scored, before spending minutes loading weights."""
    if engine == "shared" and SQUAD_TASK in tasks:
        raise TaskError(
            "--engine shared scores lm-eval loglikelihood tasks; squad has no shared-prefix engine.",
            hint="Use --engine auto or simple for squad.",
        )
    for task in tasks:
        if task != CORPUS_TASK and kind == SEQ2SEQ:
            raise TaskError(
                f"{model} is an encoder-decoder: layerprobe scores its blocks with the corpus metric (the decoder "
                f"teacher-forced on the corpus windows), not with {task!r}, which it runs on causal LMs only.",
                hint=f"Use --task {CORPUS_TASK}.",
            )
        if task == CORPUS_TASK and kind == EXTRACTIVE_QA:  # every other kind has one (`model.corpus_estimator`)
            raise no_corpus_metric(model)
        if task == CORPUS_TASK:
            continue
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
                hint=f"Score it with --task {CORPUS_TASK} (extractive-QA encoders: --task {SQUAD_TASK}).",
            )


@dataclass
class PreparedTasks:
    """Everything about the tasks that needs no model, built before any weight is read.

    lm-eval tasks built (data loaded, few-shot pools checked) and SQuAD questions read, so a task
    mistake costs seconds, not a model load.
    """

    task_sets: dict[str, TaskSet] = field(default_factory=dict)  # lm-eval task name → TaskSet
    squad: list[SquadExample] | None = None  # SQuAD examples, when squad is asked for
    corpus_items: Sequence[Window | ImageWindow] | None = None  # images of a vision stack, read before loading


def prepare_tasks(spec: PruneSpec) -> PreparedTasks:
    """Build every lm-eval task and read SQuAD's questions: the model-independent half of scoring."""
    prepared = PreparedTasks()
    harness_tasks = [t for t in spec.tasks if t not in (SQUAD_TASK, CORPUS_TASK)]
    if harness_tasks:
        prepared.task_sets = {
            task: build_tasks(
                [task], spec.include_path, spec.num_fewshot, spec.seed, dict(spec.task_files), spec.trust_task_code
            )
            for task in harness_tasks
        }
    if SQUAD_TASK in spec.tasks:
        prepared.squad = squad_examples(spec)
    return prepared


def make_scorers(
    loaded: LoadedModel,
    stack: LayerStack,
    spec: PruneSpec,
    layers: list[int],
    progress: Progress,
    remover: Remover | None = None,
    prepared: PreparedTasks | None = None,
) -> list[tuple[Scorer, list[str]]]:
    """Pick the scorer (and engine) for each task: lm-eval tasks share one, SQuAD has its own.

    `remover` says what variant l removes (`model.Remover`; default: block l). `prepared` is
    `prepare_tasks(spec)`, done before the model was loaded (built here when not given).
    """
    prepared = prepared if prepared is not None else prepare_tasks(spec)
    harness_tasks = [t for t in spec.tasks if t not in (SQUAD_TASK, CORPUS_TASK)]
    scorers: list[tuple[Scorer, list[str]]] = []
    if harness_tasks:
        harness = _harness_scorer(loaded, stack, spec, prepared.task_sets, layers, remover, progress)
        scorers.append((harness, harness_tasks))
    if SQUAD_TASK in spec.tasks:
        scorers.append((SquadTaskScorer(loaded, stack, spec, progress, remover, prepared.squad), [SQUAD_TASK]))
    if CORPUS_TASK in spec.tasks:
        progress.stage("Reading corpus")
        corpus = CorpusScorer(
            loaded,
            stack,
            spec.corpus,
            list(layers),
            spec.batch_size,
            spec.engine,
            windows=prepared.corpus_items,
            remover=remover,
            seed=spec.seed,
        )
        scorers.append((corpus, [CORPUS_TASK]))
    return scorers


def _harness_scorer(
    loaded: LoadedModel,
    stack: LayerStack,
    spec: PruneSpec,
    task_sets: dict[str, TaskSet],
    layers: list[int],
    remover: Remover | None = None,
    progress: Progress | None = None,
) -> Scorer:
    """The simple engine, or the shared-prefix one where it applies (see evaluate/shared.py).

    When `--engine auto` falls back to the simple engine, `progress.note` says why in one line.
    """
    if spec.engine == "simple":
        return HarnessScorer(loaded, stack, spec, task_sets, layers, remover)

    reason = unsupported_reason(loaded, task_sets)
    if reason is None:
        return SharedPrefixScorer(loaded, stack, spec, task_sets, layers, remover)
    if spec.engine == "shared":
        raise TaskError(f"--engine shared cannot score this run: {reason}.", hint="Use --engine simple.")
    if progress is not None:
        progress.note(f"simple engine (one full evaluation per variant), not the shared-prefix one: {reason}")
    return HarnessScorer(loaded, stack, spec, task_sets, layers, remover)
