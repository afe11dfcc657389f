"""Reviewing several results of one model together: how stable their block rankings are (`stability`).

stability.py is the library call behind `layerprobe stability`; stability_inputs.py turns each result
file into per-block scores and the values its bootstrap redraws; stability_markdown.py writes the report.
Like the gate, this room reads result files only: it never loads a model.
"""

from layerprobe.review.stability import check_one_model, stability, unique_labels
from layerprobe.review.stability_markdown import (
    DIRECTION,
    data_text,
    pair_name,
    ranked_by,
    ranking_text,
    resampled_text,
    stability_markdown,
    value_with_interval,
)

__all__ = [
    "check_one_model",
    "data_text",
    "DIRECTION",
    "pair_name",
    "ranked_by",
    "ranking_text",
    "resampled_text",
    "stability",
    "stability_markdown",
    "unique_labels",
    "value_with_interval",
]
