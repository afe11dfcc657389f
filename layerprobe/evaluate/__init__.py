"""How a model variant is scored: lm-evaluation-harness tasks, and SQuAD v1.1 for extractive-QA models."""

from layerprobe.evaluate.corpus_metric import CorpusScorer, corpus_windows
from layerprobe.evaluate.paired import paired_columns, paired_delta
from layerprobe.evaluate.scorer import check_tasks_fit_model, make_scorers, prepare_tasks

__all__ = [
    "check_tasks_fit_model",
    "corpus_windows",
    "CorpusScorer",
    "make_scorers",
    "paired_columns",
    "paired_delta",
    "prepare_tasks",
]
