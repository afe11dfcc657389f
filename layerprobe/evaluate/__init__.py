"""How a model variant is scored: lm-evaluation-harness tasks, SQuAD v1.1 for extractive-QA models, the corpus.

This room owns scoring one in-memory model again and again as blocks are taken out of it: building
lm-eval tasks once (`tasks.py`, `task_sources.py`) and scoring them with lm-eval's own `evaluate`
(`harness.py`) or the shared-prefix engine (`shared.py`, `prefix_cache.py`, `replay.py`, `journal.py`),
SQuAD for QA encoders (`squad.py`), `--task corpus` (`corpus_metric.py`), the choice between them
(`scorer.py`) and the paired uncertainty of a score difference (`paired.py`). It may import data, model,
results, stats and core, and torch, transformers and lm-eval; it never imports measure, export, prune or
anything above them.
"""

from layerprobe.evaluate.corpus_metric import METRICS as CORPUS_METRICS
from layerprobe.evaluate.corpus_metric import (
    CorpusScorer,
    corpus_estimator_for,
    corpus_metric_line,
    corpus_metric_record,
    estimator_before_loading,
)
from layerprobe.evaluate.documents import check_sequential_tasks
from layerprobe.evaluate.paired import PairedColumns, paired_columns, paired_delta, within_range
from layerprobe.evaluate.scorer import PreparedTasks, Scorer, check_tasks_fit_model, make_scorers, prepare_tasks
from layerprobe.evaluate.task_sources import check_task_code, keyed_by_task_name, local_task_code

__all__ = [
    "check_sequential_tasks",
    "check_tasks_fit_model",
    "CORPUS_METRICS",
    "CorpusScorer",
    "corpus_metric_line",
    "corpus_estimator_for",
    "corpus_metric_record",
    "estimator_before_loading",
    "keyed_by_task_name",
    "check_task_code",
    "local_task_code",
    "make_scorers",
    "PairedColumns",
    "paired_columns",
    "within_range",
    "paired_delta",
    "PreparedTasks",
    "prepare_tasks",
    "Scorer",
]
