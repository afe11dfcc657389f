"""The notebook face of a prune-drop result: its table, its one-line headline, its file (results/notebook.py).

A mixin of `PruneDropResult`, kept apart so that prune_drop.py stays the file's schema and validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerprobe.results.notebook import Notebook, Table, cell_text
from layerprobe.results.rundir import RunDir


class PruneDropFace(Notebook):
    """`to_frame()`, `plot()`, `save()`, repr and HTML of `PruneDropResult` (its fields: model, tasks, summary)."""

    model: Any
    tasks: dict[str, Any]

    def table(self) -> Table:
        """One row per task, metric and removed unit: the scores, ΔP and its 95 % interval (the one plots draw)."""
        rows = []
        for task, drop in self.tasks.items():
            for name, metric in drop.metrics.items():
                intervals = metric.interval95 or [None] * len(metric.layers)
                significant = metric.significant or [None] * len(metric.layers)
                for i, layer in enumerate(metric.layers):
                    low, high = intervals[i] or (None, None)
                    scores = (metric.baseline, metric.pruned[i], metric.delta[i])
                    rows.append((task, name, layer, *scores, low, high, significant[i]))
        columns = ("task", "metric", "layer", "baseline", "pruned", "delta", "ci95_low", "ci95_high", "significant")
        return {column: [row[c] for row in rows] for c, column in enumerate(columns)}

    def headline(self) -> str:
        summary: Any = self.to_dict()["summary"]  # computed as the file stores it
        task, first = next(iter(summary.items()))
        worst = first["most_harmful"]
        more = f" (+{len(summary) - 1} more tasks)" if len(summary) > 1 else ""
        harm = f", most harmful block {worst['layer']} (ΔP {cell_text(worst['delta'])})" if worst else ""
        return (
            f"{self.model.id}: {self.model.num_layers} blocks, {task} {first['metric']} "
            f"{cell_text(first['baseline'])}{harm}{more}"
        )

    def run_file(self, run: RunDir) -> Path:
        return run.prune_drop_json
