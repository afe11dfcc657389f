"""Reading finished results back for people and CI: the history of several runs and the one-page report.

Reads results only (never a model): runs.py reads a run directory, order.py decides which runs belong
together and in what order, adjacent.py and track.py compute the history (`layerprobe track`),
table.py lays it out as a table (terminal, markdown), heatmap.py, sections.py, assets.py and page.py
write the self-contained HTML report (`layerprobe report`); workflow.py ties each command together.
"""

from layerprobe.review.table import track_markdown, track_table
from layerprobe.review.workflow import read_track, write_report, write_track

__all__ = [
    "read_track",
    "track_markdown",
    "track_table",
    "write_report",
    "write_track",
]
