"""Reading finished results back for people and CI: a run's history, a one-page report, a ranking's stability.

Reads results only (never a model). `layerprobe track`: runs.py reads a run directory, order.py decides
which runs belong together and in what order, adjacent.py and track.py compute the history, table.py lays
it out (terminal, markdown). `layerprobe report`: heatmap.py, sections.py, assets.py and page.py write the
self-contained HTML page; workflow.py ties each command together. `layerprobe stability`: stability.py
is the library call, stability_inputs.py turns each result file into per-block scores and the values its
bootstrap redraws, stability_markdown.py writes the report.
"""

from layerprobe.review.adjacent import track_angular
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
from layerprobe.review.table import track_markdown, track_table
from layerprobe.review.workflow import read_track, write_report, write_track

__all__ = [
    "track_angular",
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
    "read_track",
    "track_markdown",
    "track_table",
    "write_report",
    "write_track",
]
