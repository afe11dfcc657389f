"""The notebook face of the results whose files are written above the plots room: stability and the gate's verdict.

`results/notebook.py` gives every result `to_frame()`, `plot()`, `save(dir)`, a short repr and `_repr_html_`;
the room that draws a kind registers its figure. A stability result's command also writes a markdown report
(review) and the gate's verdict is the gate's own object, so both are registered here, where the API that
returns them sees gate, review and plots at once. `Comparison` is the gate's `Verdict` with that face:
`lp.compare` returns one, and its `save(dir)` writes what `layerprobe compare --format json` prints
(compare.json) beside the figure `compare` draws (compare.png / .pdf).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from layerprobe.core import LayerprobeError
from layerprobe.gate import Verdict, compare_angular_figure, compare_prune_drop_figure, plot_verdict, verdict_to_dict
from layerprobe.plots import plot_stability, stability_figure
from layerprobe.results import (
    AngularResult,
    Notebook,
    PruneDropResult,
    RunDir,
    StabilityResult,
    Table,
    register_figures,
    write_text,
)
from layerprobe.review import stability_markdown


@dataclass(frozen=True, repr=False)
class Comparison(Verdict, Notebook):
    """The verdict of `lp.compare` (`.passed` is CI's answer), with a result's notebook face."""

    __repr__ = Notebook.__repr__  # the short one, not the dataclass's field dump Verdict inherits

    @classmethod
    def of(cls, verdict: Verdict) -> Comparison:
        """The same verdict as a `Comparison`."""
        return cls(**{f.name: getattr(verdict, f.name) for f in fields(verdict)})

    def table(self) -> Table:
        """One row per rule: the kind, the rule, both sides' values, the change, the allowed change, pass or fail."""
        rows = [
            (c.kind, r.name, r.subject, r.baseline, r.candidate, r.difference, r.limit, r.passed)
            for c in self.comparisons
            for r in c.results
        ]
        columns = ("kind", "rule", "subject", "baseline", "candidate", "change", "limit", "passed")
        return {column: [row[i] for row in rows] for i, column in enumerate(columns)}

    def headline(self) -> str:
        kinds = ", ".join(c.kind for c in self.comparisons)
        failed = (
            f"{len(self.failed)} of {len(self.results)} rules failed" if self.failed else f"{len(self.results)} rules"
        )
        return f"{'pass' if self.passed else 'regression'} ({kinds}): {failed}"

    def run_file(self, run: RunDir) -> Path:
        return run.compare_json

    def to_dict(self) -> dict[str, object]:
        """The verdict as `layerprobe compare --format json` prints it (schema layerprobe/compare@1)."""
        return json.loads(json.dumps(verdict_to_dict(self)))


def comparison_figure(verdict: Comparison) -> Any:
    """The figure `compare` draws for the first kind it draws (angular: three heatmaps; prune-drop: ΔP bars)."""
    for c in verdict.comparisons:
        baseline, candidate = c.baseline_result, c.candidate_result
        if isinstance(baseline, AngularResult) and isinstance(candidate, AngularResult):
            return compare_angular_figure(baseline, candidate)
        if isinstance(baseline, PruneDropResult) and isinstance(candidate, PruneDropResult):
            return compare_prune_drop_figure(baseline, candidate)
    raise LayerprobeError(
        "compare draws no figure for a depth comparison.", hint="Plot each side: lp.depth(...).plot()."
    )


def write_stability(result: StabilityResult, directory: Path) -> list[Path]:
    """What `layerprobe stability` writes beside stability.json: stability.md and the figure."""
    return [write_text(RunDir(directory).stability_md, stability_markdown(result)), *plot_stability(result, directory)]


register_figures(StabilityResult, stability_figure, write_stability)
register_figures(Comparison, comparison_figure, lambda verdict, directory: plot_verdict(verdict, directory))
